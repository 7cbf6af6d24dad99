package org.apache.poi.xssf.usermodel;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
/** Stand-in workbook: write() emits each sheet as "## name" and comma-separated rows (read by
 * Halyard's benchmarks/dally_public_perjob.py). */
public class XSSFWorkbook {
    private final List<XSSFSheet> sheets = new ArrayList<>();
    public XSSFSheet createSheet(String name) { XSSFSheet s = new XSSFSheet(name); sheets.add(s); return s; }
    public void write(OutputStream out) throws IOException {
        StringBuilder b = new StringBuilder();
        for (XSSFSheet s : sheets) {
            b.append("## ").append(s.name.trim()).append('\n');
            for (XSSFRow r : s.rows) b.append(String.join(",", r.cells)).append('\n');
        }
        out.write(b.toString().getBytes(StandardCharsets.UTF_8));
    }
    public void close() {}
}
