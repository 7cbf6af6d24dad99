# Stand-in for ASTRA-sim's AnalyticalAstra binary, called by aakash-sharma/cluster-sim's
# IntraJobScheduler.astra_sim() once per (job, GPU set) with ASTRA-sim's command line (through
# a wrapper: awk -f this -- ARGS). ASTRA-sim (the authors' analytical build with
# --compute-scale) is not on this machine, so the exposed communication comes from a table that
# benchmarks/dally_public_perjob.py writes (overheads-MODEL.tsv, else overheads.tsv, beside the
# workload folder; rows
# model, tier, GPUs per group, groups, exposed communication as a fraction of compute):
#   tier 2 = within one machine, 3 = across machines of a rack (a "P" dimension), 4 = across
#   racks ("PP"), the slowest dimension cluster-sim wrote into the network file;
#   GPUs per group and groups from its units-count: groups = the slowest dimension's units,
#   per group = the product of the others (per = groups = 0: any count, Table 1's 8-GPU figure,
#   as Halyard's dally-table1 profile applies it).
# Output: results/EndToEnd.csv with compute in column 13 and communication in column 14, as
# cluster-sim reads them.
BEGIN {
    for (i = 1; i < ARGC; i++) {
        split(ARGV[i], kv, "=")
        arg[kv[1]] = substr(ARGV[i], length(kv[1]) + 2)
    }
    net = arg["--network-configuration"]; work = arg["--workload-configuration"]; out = arg["--path"]
    text = ""
    while ((getline line < net) > 0) text = text line
    close(net)
    tier = 2
    if (index(text, "\"PP\"") > 0) tier = 4
    else if (index(text, "\"P\"") > 0) tier = 3
    units = text; sub(/.*"units-count":\[/, "", units); sub(/\].*/, "", units)
    n = split(units, u, ",")
    per = 1
    for (i = 1; i < n; i++) per *= u[i]
    groups = u[n]
    if (tier == 2) { per *= groups; groups = 1 }
    m = split(work, parts, "/"); model = parts[m]; sub(/\.txt$/, "", model)
    table = work; sub(/workload\/[^\/]*$/, "overheads-" model ".tsv", table)
    if ((getline line < table) <= 0) { table = work; sub(/workload\/[^\/]*$/, "overheads.tsv", table) }
    close(table)
    exact = -1; any = -1
    while ((getline line < table) > 0) {
        split(line, f, "\t")
        if (f[1] != model || f[2] != tier) continue
        if (f[3] == per && f[4] == groups) exact = f[5]
        if (f[3] == 0 && f[4] == 0) any = f[5]
    }
    close(table)
    pct = exact >= 0 ? exact : any
    if (pct < 0) { print "no overhead for " model " tier " tier " " per "x" groups > "/dev/stderr"; exit 1 }
    csv = out "EndToEnd.csv"
    print "a,b,c,d,e,f,g,h,i,j,k,l,compute,comm" > csv
    printf "0,0,0,0,0,0,0,0,0,0,0,0,1000000,%.17g\n", pct * 1000000 > csv  # print's %.6g would round
    close(csv)
    exit 0
}
