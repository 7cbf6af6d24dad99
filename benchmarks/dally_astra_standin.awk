# Stand-in for ASTRA-sim's AnalyticalAstra binary, called by aakash-sharma/cluster-sim's
# IntraJobScheduler.astra_sim() once per (job, GPU set) with ASTRA-sim's command line.
# ASTRA-sim (the authors' analytical build with --compute-scale) is not on this machine, so
# the exposed communication comes from Dally's Table 1 as Halyard's `dally-table1` profile
# applies it: the slowest tier the placement crosses (dimension type PP = across racks ->
# network, P = across machines -> rack, else machine), whatever the GPU count.
# benchmarks/dally_public_perjob.py writes the table (overheads.tsv beside the workload
# folder: model, machine, rack, network as fractions of compute) and calls this through a
# wrapper. Output: results/EndToEnd.csv with compute in column 13 and communication in
# column 14, as cluster-sim reads them.
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
    n = split(work, parts, "/"); model = parts[n]; sub(/\.txt$/, "", model)
    table = work; sub(/workload\/[^\/]*$/, "overheads.tsv", table)
    pct = -1
    while ((getline line < table) > 0) {
        split(line, f, "\t")
        if (f[1] == model) pct = f[tier]
    }
    close(table)
    if (pct < 0) { print "no overhead for model " model > "/dev/stderr"; exit 1 }
    csv = out "EndToEnd.csv"
    print "a,b,c,d,e,f,g,h,i,j,k,l,compute,comm" > csv
    print "0,0,0,0,0,0,0,0,0,0,0,0,1000000," (pct * 1000000) > csv
    close(csv)
    exit 0
}
