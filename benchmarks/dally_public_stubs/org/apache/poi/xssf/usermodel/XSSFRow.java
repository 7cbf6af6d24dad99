package org.apache.poi.xssf.usermodel;
import java.util.ArrayList;
import java.util.List;
import org.apache.poi.ss.usermodel.Cell;
/** Stand-in row: cells in column order. */
public class XSSFRow {
    final List<String> cells = new ArrayList<>();
    public Cell createCell(int column) {
        while (cells.size() <= column) cells.add("");
        return new Cell() {
            public void setCellValue(double v) { cells.set(column, Double.toString(v)); }
            public void setCellValue(String v) { cells.set(column, v.replace(",", ";")); }
        };
    }
}
