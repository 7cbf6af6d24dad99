"""Dally beside its authors' simulator: aakash-sharma/cluster-sim and Halyard on the same jobs, joined per job.

    # once: a JDK (javac, java; 17 here) and the public simulator's two Java libraries from Debian,
    # and a checkout of aakash-sharma/cluster-sim, read in place (compiled into --build)
    apt-get install default-jdk-headless libjson-simple-java libcommons-collections4-java
    .venv/bin/python benchmarks/dally_public_perjob.py --cluster-sim /work/ext/cluster-sim \\
        --racks 2 --jobs 60 --seed 1 --arrival batch
    .venv/bin/python benchmarks/dally_public_perjob.py --from-json   # rewrite the page only

cluster-sim (Java 8+, built on Themis' ArtISt-sim) is compiled from the checkout into ``--build``
(default /work/ext/cluster-sim-build) with ``javac``, its sources unchanged and never copied here.
What it needs and cannot have here has a stand-in outside its modules:

* Gurobi (only its Themis scheduler calls it), and Apache POI's workbook (Debian's POI lacks the
  OOXML schema metadata): compile-time classes in ``benchmarks/dally_public_stubs/`` (its README);
  the Gurobi ones fail if ever called, the workbook writes its sheets as text.
* ASTRA-sim's ``AnalyticalAstra`` binary, which cluster-sim runs once per (job, GPU set) to get
  the placement's exposed communication (``IntraJobScheduler.astra_sim``; ASTRA-sim 1.0 with
  the authors' ``--compute-scale`` flag). The binary it is told to run (``astra_sim_bin_path``)
  is ``benchmarks/dally_astra_standin.awk``. With ``--profile table1`` (the default) it answers
  Table 1's figure for the slowest tier the placement crosses, as Halyard's ``dally-table1``
  profile does, so both sides run the same performance model and every difference left is a
  scheduling semantic. With ``--profile count`` it answers what the collective model fitted to
  Table 1 (``emulator/data/dally_table1.toml``, hierarchical all-reduce with a link per GPU)
  gives for the GPU counts per dimension cluster-sim writes, as ASTRA-sim is given them: the
  profile question, measured inside the authors' simulator (Halyard has no such profile, so
  those runs are compared only with each other).

Inputs Halyard writes: ``reproduce_dally.dally_trace`` draws the jobs (a canonical CSV for
Halyard); the same jobs go to cluster-sim's job JSON (``total_iterations`` x
``time_per_iteration`` = the run time on the job's GPUs with no communication, i.e. Halyard's
``duration_s`` over (1 + Table 1's figure at the job's tightest placement)), a cluster JSON
(lease 300 s, consolidation on, auto-tuned timers: -1 -1, one week of waits kept), a
one-dimension network (8 GPUs per machine; cluster-sim adds the machine and rack dimensions).
cluster-sim's per-job table comes from the workbook it writes (results/<run>/*.xlsx), read
with the standard library.

Prints, per policy: mean JCT, p99 JCT, makespan on each side, their ratio, the share of jobs
whose JCTs agree within 5 %, and both sides' CPU seconds (``getrusage`` of the child processes).
With ``--per-job`` it also stores every job's row of the join, with its waits after lease ends in both
simulators: cluster-sim's from two print lines compiled into the run's working folder
(:data:`TRACE_EDITS`, which change no decision), Halyard's from the event log of the same run made
in-process (checked against ``halyard simulate``'s JCTs); the page's per-job residual reads them.
Writes ``docs/reproductions/dally-public-comparison.json`` and the page
``docs/reproductions/dally-public-comparison.md``
(from ``benchmarks/dally_public_page.md``).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from reproduce_dally import dally_trace

from halyard.policies.registry import spelled_out
from halyard.traces import write_trace

ROOT = Path(__file__).resolve().parent.parent
PROFILE = ROOT / "emulator" / "data" / "profile_dally_table1.toml"
STANDIN = Path(__file__).with_name("dally_astra_standin.awk")
STUBS = Path(__file__).with_name("dally_public_stubs")
PAGE_TEMPLATE = Path(__file__).with_name("dally_public_page.md")
JARS = ("json-simple", "commons-collections4")  # Debian: libjson-simple-java, libcommons-collections4-java
GPUS_PER_MACHINE = 8  # Dally §5.1.2
MACHINES_PER_RACK = 8  # Dally §5.1.2
LEASE_S = 300.0  # Halyard's round (reproduce_dally.ROUND_S); cluster-sim counts its timers in leases
EVENT_S = 60.0  # one cluster-sim iteration event (time_per_iteration x iteration_granularity): JCTs to 1 min
HISTORY_S = 7 * 86400.0  # the auto-tuner's window, one week as policies/dally.py HISTORY_LIMIT_S (cluster-sim: leases)
AGREE = 0.05  # a job agrees when the JCTs differ by under 5 %
MANUAL_S = 12 * 3600.0  # Dally-manual's 12 h + 12 h (§4.3.2); cluster-sim takes them in leases
# Halyard policy family -> cluster-sim scheduler (globalsched/InterJobSchedulerFactory.java) and its
# machine and rack delay timers in seconds (-1: the auto-tuner)
PAIRS = {"dally": ("Dally", -1.0, -1.0), "dally-manual": ("Dally", MANUAL_S, MANUAL_S),
         "dally-literal": ("Dally", -1.0, -1.0), "dally-manual-literal": ("Dally", MANUAL_S, MANUAL_S),
         "tiresias": ("Tiresias", -1.0, -1.0), "gandiva": ("Gandiva", -1.0, -1.0)}
# Halyard's readings of Dally set beside cluster-sim's in the headline table: the paper's text, Halyard's
# milder lease, cluster-sim's re-auction of a round's leases at once, the same with staggered releases (the
# `dally` preset before issue 35's chain), and the `dally` preset (re-auction at each lease's own end, with
# cluster-sim's iteration events and 1 s per GPU, policies/registry.py DALLY_READINGS).
READINGS = ("dally-literal", "dally-literal+lease", "dally-literal+reauction", "dally-literal+reauction+staggered",
            "dally")
NO_LEASE_S = 1e9  # --public-lease-s for "no lease ends": longer than any run (timers stay in seconds)
# The line cluster-sim prints for every GPU set an auction gives a job (InterJobScheduler.multiGPUResourceAllocator).
ALLOCATED = re.compile(r"Allocated \+ (\d+) GPUs to JobId: (\d+)")


def overheads() -> dict[str, tuple[float, float, float]]:
    """Model -> (machine, rack, network) exposed communication as a fraction of compute (Table 1)."""
    data = tomllib.loads(PROFILE.read_text(encoding="utf-8"))["tier_overhead"]
    return {m: tuple(t[k]["value"] for k in ("machine", "rack", "network")) for m, t in data.items()}


def tightest_overhead(model: str, gpus: int, table: dict) -> float:
    """Table 1's figure at the job's tightest placement (none on one GPU), as Halyard's duration_s includes it."""
    if gpus <= 1:
        return 0.0
    machine, rack, network = table[model]
    if gpus <= GPUS_PER_MACHINE:
        return machine
    return rack if gpus <= GPUS_PER_MACHINE * MACHINES_PER_RACK else network


def classpath(build: Path) -> str:
    jars = [f"/usr/share/java/{j}.jar" for j in JARS if Path(f"/usr/share/java/{j}.jar").exists()]
    return ":".join([str(build), *jars])


