package gurobi;
public class GRBLinExpr {
    public void addTerm(double c, GRBVar v) {}
    public void addConstant(double c) {}
}
