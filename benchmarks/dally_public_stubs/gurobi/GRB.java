package gurobi;
/** Compile-time stand-in for Gurobi (not redistributable, not on this machine). Only cluster-sim's Themis
 * scheduler refers to it; the Dally, Tiresias and Gandiva runs never call it. Any call fails loudly. */
public class GRB {
    public static final char BINARY = 'B';
    public static final char LESS_EQUAL = '<';
    public static final char EQUAL = '=';
    public static final char GREATER_EQUAL = '>';
    public static final int MAXIMIZE = -1;
    public static final int MINIMIZE = 1;
    public enum IntParam { LogToConsole }
    public enum DoubleParam { TimeLimit }
    public enum IntAttr { Status }
    public enum DoubleAttr { ObjVal, X }
    public static class Status { public static final int OPTIMAL = 2; public static final int TIME_LIMIT = 9; }
}
