package org.apache.poi.xssf.usermodel;
import java.util.ArrayList;
import java.util.List;
/** Stand-in sheet: rows in order. */
public class XSSFSheet {
    final String name;
    final List<XSSFRow> rows = new ArrayList<>();
    XSSFSheet(String name) { this.name = name; }
    public XSSFRow createRow(int index) {
        while (rows.size() <= index) rows.add(new XSSFRow());
        return rows.get(index);
    }
}
