package gurobi;
public class GRBVar {
    public double get(GRB.DoubleAttr a) throws GRBException { throw new GRBException("Gurobi stand-in"); }
}
