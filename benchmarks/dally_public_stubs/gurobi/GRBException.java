package gurobi;
public class GRBException extends Exception {
    public GRBException(String m) { super(m); }
    public int getErrorCode() { return -1; }
}
