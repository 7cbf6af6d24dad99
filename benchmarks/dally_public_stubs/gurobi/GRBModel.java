package gurobi;
public class GRBModel {
    public GRBModel(GRBEnv env) throws GRBException { throw new GRBException("Gurobi stand-in"); }
    public void set(GRB.DoubleParam p, double v) throws GRBException {}
    public GRBVar addVar(double lb, double ub, double obj, char type, String name) throws GRBException { return null; }
    public void update() throws GRBException {}
    public void addConstr(GRBLinExpr l, char sense, double r, String n) throws GRBException {}
    public void addConstr(GRBLinExpr l, char sense, GRBVar r, String n) throws GRBException {}
    public void addConstr(GRBLinExpr l, char sense, GRBLinExpr r, String n) throws GRBException {}
    public void setObjective(GRBLinExpr e, int sense) throws GRBException {}
    public void optimize() throws GRBException {}
    public int get(GRB.IntAttr a) throws GRBException { return 0; }
    public double get(GRB.DoubleAttr a) throws GRBException { return 0; }
    public void computeIIS() throws GRBException {}
    public void write(String f) throws GRBException {}
    public void dispose() throws GRBException {}
}
