package org.apache.poi.ss.usermodel;
/** Stand-in for Apache POI's cell (Debian's POI lacks the OOXML schema metadata): a value kept as text. */
public interface Cell {
    void setCellValue(double v);
    void setCellValue(String v);
}
