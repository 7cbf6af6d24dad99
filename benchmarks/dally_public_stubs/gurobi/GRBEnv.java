package gurobi;
public class GRBEnv {
    public GRBEnv(String log) throws GRBException { throw new GRBException("Gurobi stand-in: not available"); }
    public void set(GRB.IntParam p, int v) throws GRBException {}
    public void dispose() throws GRBException {}
}