# --public-variant: cluster-sim with one line of one module changed, to measure what that line does (an
# attribution run, never the side-by-side itself). The checkout is read, the changed module is written
# and compiled in the run's working folder and put ahead of --build on the class path.
# "running-jobs-wait": InterJobScheduler.multiGPUResourceAllocator lets a job bid only while it waits for
# GPUs. Unchanged, every job whose next-iteration GPU set is empty bids, and IntraJobScheduler.startIteration
# empties that set at every iteration start, so running jobs bid too and keep what they win unused
# (policies/dally_clustersim.py says how; Halyard's +hoard).
VARIANTS = {"running-jobs-wait": (
    "globalsched/InterJobScheduler.java",
    "\t\t\tif (!job.getGPUsAvailableForNextIteration().isEmpty()) {",
    "\t\t\tif (!job.isWaitingForResources()) continue;  // Halyard's --public-variant running-jobs-wait\n",
    "running jobs do not bid")}


# --per-job: two lines that print, and change nothing else, so that each job's releases and auction wins have their
# instants (the per-job residual): a lease end that leaves a job waiting (IntraJobScheduler.endIteration, as it sets
# mIsWaiting) and every GPU set an auction gives (InterJobScheduler.multiGPUResourceAllocator).
TRACE = "HALYARD-TRACE"
TRACE_EDITS = (
    ("localsched/IntraJobScheduler.java", "\t\t\tmIsWaiting = true;\n",
     f'\t\t\tSystem.out.println("{TRACE} release " + Simulation.getSimulationTime() + " " + mJobId);\n'),
    ("globalsched/InterJobScheduler.java", "\t\t\tbid.getJob().notifyResourceAssignment(gpuAllocation);",
     f'\t\t\tSystem.out.println("{TRACE} alloc " + Simulation.getSimulationTime() + " " + job.getJobId());\n'))


def compile_variant(checkout: Path, build: Path, variant: str | None, work: Path, trace: bool = False) -> Path:
    """The classes of ``variant`` (:data:`VARIANTS`; with ``trace`` the :data:`TRACE_EDITS` as well), compiled in
    ``work``; they go ahead of ``build``."""
    edits = ([VARIANTS[variant][:3]] if variant else []) + (list(TRACE_EDITS) if trace else [])
    out = work / f"variant-{variant or 'unchanged'}{'-traced' if trace else ''}"
    (out / "src").mkdir(parents=True, exist_ok=True)
    changed: dict[str, str] = {}
    for module, line, insert in edits:
        source = changed.get(module) or (checkout / "src" / "main" / "java" / "com" / "wisr" / "mlsched"
                                         / module).read_text(encoding="utf-8")
        if source.count(line) != 1:
            raise SystemExit(f"--public-variant {variant}: {module} no longer has the line it changes")
        changed[module] = source.replace(line, insert + line)
    files = []
    for module, source in changed.items():
        files.append(out / "src" / Path(module).name)
        files[-1].write_text(source, encoding="utf-8")
    subprocess.run(["javac", "-nowarn", "-d", str(out / "classes"), "-cp", classpath(build), *map(str, files)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return out / "classes"


def compile_public(checkout: Path, build: Path, stubs: list[Path]) -> None:
    if (build / "com" / "wisr" / "mlsched" / "Simulation.class").exists():
        return
    build.mkdir(parents=True, exist_ok=True)
    sources = sorted(str(p) for p in (checkout / "src" / "main" / "java").rglob("*.java"))
    for stub in stubs:
        sources += sorted(str(p) for p in stub.rglob("*.java"))
    subprocess.run(["javac", "-nowarn", "-d", str(build), "-cp", classpath(build), *sources], check=True)


def count_overheads() -> list[tuple[str, int, int, int, float]]:
    """(model, tier, GPUs per group, groups, exposed fraction) from the collective model fitted to Table 1
    (halyard.emulator.calibration): a ring in the machine (tier 2); hierarchical all-reduce with a
    link per GPU across machines (3) or racks (4), as that fit reproduces Table 1's 8-GPU cells."""
    from halyard.emulator.calibration import load_dally_table1
    from halyard.emulator.collectives import exposed_s, hierarchical_allreduce_s, ring_allreduce_s
    t = load_dally_table1()
    net = t.network
    rows = []
    for name, w in t.workloads.items():
        for per in range(1, 65):
            c = ring_allreduce_s(w.gradient_bytes, per, net.intra_gbyte_s, net.node_latency_s, messages=w.layers)
            rows.append((name, 2, per, 1, exposed_s(c, w.compute_s, w.layers) / w.compute_s))
            for groups in range(2, 65):
                if per * groups > 1024:
                    break
                for tier, bw, lat in ((3, net.rack_gbyte_s, net.rack_latency_s),
                                      (4, net.network_gbyte_s, net.network_latency_s)):
                    c = hierarchical_allreduce_s(w.gradient_bytes, per, groups, net.intra_gbyte_s, bw,
                                                 net.node_latency_s, lat, messages=w.layers, rails=True)
                    rows.append((name, tier, per, groups, exposed_s(c, w.compute_s, w.layers) / w.compute_s))
    return rows


def write_public_inputs(jobs: list, folder: Path, racks: int, table: dict, lease_s: float,
                        profile: str, event_s: float = EVENT_S) -> dict[str, Path]:
    """cluster-sim's job, cluster, network and system files for ``jobs`` (Halyard JobSpecs)."""
    astra = folder / "astra"
    (astra / "workload").mkdir(parents=True, exist_ok=True)
    fitted = count_overheads() if profile == "count" else []
    for model, figures in table.items():  # one file per model: the stand-in reads it at every call
        (astra / "workload" / f"{model}.txt").write_text(f"stand-in: see overheads-{model}.tsv\n")
        with open(astra / f"overheads-{model}.tsv", "w") as f:
            for tier, fraction in zip((2, 3, 4), figures, strict=True):
                f.write(f"{model}\t{tier}\t0\t0\t{fraction}\n")
            for row in fitted:
                if row[0] == model:
                    f.write("\t".join(str(x) for x in row) + "\n")
    wrapper = astra / "AnalyticalAstra"  # awk would read ASTRA-sim's --flags as its own: pass them after --
    wrapper.write_text(f'#!/bin/sh\nexec awk -f "{STANDIN}" -- "$@"\n')
    wrapper.chmod(0o755)
    rows = []
    for j in jobs:
        base_s = j.duration_s / (1.0 + tightest_overhead(j.model, j.num_gpus, table))
        rows.append({"job_id": str(int(j.job_id[1:])), "job_group_id": str(int(j.job_id[1:])), "user": "u",
                     "model": j.model, "total_iterations": str(max(1, round(base_s * j.num_gpus / event_s))),
                     "time_per_iteration": str(event_s), "max_parallelism": str(j.num_gpus), "random_seed": "1",
                     "cross_slot_slowdown": "1", "cross_machine_slowdown": "1", "cross_rack_slowdown": "1",
                     "loss_function_type": "sublinear", "arrival_time": repr(float(j.submit_time))})
    paths = {"jobs": folder / "jobs.json", "cluster": folder / "cluster.json", "network": folder / "network.json",
             "system": folder / "system.txt", "nw": folder / "nw_overhead.csv",
             "logging": folder / "logging.properties"}
    paths["jobs"].write_text(json.dumps(rows, indent=1))
    paths["cluster"].write_text(json.dumps({
        "lease_time": repr(lease_s), "iteration_granularity": "1", "fairness_threshold": "0.0", "epsilon": "1.0",
        "should_use_config": "false", "consolidate": "true", "astra_sim_path": str(astra),
        "astra_sim_bin_path": str(wrapper)}))
    paths["network"].write_text(json.dumps({
        "topology-name": "dally", "topologies-per-dim": ["Switch"], "dimension-type": ["N"], "dimensions-count": 1,
        "units-count": [GPUS_PER_MACHINE], "links-count": [GPUS_PER_MACHINE], "link-latency": [1],
        "link-bandwidth": [300], "nic-latency": [0], "router-latency": [0], "hbm-latency": [1],
        "hbm-bandwidth": [1], "hbm-scale": [0]}))
    paths["system"].write_text("".join(f"{k}-implementation: ring_ring_ring\n"
                                       for k in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")))
    paths["nw"].write_text("".join(f"{m},1,1\n" for m in table))
    paths["logging"].write_text("handlers=\n.level=OFF\n")  # its loggers are at ALL: silence the console
    return paths


def read_workbook(path: Path) -> dict[int, dict[str, float]]:
    """cluster-sim's job-stats sheet (as the POI stand-in writes it: "## sheet" then CSV rows): job id ->
    start, end, arrival, queue delay, GPU time, comm time."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = lines.index("## job-stats") + 2  # the sheet's name, then its header row
    out = {}
    for line in lines[start:]:
        if line.startswith("## "):
            break
        v = [float(x) if x else math.nan for x in line.split(",")]
        out[int(v[0])] = {"start": v[1], "end": v[2], "run": v[3], "queue": v[4], "gpu_time": v[6], "comm": v[10],
                          "arrival": v[-1]}
    return out


def child_cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def run_public(checkout: Path, build: Path, paths: dict[str, Path], racks: int, pair: tuple[str, float, float],
               lease_s: float, work: Path, timeout_s: float, variant: Path | None = None
               ) -> tuple[dict[int, dict[str, float]], float, float]:
    """``variant``: classes compiled by :func:`compile_variant`, ahead of ``build`` on the class path."""
    scheduler, rack_s, nw_s = pair
    rack_timer, nw_timer = (t if t < 0 else t / lease_s for t in (rack_s, nw_s))  # in leases
    run = f"{scheduler}-{racks}r-{rack_s:g}-{nw_s:g}-{lease_s:g}" + (f"-{variant.parent.name}" if variant else "")
    path = classpath(build) if variant is None else f"{variant}:{classpath(build)}"
    cmd = ["nice", "-n", "10", "java", f"-Djava.util.logging.config.file={paths['logging']}", "-Xmx4g",
           "-cp", path, "com.wisr.mlsched.Simulation", str(racks), str(MACHINES_PER_RACK), scheduler,
           str(paths["cluster"]), str(paths["jobs"]), str(paths["network"]), str(paths["system"]), str(paths["nw"]),
           run, str(rack_timer), str(nw_timer), str(max(1, int(HISTORY_S / lease_s)))]
    (work / "results").mkdir(exist_ok=True)  # it makes results/<run>/ with mkdir, not mkdirs
    cpu0, wall0 = child_cpu(), time.time()
    with open(work / f"{run}.log", "w") as log:
        subprocess.run(cmd, cwd=work, stdout=log, stderr=subprocess.STDOUT, check=True, timeout=timeout_s)
    cpu, wall = child_cpu() - cpu0, time.time() - wall0
    book = read_workbook(next((work / "results" / run).glob("*.xlsx")))
    for job, count in placements(work / f"{run}.log").items():
        if job in book:
            book[job]["placements"] = count
    for job, instants in traced(work / f"{run}.log").items():
        if job in book:
            book[job].update(instants)
    (work / f"{run}.log").unlink()  # its progress lines: hundreds of MB on the larger runs
    return book, cpu, wall


def traced(log: Path) -> dict[int, dict[str, list[float]]]:
    """Job id -> its "release" and "alloc" instants, from the :data:`TRACE_EDITS` lines (none when not traced)."""
    out: dict[int, dict[str, list[float]]] = {}
    with open(log, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith(TRACE):
                _, kind, t, job = line.split()
                out.setdefault(int(job), {"release": [], "alloc": []})[kind].append(float(t))
    return out


def placements(log: Path) -> dict[int, int]:
    """Job id -> the GPU sets cluster-sim's auctions gave it (its "Allocated + N GPUs to JobId: J" lines)."""
    out: dict[int, int] = {}
    with open(log, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("Allocated"):
                m = ALLOCATED.match(line)
                if m:
                    out[int(m.group(2))] = out.get(int(m.group(2)), 0) + 1
    return out


def run_halyard(trace: Path, racks: int, policy: str, work: Path, timeout_s: float, catalog: str = "dally-table1"
                ) -> tuple[dict[int, dict[str, float]], float, float]:
    """``catalog`` "builtin": Halyard's own collective model (overhead by GPU count and tier) instead of Table 1."""
    out = work / f"halyard-{policy}-{racks}r-{catalog}"
    cmd = ["nice", "-n", "10", str(Path(sys.executable).with_name("halyard")), "simulate", "--trace", str(trace),
           "--cluster", f"dally-{racks}rack", "--policy", policy, "--contention", "off",
           "--round-s", str(LEASE_S), "--out-dir", str(out), "--table-format", "csv", "--no-progress"]
    if catalog != "builtin":
        cmd += ["--catalog", catalog]
    cpu0, wall0 = child_cpu(), time.time()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=timeout_s)
    cpu, wall = child_cpu() - cpu0, time.time() - wall0
    with open(out / "jobs.csv") as f:
        rows = {int(r["job_id"][1:]): r for r in csv.DictReader(f)}
    return {i: {"jct": float(r["jct_s"]) if r.get("state") == "COMPLETED" else math.nan,
                "queue": float(r.get("queue_s") or "nan"), "run": float(r.get("run_s") or "nan"),
                "preemptions": float(r.get("preemptions") or 0), "restarts": float(r.get("restarts") or 0),
                "submit": float(r["submit_s"]), "end": float(r.get("finish_s") or "nan"),
                "start": float(r.get("first_start_s") or "nan"), "placements": int(r.get("placements") or 0)}
            for i, r in rows.items()}, cpu, wall


def halyard_instants(jobs: list, racks: int, policy: str, ours: dict) -> dict[int, dict[str, list[float]]]:
    """Job number -> its "release" (preempted: a lease end that left it waiting) and "alloc" (started) instants in
    Halyard's run of ``policy``, from the event log of the same run in-process (``halyard simulate``'s own
    construction; checked against its jobs.csv: every JCT the same)."""
    from halyard.datamodel import EventKind, load_cluster
    from halyard.emulator.catalog import load_model_catalog
    from halyard.policies import make_policy
    from halyard.scheduling import Simulator
    from halyard.scheduling.timing import performance_model_for
    scheduler = make_policy(policy)
    perf = performance_model_for(scheduler, contention="off", catalog=load_model_catalog("dally-table1"))
    sim = Simulator(load_cluster(f"dally-{racks}rack"), scheduler, perf, round_s=LEASE_S)
    sim.run(jobs)
    out: dict[int, dict[str, list[float]]] = {}
    for e in sim.core.log:
        kind = {EventKind.PREEMPTED: "release", EventKind.STARTED: "alloc"}.get(e.kind)
        if kind is not None:
            out.setdefault(int(e.job_id[1:]), {"release": [], "alloc": []})[kind].append(e.time)
    for job, record in sim.core.records.items():
        jct = math.nan if record.end_time is None else record.end_time - record.spec.submit_time
        if not math.isclose(jct, ours[int(job[1:])]["jct"], rel_tol=1e-6):
            raise SystemExit(f"{policy}: the in-process run differs from halyard simulate's at {job}")
    return out


def p99(values: list[float]) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, math.ceil(0.99 * len(s)) - 1)]


def compare(jobs: list, pub: dict, ours: dict, per_job: bool = False) -> dict:
    """Per-job join on job number; the figures of the page (with ``per_job``, every job's row as well)."""
    ids = sorted(int(j.job_id[1:]) for j in jobs)
    done = [i for i in ids if i in pub and not math.isnan(ours[i]["jct"])]
    pj = {i: pub[i]["end"] - pub[i]["arrival"] for i in done}
    oj = {i: ours[i]["jct"] for i in done}
    first = min(j.submit_time for j in jobs)
    p_mk = max(pub[i]["end"] for i in pub) - first
    o_mk = max(oj[i] + ours[i]["submit"] for i in done) - first
    agree = [i for i in done if abs(oj[i] - pj[i]) <= AGREE * max(pj[i], 1.0)]
    spec = {int(j.job_id[1:]): j for j in jobs}
    worst = sorted(done, key=lambda i: abs(oj[i] - pj[i]), reverse=True)[:8]
    return {"jobs": len(ids), "finished_both": len(done), "public_finished": len(pub),
            "public_mean_jct_s": sum(pj.values()) / len(done), "halyard_mean_jct_s": sum(oj.values()) / len(done),
            "public_p99_jct_s": p99(list(pj.values())), "halyard_p99_jct_s": p99(list(oj.values())),
            "public_makespan_s": p_mk, "halyard_makespan_s": o_mk, "agree": len(agree),
            "public_comm_s": sum(pub[i]["comm"] for i in done),
            # the attribution: cluster-sim's time holding GPUs (its GPU-time column: iterations at the
            # placement's speed) against Halyard's run time, and its waits (first wait + every lease-end re-wait)
            "public_mean_run_s": sum(pub[i]["gpu_time"] for i in done) / len(done),
            "halyard_mean_run_s": sum(ours[i]["run"] for i in done) / len(done),
            "public_mean_wait_s": sum(pub[i]["queue"] for i in done) / len(done),
            "halyard_mean_wait_s": sum(oj[i] - ours[i]["run"] for i in done) / len(done),
            "run_agree": sum(abs(pub[i]["gpu_time"] - ours[i]["run"]) <= AGREE * max(ours[i]["run"], 1.0)
                             for i in done),
            "worst": [{"job": i, "model": spec[i].model, "gpus": spec[i].num_gpus,
                       "public_jct_s": pj[i], "halyard_jct_s": oj[i], "public_queue_s": pub[i]["queue"],
                       "public_run_s": pub[i]["gpu_time"], "halyard_run_s": ours[i]["run"],
                       "halyard_queue_s": ours[i]["queue"], "halyard_preemptions": ours[i]["preemptions"]}
                      for i in worst],
            **({"per_job": [joined(i, spec[i], pub[i], ours[i]) for i in done]} if per_job else {})}


def long_waits(releases: list[float], starts: list[float]) -> tuple[int, float]:
    """The waits from a release (a lease end that left the job waiting) to the job's next start that last more than
    a lease: how many, and their seconds."""
    waits = [next((a for a in sorted(starts) if a >= r), math.inf) - r for r in releases]
    long = [w for w in waits if LEASE_S < w < math.inf]
    return len(long), sum(long)


def joined(i: int, spec, pub: dict, ours: dict) -> dict:
    """One job in both runs: first start (from its arrival), JCT, every wait, time on GPUs, GPU sets given and, when
    both runs were traced, its waits of over a lease after its lease ends."""
    waits = {}
    if "release" in pub and "release" in ours:
        for side, d in (("public", pub), ("halyard", ours)):
            waits[f"{side}_long_waits"], waits[f"{side}_long_wait_s"] = long_waits(d["release"], d["alloc"])
    return {**waits, "job": i, "model": spec.model, "gpus": spec.num_gpus,
            "public_start_s": pub["start"] - pub["arrival"], "halyard_start_s": ours["start"] - ours["submit"],
            "public_jct_s": pub["end"] - pub["arrival"], "halyard_jct_s": ours["jct"],
            "public_wait_s": pub["queue"], "halyard_wait_s": ours["jct"] - ours["run"],
            "public_run_s": pub["gpu_time"], "halyard_run_s": ours["run"],
            "public_placements": pub.get("placements", 0), "halyard_placements": ours["placements"]}


def first_seed(rows: list[dict]) -> list[dict]:
    """The per-run tables show one seed (the lowest); the headline table has them all."""
    low = min((r.get("seed", 1) for r in rows), default=1)
    return [r for r in rows if r.get("seed", 1) == low]


def side_by_side(rows: list[dict]) -> str:
    rows = first_seed(rows)
    head = ("| racks | arrivals | jobs | Halyard policy | cluster-sim | mean JCT (h) public / Halyard | ratio "
            "| p99 JCT (h) public / Halyard | makespan (d) public / Halyard | ratio | jobs within 5 % "
            "| mean time on GPUs (h) public / Halyard | its jobs within 5 % | mean wait (h) public / Halyard "
            "| CPU s public / Halyard |")
    lines = [head, "| " + " | ".join(["---"] * (head.count("|") - 1)) + " |"]
    for r in rows:
        c = r["compare"]
        lines.append(
            f"| {r['racks']} | {r['arrival']} | {c['finished_both']}/{c['jobs']} | `{r['policy']}` | {r['public']} "
            f"| {c['public_mean_jct_s'] / 3600:.1f} / {c['halyard_mean_jct_s'] / 3600:.1f} "
            f"| {c['halyard_mean_jct_s'] / c['public_mean_jct_s']:.3f} "
            f"| {c['public_p99_jct_s'] / 3600:.1f} / {c['halyard_p99_jct_s'] / 3600:.1f} "
            f"| {c['public_makespan_s'] / 86400:.2f} / {c['halyard_makespan_s'] / 86400:.2f} "
            f"| {c['halyard_makespan_s'] / c['public_makespan_s']:.3f} | {c['agree']}/{c['finished_both']} "
            f"| {c['public_mean_run_s'] / 3600:.1f} / {c['halyard_mean_run_s'] / 3600:.1f} "
            f"| {c['run_agree']}/{c['finished_both']} "
            f"| {c['public_mean_wait_s'] / 3600:.1f} / {c['halyard_mean_wait_s'] / 3600:.1f} "
            f"| {r['public_cpu_s']:.1f} / {r['halyard_cpu_s']:.1f} "
            f"(x{r['public_cpu_s'] / max(r['halyard_cpu_s'], 1e-9):.2f}) |")
    return "\n".join(lines)


def reason(w: dict, lease_s: float) -> str:
    """The per-job reason, from the two runs' time on GPUs and waits."""
    pub_run = w.get("public_run_s", w["public_jct_s"] - w["public_queue_s"])
    our_run = w.get("halyard_run_s", w["halyard_jct_s"] - w["halyard_queue_s"])
    if abs(pub_run - our_run) > AGREE * max(our_run, 1.0):
        slower = "Halyard" if our_run > pub_run else "cluster-sim"
        return f"{slower} ran it on a slower tier (time on GPUs {pub_run / 3600:.1f} / {our_run / 3600:.1f} h)"
    if w["public_jct_s"] > w["halyard_jct_s"]:
        return ("waits in cluster-sim after lease ends (re-offers)" if lease_s < NO_LEASE_S
                else "started later in cluster-sim (placement order)")
    return "started later in Halyard (placement order)"


def worst_table(rows: list[dict]) -> str:
    rows = first_seed(rows)
    lines = ["| racks | arrivals | policy | cluster-sim | job | model | GPUs | JCT (h) public / Halyard "
             "| waits (h): cluster-sim all / Halyard first | reason |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        for w in r["compare"]["worst"][:4]:
            lines.append(f"| {r['racks']} | {r['arrival']} | `{r['policy']}` | {r['public']} | {w['job']} "
                         f"| {w['model']} | {w['gpus']} "
                         f"| {w['public_jct_s'] / 3600:.1f} / {w['halyard_jct_s'] / 3600:.1f} "
                         f"| {w['public_queue_s'] / 3600:.1f} / {w['halyard_queue_s'] / 3600:.1f} "
                         f"| {reason(w, r.get('public_lease_s', LEASE_S))} |")
    return "\n".join(lines)


def _ci(values: list[float]) -> str:
    """Mean change in per cent, with a 95 % t-interval over seeds when there are several."""
    m = sum(values) / len(values)
    if len(values) < 2:
        return f"{100 * m:+.0f}%"
    from scipy import stats
    half = stats.t.ppf(0.975, len(values) - 1) * stats.tstd(values) / math.sqrt(len(values))
    return f"{100 * m:+.0f}% [{100 * (m - half):+.0f}, {100 * (m + half):+.0f}]"


def signs_table(rows: list[dict]) -> str:
    """Dally against Tiresias and Gandiva inside each simulator: the paper's headline, on the same jobs.
    One row per cluster-sim set-up (lease, profile); Halyard's columns are its runs beside that set-up.
    Over several seeds: the mean change and its 95 % confidence interval."""
    readings = " / ".join(f"Halyard `{d}`" for d in READINGS)
    lines = [f"| racks | arrivals | cluster-sim set-up | seeds | Dally vs | makespan change: cluster-sim / {readings} "
             f"| mean JCT change: cluster-sim / {readings} |", "| --- | --- | --- | --- | --- | --- | --- |"]

    def setup(r: dict) -> tuple:
        return (r["racks"], r["arrival"], r.get("public_lease_s", LEASE_S), r.get("profile", "table1"),
                r.get("public_variant"))

    for racks, arrival, lease, prof, variant in dict.fromkeys(setup(r) for r in rows):
        key = (racks, arrival, lease, prof, variant)
        seeds = sorted({r.get("seed", 1) for r in rows if setup(r) == key})
        by = {(r.get("seed", 1), r["policy"]): r for r in rows if setup(r) == key}
        dname = next((d for d in ("dally-literal", "dally-manual-literal+no-preemption", "dally-manual-literal")
                      if any((s_, d) in by for s_ in seeds)), None)
        dname = dname or next((d for d in READINGS if any((s_, d) in by for s_ in seeds)), None)
        if dname is None:
            continue
        public = next(by[(s_, dname)]["public"] for s_ in seeds if (s_, dname) in by)
        # cluster-sim's Dally of a seed: from any Halyard run beside the same cluster-sim set-up
        dally_public = {s_: r["compare"] for s_ in seeds
                        for r in [by.get((s_, dname)) or next((by[(s_, d)] for d in READINGS if (s_, d) in by
                                                               and by[(s_, d)]["public"] == public), None)]
                        if r is not None}
        label = f"lease {lease:g} s, " + ("Table 1 by tier" if prof == "table1" else "overhead by GPU count") \
            + (f", {VARIANTS[variant][3]}" if variant else "") + f"; Dally = {public}"
        for base in ("tiresias", "gandiva"):
            both = [s_ for s_ in seeds if (s_, base) in by and s_ in dally_public]
            if not both:
                continue
            cells = []
            for metric in ("makespan_s", "mean_jct_s"):
                vals = [_ci([dally_public[s_]["public_" + metric]
                             / by[(s_, base)]["compare"]["public_" + metric] - 1 for s_ in both])]
                for d in READINGS:
                    mine = [s_ for s_ in both if (s_, d) in by]
                    vals.append(_ci([by[(s_, d)]["compare"]["halyard_" + metric]
                                     / by[(s_, base)]["compare"]["halyard_" + metric] - 1 for s_ in mine])
                                if mine and prof == "table1" else "-")
                cells.append(" / ".join(vals))
            lines.append(f"| {racks} | {arrival} | {label} | {len(both)} | {base} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def variant_table(rows: list[dict]) -> str:
    """Each scheduler of cluster-sim with and without a --public-variant, on the same jobs (seeds where both
    ran): the variant's mean JCT, makespan and mean wait as a change from the unchanged simulator's."""
    lines = ["| racks | arrivals | cluster-sim | variant | seeds | mean JCT (h), unchanged / variant (first seed) "
             "| mean JCT change | makespan change | mean wait (h), unchanged / variant (first seed) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    plain = {(r["racks"], r["arrival"], r.get("seed", 1), r["public"]): r["compare"] for r in rows
             if not r.get("public_variant") and r.get("public_lease_s", LEASE_S) == LEASE_S
             and r.get("profile", "table1") == "table1"}
    groups: dict[tuple, dict[int, tuple[dict, dict]]] = {}
    for r in rows:
        variant = r.get("public_variant")
        if not variant:
            continue
        base = r["public"].removesuffix(f", {VARIANTS[variant][3]}")
        before = plain.get((r["racks"], r["arrival"], r.get("seed", 1), base))
        if before is not None:
            groups.setdefault((r["racks"], r["arrival"], base, variant), {})[r.get("seed", 1)] = (before, r["compare"])
    for (racks, arrival, base, variant), by_seed in groups.items():
        pairs = [by_seed[s_] for s_ in sorted(by_seed)]
        first_before, first_after = pairs[0]
        jct = [a["public_mean_jct_s"] / b["public_mean_jct_s"] - 1 for b, a in pairs]
        mk = [a["public_makespan_s"] / b["public_makespan_s"] - 1 for b, a in pairs]
        lines.append(f"| {racks} | {arrival} | {base} | {VARIANTS[variant][3]} | {len(pairs)} "
                     f"| {first_before['public_mean_jct_s'] / 3600:.1f} / "
                     f"{first_after['public_mean_jct_s'] / 3600:.1f} "
                     f"| {_ci(jct)} | {_ci(mk)} | {first_before['public_mean_wait_s'] / 3600:.1f} / "
                     f"{first_after['public_mean_wait_s'] / 3600:.1f} |")
    return "\n".join(lines)


def profile_sign_table(rows: list[dict], profile: list[dict]) -> str:
    """Dally's change against Tiresias under each profile, on the same jobs (first seed): inside cluster-sim
    (Table 1 by tier against overhead by GPU count) and inside Halyard (Table 1 against its collective
    model), per Halyard reading."""
    lines = ["| racks | arrivals | simulator | Dally | makespan change vs Tiresias: Table 1 at every GPU count "
             "/ overhead by GPU count | mean JCT change, same |", "| --- | --- | --- | --- | --- | --- |"]
    pub = {(r["racks"], r["arrival"], r.get("profile", "table1"), r["public"].split(",")[0]): r["compare"]
           for r in first_seed(rows) if r.get("public_lease_s", LEASE_S) == LEASE_S and not r.get("public_variant")}
    for racks, arrival in dict.fromkeys((r["racks"], r["arrival"]) for r in profile):
        d = [pub.get((racks, arrival, prof, "Dally")) for prof in ("table1", "count")]
        t = [pub.get((racks, arrival, prof, "Tiresias")) for prof in ("table1", "count")]
        if all(d) and all(t):
            cells = [" / ".join(f"{100 * (d[i][f'public_{m}'] / t[i][f'public_{m}'] - 1):+.0f}%" for i in (0, 1))
                     for m in ("makespan_s", "mean_jct_s")]
            lines.append(f"| {racks} | {arrival} | cluster-sim | Dally | {cells[0]} | {cells[1]} |")
        mine = {r["policy"]: r for r in profile if (r["racks"], r["arrival"]) == (racks, arrival)}
        base = mine.get("tiresias")
        for policy, r in mine.items():
            if not policy.startswith("dally") or base is None:
                continue
            cells = [" / ".join(f"{100 * (r[f'{tag}_{m}'] / base[f'{tag}_{m}'] - 1):+.0f}%"
                                for tag in ("table1", "builtin")) for m in ("makespan_s", "mean_jct_s")]
            lines.append(f"| {racks} | {arrival} | Halyard | `{policy}` | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def agreement_table(rows: list[dict]) -> str:
    """Per set-up and policy, over every stored seed: Halyard / cluster-sim for the mean JCT and the
    makespan (mean and 95 % interval of the per-seed ratios) and the jobs within 5 %."""
    lines = ["| racks | arrivals | Halyard policy | cluster-sim | seeds | mean JCT, Halyard / public "
             "| makespan, Halyard / public | jobs within 5 % (mean) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    keys = dict.fromkeys((r["racks"], r["arrival"], r["policy"], r["public"]) for r in rows)
    for racks, arrival, policy, public in keys:
        runs = [r["compare"] for r in rows if (r["racks"], r["arrival"], r["policy"], r["public"])
                == (racks, arrival, policy, public)]
        jct = [c["halyard_mean_jct_s"] / c["public_mean_jct_s"] - 1 for c in runs]
        mk = [c["halyard_makespan_s"] / c["public_makespan_s"] - 1 for c in runs]
        agree = sum(c["agree"] / c["finished_both"] for c in runs) / len(runs)
        lines.append(f"| {racks} | {arrival} | `{policy}` | {public} | {len(runs)} | {_ci(jct)} | {_ci(mk)} "
                     f"| {100 * agree:.0f}% |")
    return "\n".join(lines)


def option_table(rows: list[dict]) -> str:
    """What each of Halyard's options changes, on the same jobs beside the same cluster-sim: the rows of
    ``P+option`` paired, seed by seed, with those of ``P`` (same racks, arrivals, cluster-sim set-up). Halyard
    / public for both, and the option's own effect on Halyard's mean JCT and makespan (its run / P's), with a
    95 % interval over the seeds both have."""
    lines = ["| racks | arrivals | cluster-sim | Halyard policy | option | seeds | mean JCT, Halyard / public: "
             "without / with | makespan, Halyard / public: without / with | the option's change to Halyard's "
             "mean JCT | to its makespan |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    by = {(r["racks"], r["arrival"], r["public"], r["policy"], r.get("seed", 1)): r["compare"] for r in rows}
    keys = dict.fromkeys((r["racks"], r["arrival"], r["public"], r["policy"]) for r in rows)
    spelled = {spelled_out(policy): policy for policy in dict.fromkeys(r["policy"] for r in rows)}
    for racks, arrival, public, policy in keys:
        # (a preset of Dally's is its literal reading with options: `dally` is `dally-literal+reauction`+staggered)
        base_spelled, _, option = spelled_out(policy).rpartition("+")
        base = spelled.get(base_spelled, base_spelled)
        if not base or (racks, arrival, public, base) not in keys:
            continue
        seeds = sorted(s for (ra, ar, pu, po, s) in by if (ra, ar, pu, po) == (racks, arrival, public, policy)
                       and (ra, ar, pu, base, s) in by)
        if not seeds:
            continue
        pairs = [(by[(racks, arrival, public, base, s)], by[(racks, arrival, public, policy, s)]) for s in seeds]

        def vs_public(field: str, which: int, pairs: list = pairs) -> str:
            return _ci([c[which][f"halyard_{field}"] / c[which][f"public_{field}"] - 1 for c in pairs])

        def own(field: str, pairs: list = pairs) -> str:
            return _ci([w[f"halyard_{field}"] / b[f"halyard_{field}"] - 1 for b, w in pairs])
        lines.append(f"| {racks} | {arrival} | {public} | `{base}` | `+{option}` | {len(seeds)} "
                     f"| {vs_public('mean_jct_s', 0)} / {vs_public('mean_jct_s', 1)} "
                     f"| {vs_public('makespan_s', 0)} / {vs_public('makespan_s', 1)} "
                     f"| {own('mean_jct_s')} | {own('makespan_s')} |")
    return "\n".join(lines)


# The per-job residual: Halyard's closest rule sets beside the running-jobs-wait variant (the page says why these)
RESIDUAL_POLICIES = ("dally-literal+reauction+staggered", "dally")
RESIDUAL_CLASSES = 6  # (model, GPUs) classes shown per run set, by their share of the JCT difference
RESIDUAL_JOBS = 6  # single jobs shown per run set, first seed


def _residual_runs(rows: list[dict]) -> dict[tuple, list[dict]]:
    """(racks, arrival, cluster-sim, policy) -> the stored runs of :data:`RESIDUAL_POLICIES` with per-job rows whose
    waits after lease ends were traced in both simulators, one per seed."""
    out: dict[tuple, list[dict]] = {}
    for policy in RESIDUAL_POLICIES:
        for r in rows:
            jobs = r["compare"].get("per_job", [])
            if r["policy"] == policy and jobs and "public_long_waits" in jobs[0]:
                out.setdefault((r["racks"], r["arrival"], r["public"], policy), []).append(r)
    return out


def _pair(jobs: list[dict], field: str, scale: float = 3600.0, digits: int = 1) -> str:
    """The mean of ``field`` over ``jobs`` in cluster-sim / in Halyard."""
    n = max(len(jobs), 1)
    return " / ".join(f"{sum(j[f'{side}_{field}'] for j in jobs) / n / scale:.{digits}f}"
                      for side in ("public", "halyard"))


RESIDUAL_HEAD = ("| first start (h) public / Halyard | all waits (h) public / Halyard "
                 "| time on GPUs (h) public / Halyard | waits of over a lease after a lease end: how many, "
                 "public / Halyard | their hours, public / Halyard |")


def residual_classes(rows: list[dict]) -> str:
    """Where each residual policy's mean JCT differs from cluster-sim's, by (model, GPUs): each class's share of the
    summed per-job JCT difference (Halyard minus cluster-sim, over every stored seed), and what its jobs did in each."""
    lines = ["| racks | arrivals | cluster-sim | Halyard policy | seeds | model | GPUs | job-runs "
             "| share of the JCT difference | mean JCT (h) public / Halyard " + RESIDUAL_HEAD,
             "| " + " | ".join(["---"] * 15) + " |"]
    for (racks, arrival, public, policy), runs in _residual_runs(rows).items():
        jobs = [j for r in runs for j in r["compare"]["per_job"]]
        total = sum(j["halyard_jct_s"] - j["public_jct_s"] for j in jobs)
        classes: dict[tuple[str, int], list[dict]] = {}
        for j in jobs:
            classes.setdefault((j["model"], j["gpus"]), []).append(j)

        def share(members: list[dict], total: float = total) -> float:
            return sum(j["halyard_jct_s"] - j["public_jct_s"] for j in members) / total if total else 0.0
        for (model, gpus), members in sorted(classes.items(), key=lambda kv: share(kv[1]), reverse=True
                                             )[:RESIDUAL_CLASSES]:
            lines.append(f"| {racks} | {arrival} | {public} | `{policy}` | {len(runs)} | {model} | {gpus} "
                         f"| {len(members)} | {100 * share(members):.0f}% | {_pair(members, 'jct_s')} "
                         f"| {_pair(members, 'start_s')} | {_pair(members, 'wait_s')} | {_pair(members, 'run_s')} "
                         f"| {_pair(members, 'long_waits', 1.0)} | {_pair(members, 'long_wait_s')} |")
    return "\n".join(lines)


def residual_jobs(rows: list[dict]) -> str:
    """The single jobs (first seed) whose JCT differs most between each residual policy and cluster-sim."""
    lines = ["| racks | arrivals | cluster-sim | Halyard policy | job | model | GPUs | JCT (h) public / Halyard "
             + RESIDUAL_HEAD, "| " + " | ".join(["---"] * 13) + " |"]
    for (racks, arrival, public, policy), runs in _residual_runs(rows).items():
        run = min(runs, key=lambda r: r.get("seed", 1))
        jobs = sorted(run["compare"]["per_job"], key=lambda j: abs(j["halyard_jct_s"] - j["public_jct_s"]),
                      reverse=True)
        for j in jobs[:RESIDUAL_JOBS]:
            lines.append(f"| {racks} | {arrival} | {public} | `{policy}` | {j['job']} | {j['model']} | {j['gpus']} "
                         f"| {_pair([j], 'jct_s')} | {_pair([j], 'start_s')} | {_pair([j], 'wait_s')} "
                         f"| {_pair([j], 'run_s')} | {_pair([j], 'long_waits', 1.0, 0)} "
                         f"| {_pair([j], 'long_wait_s')} |")
    return "\n".join(lines)


def fit_table() -> str:
    """Table 1 beside the fitted collective model at other GPU counts (what --profile count answers)."""
    rows = {(m, t, p, g): f for m, t, p, g, f in count_overheads()}
    from halyard.emulator.calibration import load_dally_table1
    lines = ["| model | Table 1 (8 GPUs): machine / rack / network | fit, 8 GPUs: machine / 4+4 machines / 4+4 racks "
             "| fit, 2 GPUs: machine / "
             "1+1 machines / 1+1 racks | fit, 16 GPUs (8+8): rack / network | fit, 64 GPUs (8 x 8): rack / network |",
             "| --- | --- | --- | --- | --- | --- |"]
    for name, w in load_dally_table1().workloads.items():
        def pc(t: int, p: int, g: int, n: str = name) -> str:
            return f"{100 * rows[(n, t, p, g)]:,.0f}%"
        lines.append(f"| {name} | {' / '.join(f'{x:,.0f}%' for x in w.table_pct)} "
                     f"| {pc(2, 8, 1)} / {pc(3, 4, 2)} / {pc(4, 4, 2)} | {pc(2, 2, 1)} / {pc(3, 1, 2)} / {pc(4, 1, 2)} "
                     f"| {pc(3, 8, 2)} / {pc(4, 8, 2)} | {pc(3, 8, 8)} / {pc(4, 8, 8)} |")
    return "\n".join(lines)


def profile_table(rows: list[dict]) -> str:
    lines = ["| racks | arrivals | policy | makespan (d), Table 1 at every GPU count / Halyard's collective model "
             "| mean JCT (h), same |", "| --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['racks']} | {r['arrival']} | `{r['policy']}` | {r['table1_makespan_s'] / 86400:.2f} / "
                     f"{r['builtin_makespan_s'] / 86400:.2f} | {r['table1_mean_jct_s'] / 3600:.1f} / "
                     f"{r['builtin_mean_jct_s'] / 3600:.1f} |")
    return "\n".join(lines)


def halyard_summary(ours: dict) -> tuple[float, float]:
    done = [v for v in ours.values() if not math.isnan(v["jct"])]
    first = min(v["submit"] for v in ours.values())
    return max(v["jct"] + v["submit"] for v in done) - first, sum(v["jct"] for v in done) / len(done)


def render_page(results: dict) -> str:
    return PAGE_TEMPLATE.read_text(encoding="utf-8").format(
        command="\n".join(results["commands"]), table=side_by_side(results["runs"]), worst=worst_table(results["runs"]),
        signs=signs_table(results["runs"]), profile=profile_table(results.get("profile", [])),
        fit=fit_table(), agreement=agreement_table(results["runs"]), variants=variant_table(results["runs"]),
        options=option_table(results["runs"]), residual_classes=residual_classes(results["runs"]),
        residual_jobs=residual_jobs(results["runs"]),
        profile_sign=profile_sign_table(results["runs"], results.get("profile", [])))


def write_page(results: dict, page: Path) -> None:
    page.write_text(render_page(results), encoding="utf-8")


def pages(docs: Path) -> dict[Path, str]:
    """The page rendered from the stored JSON, no simulation (tests/test_reproduction_pages.py)."""
    return {docs / "dally-public-comparison.md":
            render_page(json.loads((docs / "dally-public-comparison.json").read_text(encoding="utf-8")))}


def save(args: argparse.Namespace, runs: list[dict], profile: list[dict]) -> None:
    """The stored JSON (with --merge, the runs of earlier commands kept unless re-run now) and the page;
    after every run, so a long sweep that stops keeps what it measured."""
    stored = (json.loads(args.json.read_text(encoding="utf-8")) if args.json.exists()
              else {"runs": [], "commands": []})
    if not hasattr(args, "stored"):
        args.stored = stored if args.merge else {"runs": [], "commands": []}
    base = args.stored
    def key(r: dict) -> tuple:
        return r["arrival"], r["racks"], r["policy"], r["public"], r.get("seed", 1)
    new = {key(r): r for r in runs}  # a run re-run now takes its stored row's place (the pages keep their order)
    kept = [new.get(key(r), r) for r in base["runs"]]
    stored_keys = {key(r) for r in base["runs"]}
    command = "python benchmarks/dally_public_perjob.py " + " ".join(sys.argv[1:])
    results = {"commands": [c for c in base.get("commands", []) if c != command] + [command],
               "runs": kept + [r for r in runs if key(r) not in stored_keys],
               "profile": profile or base.get("profile", [])}
    args.json.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    write_page(results, args.page)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cluster-sim", type=Path, help="a checkout of aakash-sharma/cluster-sim (read, never copied)")
    p.add_argument("--build", type=Path, default=Path("/work/ext/cluster-sim-build"))
    p.add_argument("--stubs", type=Path, default=STUBS,
                   help="stand-in sources for Gurobi and Apache POI's workbook (their README)")
    p.add_argument("--racks", type=int, nargs="+", default=[2])
    p.add_argument("--jobs", type=int, default=60)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--arrival", nargs="+", default=["batch"], choices=("batch", "poisson"))
    p.add_argument("--policies", nargs="+",
                   default=["dally", "dally-literal", "dally-literal+lease", "dally-manual-literal", "tiresias",
                            "gandiva"],
                   help="Halyard policies; each is run beside cluster-sim's scheduler of the same family")
    p.add_argument("--profile", choices=("table1", "count"), default="table1",
                   help="the stand-in's answer (module docstring); 'count' runs cluster-sim alone")
    p.add_argument("--public-lease-s", type=float, default=LEASE_S,
                   help=f"cluster-sim's lease (default {LEASE_S:g} s, Halyard's round); {NO_LEASE_S:g}: no lease "
                        "ends, i.e. no re-auction of running jobs' GPUs (the manual timers kept in seconds)")
    p.add_argument("--event-s", type=float, default=EVENT_S,
                   help=f"one cluster-sim iteration event (default {EVENT_S:g} s); keep it under the lease")
    p.add_argument("--public-variant", choices=sorted(VARIANTS), default=None,
                   help="cluster-sim with one line changed, to measure it (VARIANTS): running-jobs-wait lets only "
                        "waiting jobs bid")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per simulation")
    p.add_argument("--work", type=Path, default=None, help="working folder (default: a temporary one)")
    p.add_argument("--json", type=Path, default=ROOT / "docs" / "reproductions" / "dally-public-comparison.json")
    p.add_argument("--page", type=Path, default=ROOT / "docs" / "reproductions" / "dally-public-comparison.md")
    p.add_argument("--merge", action="store_true", help="keep the stored runs not re-run now")
    p.add_argument("--from-json", action="store_true", help="rewrite the page from the stored JSON")
    p.add_argument("--per-job", action="store_true",
                   help="store every job's row of the join (first start, waits, GPU sets given) for the page's "
                        "per-job residual")
    p.add_argument("--profile-check", action="store_true",
                   help="also run Halyard's policies with its own collective model (overhead by GPU count) "
                        "beside Table 1's 8-GPU figures, on the same traces")
    args = p.parse_args()
    if args.from_json:
        write_page(json.loads(args.json.read_text(encoding="utf-8")), args.page)
        return 0
    if args.cluster_sim is None:
        raise SystemExit("--cluster-sim CHECKOUT is needed (a checkout of aakash-sharma/cluster-sim)")
    compile_public(args.cluster_sim.resolve(), args.build, [args.stubs])
    table = overheads()
    work = args.work or Path(tempfile.mkdtemp(prefix="dally-public-"))
    work.mkdir(parents=True, exist_ok=True)
    variant = (compile_variant(args.cluster_sim.resolve(), args.build, args.public_variant, work, args.per_job)
               if args.public_variant or args.per_job else None)
    runs: list[dict] = []
    profile: list[dict] = []
    for arrival in args.arrival:
        jobs = (dally_trace(args.jobs, seed=args.seed, poisson_per_day=None) if arrival == "batch"
                else dally_trace(args.jobs, seed=args.seed + 1, poisson_per_day=50.0))
        for racks in args.racks:
            folder = work / f"{arrival}-{racks}r"
            folder.mkdir(parents=True, exist_ok=True)
            trace = folder / "trace.csv"
            write_trace(jobs, trace)
            paths = write_public_inputs(jobs, folder, racks, table, args.public_lease_s, args.profile, args.event_s)
            public_runs: dict[str, tuple] = {}
            for policy in args.policies:
                pair = PAIRS.get(policy.split("+")[0])
                if pair is None:
                    raise SystemExit(f"{policy}: no cluster-sim scheduler to pair it with")
                scheduler = pair[0] if pair[1] < 0 else f"{pair[0]}, timers {pair[1] / 3600:g} h + {pair[2] / 3600:g} h"
                if args.public_lease_s != LEASE_S:
                    if pair[1] < 0 and pair[0] == "Dally" and args.public_lease_s >= NO_LEASE_S:
                        raise SystemExit(f"{policy}: the auto-tuner's floors are in leases; with no lease ends "
                                         "only fixed timers (dally-manual) keep their meaning")
                    scheduler += f", lease {args.public_lease_s:g} s"
                if args.profile == "count":
                    scheduler += ", overhead by GPU count"
                if args.public_variant:
                    scheduler += f", {VARIANTS[args.public_variant][3]}"
                if pair not in public_runs:
                    public_runs[pair] = run_public(args.cluster_sim.resolve(), args.build, paths, racks, pair,
                                                   args.public_lease_s, folder, args.timeout, variant)
                pub, pub_cpu, pub_wall = public_runs[pair]
                ours, our_cpu, our_wall = run_halyard(trace, racks, policy, folder, args.timeout)
                if args.per_job:
                    for job, instants in halyard_instants(jobs, racks, policy, ours).items():
                        ours[job].update(instants)
                c = compare(jobs, pub, ours, args.per_job)
                runs.append({"arrival": arrival, "racks": racks, "policy": policy, "public": scheduler,
                             "profile": args.profile, "public_lease_s": args.public_lease_s,
                             "event_s": args.event_s, "public_variant": args.public_variant,
                             "seed": args.seed, "compare": c, "public_cpu_s": pub_cpu, "halyard_cpu_s": our_cpu,
                             "public_wall_s": pub_wall, "halyard_wall_s": our_wall})
                save(args, runs, profile)
                print(f"{arrival} {racks} racks {policy:22s} vs {scheduler:8s}: mean JCT "
                      f"{c['public_mean_jct_s'] / 3600:8.1f} / {c['halyard_mean_jct_s'] / 3600:8.1f} h "
                      f"({c['halyard_mean_jct_s'] / c['public_mean_jct_s']:.3f}), p99 "
                      f"{c['public_p99_jct_s'] / 3600:8.1f} / {c['halyard_p99_jct_s'] / 3600:8.1f} h, makespan "
                      f"{c['public_makespan_s'] / 86400:6.2f} / {c['halyard_makespan_s'] / 86400:6.2f} d "
                      f"({c['halyard_makespan_s'] / c['public_makespan_s']:.3f}), within 5 %: "
                      f"{c['agree']}/{c['finished_both']}, CPU s {pub_cpu:.1f} / {our_cpu:.1f} "
                      f"(x{pub_cpu / max(our_cpu, 1e-9):.2f})", flush=True)
            if args.profile_check:
                for policy in args.policies:
                    pair = {}
                    for catalog, tag in (("dally-table1", "table1"), ("builtin", "builtin")):
                        ours, _, _ = run_halyard(trace, racks, policy, folder, args.timeout, catalog)
                        pair[f"{tag}_makespan_s"], pair[f"{tag}_mean_jct_s"] = halyard_summary(ours)
                    profile.append({"arrival": arrival, "racks": racks, "policy": policy, **pair})
    save(args, runs, profile)
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
