"""Reproduce Dally's evaluation (§5): Dally vs Dally-manual vs Tiresias vs Gandiva.

    .venv/bin/python benchmarks/reproduce_dally.py --workers 2   # 112 runs, hours on 2 shared cores
    .venv/bin/python benchmarks/reproduce_dally.py --workers 1 --merge --policies dally-literal+manual-start  # a subset
    .venv/bin/python benchmarks/reproduce_dally.py --trace my.csv --racks 2 --out out/dally-mine
    .venv/bin/python benchmarks/reproduce_dally.py --merge --seeds 1-5 --racks 8 --arrivals batch \
        --policies dally dally-literal tiresias gandiva   # headlines with a 95 % interval over seeds

Workloads (§5.1.1): jobs over the six models of Table 1, a batch of 500 jobs all
submitted at t=0 and about 400 jobs with Poisson arrivals, replayed on the
built-in clusters dally-2rack ... dally-16rack (§5.1.2) through the simulator and
the default performance model. The SenseTime rows Dally replays are not
redistributable (shared/traces/README.md), so the jobs are drawn here, seeded
(:func:`dally_trace`); the rules and their sources are in docs/reproductions/dally-reproduction.md.

``--trace FILE`` replays that trace instead of the two drawn workloads (labelled
by its file name). The runs are ``halyard simulate`` runs through the machinery of
``halyard compare`` (halyard.experiments): parallel worker processes (``--workers``)
or a Ray cluster (``--ray``), one progress bar, each run's summary, per-job table and
timeline under ``<work>/runs/`` with its exact command, and one HTML comparison
report per workload and cluster size under ``<work>/reports/``.

Writes ``<out>/dally-reproduction.json`` (every run's summary), the markdown
tables ``<out>/dally-reproduction-table.md`` and ``<out>/img/dally-reproduction.png``.
``--merge`` runs only the given policies (racks, arrivals, seeds) and merges them into the stored JSON
before rewriting the page. ``--seeds`` draws several workloads (seed 1 is the one every table is of);
the page's "Over seeds" table gives each Dally's makespan and average JCT against Tiresias' and
Gandiva's as a mean over the seeds stored with a 95 % Student-t interval. Not part of the tests:
the 96 runs take minutes.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from pathlib import Path

import matplotlib
import numpy as np
from scipy import stats

from halyard.datamodel import JobSpec, load_cluster
from halyard.experiments import RunResult, RunSpec, run_and_save
from halyard.experiments.report import write_sweep_report
from halyard.policies.registry import spelled_out
from halyard.traces import write_trace

matplotlib.use("Agg")
import matplotlib.pyplot as plt

# Dally in both readings (policies/registry.py DALLY_READINGS): `dally` / `dally-manual`, the rules of the
# authors' simulator (+reauction+auction-on-release+event-leases+release-delay), and `dally-literal` /
# `dally-manual-literal`, the paper's text.
POLICIES = ("dally", "dally-manual", "dally-literal", "dally-manual-literal", "tiresias", "gandiva")
# Halyard's own rules on Dally (policies/dally.py), each measured against the paper's text;
# Halyard's earlier Dally is the one with migrate, worse-half and hysteresis; '+lease' is the reading of
# the reference simulator's lease-end re-offers.
VARIANTS = ("dally-literal+migrate", "dally-manual-literal+migrate", "dally-literal+worse-half",
            "dally-literal+migrate+worse-half+hysteresis", "dally-literal+lease", "dally-manual-literal+lease",
            "dally-literal+drop-short-waits", "dally-literal+manual-start")
# The performance model of the runs: Dally's own (Table 1's exposed-communication % applied to
# compute, §4.2.1; emulator/data/profile_dally_table1.toml) with no contention between jobs (ASTRA-sim
# simulates each placement alone). ``--catalog builtin --contention fair`` gives Halyard's own model.
# The readings of the authors' simulator (aakash-sharma/cluster-sim; docs/reproductions/dally-public-comparison.md):
# without its mid-lease bids (the `dally` preset, and the staggered reading that was the preset before it, beside
# cluster-sim run with --public-variant running-jobs-wait), and with them (`+hoard` on the staggered reading, beside
# cluster-sim unchanged; an option, off in the preset).
STAGGERED = "dally-literal+reauction+staggered"
CLUSTER_SIM_READINGS = ("dally", STAGGERED, f"{STAGGERED}+hoard")
# The readings whose headline (makespan and average JCT against Tiresias and Gandiva over seeds) the page states.
HEADLINE_READINGS = ("dally", STAGGERED, "dally-literal")
COMPARISON = Path(__file__).resolve().parents[1] / "docs" / "reproductions" / "dally-public-comparison.json"
CATALOG = "dally-table1"
CONTENTION = "off"
RACKS = (2, 4, 8, 16)
# Dally Table 1's models, with the per-GPU batch of the ASTRA-sim workload each row was
# simulated with (the files' global batch over 8 GPUs: VGG11 B256, BERT-large B256 -> 32;
# AlexNet, MobileNetV3, ResNet18, ResNet50 B512 -> 64; emulator/data/dally_table1.toml).
MODELS = {"vgg11": 32, "alexnet": 64, "mobilenetv3": 64, "resnet18": 64, "resnet50": 64, "bert-large": 32}
# GPU demands and their shares. Estimate shaped like the SenseTime jobs Dally replays
# (1 to 56 GPUs, most at 8 or fewer; [code aakash-sharma/cluster-sim configuration/jobs],
# read, not copied): a quarter single-GPU, a fifth one full machine, a fifth larger.
GPU_DEMANDS = {1: 0.25, 2: 0.15, 4: 0.20, 8: 0.20, 16: 0.10, 32: 0.07, 64: 0.03}
# Ideal (consolidated) run time: log-uniform between 1 hour and 10 days (estimate: the
# same jobs run 0.5 to 13 days).
DURATION_RANGE_S = (3600.0, 10 * 86400.0)
BATCH_JOBS = 500
POISSON_JOBS = 400
POISSON_PER_DAY = 50.0  # one of the rates of Dally's reference simulator's job files (25-100 per day)
ROUND_S = 300.0  # the lease (DESIGN.md: 5 minutes)
PAGE_TEMPLATE = Path(__file__).with_name("dally_reproduction_page.md")  # the page's prose, {tables} filled in
# Dally Table 2 (batch) and Table 3 (Poisson), 8 racks: JCT statistics in seconds, per policy.
PAPER_TABLES = {
    "batch": {"gandiva": (5828719, 183717, 17485823, 39214710), "tiresias": (4461998, 2547080, 17841606, 25696135),
              "dally-manual": (3128566, 2552189, 7097646, 8868401), "dally": (2828955, 2401390, 5983042, 8395214)},
    "poisson": {"gandiva": (17371514, 22722917, 71362014, 208939883),
                "tiresias": (4329941, 4212795, 15059080, 15390860),
                "dally-manual": (4960727, 2787855, 39298828, 39817762),
                "dally": (2831880, 2595529, 16469069, 16681241)},
}
STATS = (("Average", "avg_jct_s"), ("Median", "p50_jct_s"), (">P95", "tail95_jct_s"), (">P99", "tail99_jct_s"))
# Dally §5.2's stated improvements of Dally over a baseline (per cent lower), over 2-16 racks.
PAPER_CLAIMS = (
    ("batch", "makespan_s", "tiresias", "up to 69% (§5.2.1)"),
    ("batch", "makespan_s", "gandiva", "up to 92% (§5.2.1)"),
    ("batch", "avg_jct_s", "tiresias", "19% to 36% (§5.2.5)"),
    ("batch", "avg_jct_s", "gandiva", "23% to 51%; 39% worse at 2 racks (§5.2.5)"),
    ("poisson", "avg_jct_s", "tiresias", "16% to 34%; worse at 4 racks (§5.2.5)"),
    ("poisson", "avg_jct_s", "gandiva", "23% to 51% (§5.2.5)"),
    ("batch", "comm_share", "tiresias", "53% to 83% (§5.2.3, Fig. 6c)"),
)


def dally_trace(n: int, *, seed: int, poisson_per_day: float | None) -> list[JobSpec]:
    """``n`` jobs over Table 1's models; all at t=0, or Poisson at ``poisson_per_day``."""
    rng = np.random.default_rng(seed)
    models = rng.choice(list(MODELS), size=n)
    demands = rng.choice(list(GPU_DEMANDS), size=n, p=list(GPU_DEMANDS.values()))
    lo, hi = (math.log10(x) for x in DURATION_RANGE_S)
    durations = 10.0 ** rng.uniform(lo, hi, size=n)
    if poisson_per_day is None:
        submit = np.zeros(n)
    else:
        submit = np.cumsum(rng.exponential(86400.0 / poisson_per_day, size=n))
        submit -= submit[0]
    return [JobSpec(job_id=f"d{i:03d}", submit_time=float(submit[i]), model=str(models[i]),
                    num_gpus=int(demands[i]), batch_size=MODELS[str(models[i])],
                    duration_s=float(round(durations[i])))
            for i in range(n)]


def workloads(arrivals: list[str], seed: int, trace: Path | None, folder: Path,
              jobs: int | None = None) -> dict[str, Path]:
    """Arrival pattern -> trace file: the drawn workloads written as canonical CSV (which reads
    back to the same jobs), or the given trace. ``jobs``: that many jobs drawn instead of the
    reproduction's 500 / 400, labelled apart (:func:`downsized`)."""
    if trace is not None:
        return {trace.stem: trace}
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for arrival in arrivals:
        drawn = (dally_trace(jobs or BATCH_JOBS, seed=seed, poisson_per_day=None) if arrival == "batch"
                 else dally_trace(jobs or POISSON_JOBS, seed=seed + 1, poisson_per_day=POISSON_PER_DAY))
        label = arrival if jobs is None else downsized(arrival, jobs)
        paths[label] = folder / f"dally-{arrival}{'' if jobs is None else f'-{jobs}jobs'}-seed{seed}.csv"
        write_trace(drawn, paths[label])
    return paths


def downsized(arrival: str, jobs: int) -> str:
    """The label of a workload drawn smaller than the reproduction's (``--jobs``): its runs go into the
    table over seeds only, as a workload of their own."""
    return f"{arrival} ({jobs} jobs)"


def is_downsized(row: dict) -> bool:
    """Whether a stored run is of a downsized draw (:func:`downsized`'s label)."""
    return str(row["arrival"]).endswith(" jobs)")


def specs(traces: dict[str, Path], racks: list[int], policies: list[str], catalog: str | None,
          contention: str, seed: int = 1, jobs: int | None = None) -> list[RunSpec]:
    """The runs of one drawn workload (``seed``: its draw; the first keeps its unsuffixed names;
    ``jobs``: a downsized draw, tagged with its size)."""
    suffix = "" if seed == 1 else f"-seed{seed}"
    size = () if jobs is None else (("jobs", jobs),)
    out = [RunSpec(name=f"{path.stem.removeprefix('dally-').removesuffix(f'-seed{seed}')}-{n}rack-{policy}{suffix}"
                   if jobs is not None else f"{arrival}-{n}rack-{policy}{suffix}", trace=str(path), policy=policy,
                   cluster=f"dally-{n}rack", round_s=ROUND_S, catalog=catalog, contention=contention,
                   tags=(("arrival", arrival), ("racks", n), ("trace_seed", seed), *size))
           for arrival, path in traces.items() for n in racks for policy in policies]
    return sorted(out, key=lambda s: dict(s.tags)["racks"])  # small clusters take longest; start them first


def row(result: RunResult) -> dict:
    """A run's summary with the reproduction's labels and its restarts (from the per-job table)."""
    tags = dict(result.spec.tags)
    return result.summary | {"arrival": tags["arrival"], "racks": tags["racks"], "seed": result.spec.seed,
                             "trace_seed": tags.get("trace_seed", 1),
                             "restarts": int(sum(result.tables.jobs["restarts"].to_pylist()))} \
        | ({"jobs": tags["jobs"]} if "jobs" in tags else {})


def trace_seed(row: dict) -> int:
    """The draw of a stored run's workload (runs stored before ``--seeds`` are of draw 1)."""
    return int(row.get("trace_seed", 1))


def ratio_interval(values: list[float]) -> tuple[float, float, float]:
    """Mean of ratios and its 95 % Student-t interval (lo, hi); one value: the interval is the value."""
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, mean, mean
    half = stats.t.ppf(0.975, len(values) - 1) * stats.tstd(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def interval(values: list[float]) -> str:
    """Mean and 95 % Student-t interval, as a change in per cent (values are ratios)."""
    mean, lo, hi = ratio_interval(values)
    if len(values) < 2:
        return f"{100.0 * (mean - 1.0):+.0f}% (1 seed)"
    return f"{100.0 * (mean - 1.0):+.0f}% [{100.0 * (lo - 1.0):+.0f}, {100.0 * (hi - 1.0):+.0f}]"


def headline(results: list[dict]) -> str:
    """The paper's headline under each reading of :data:`HEADLINE_READINGS`, per workload and size with 2+ seeds
    of it: makespan and average JCT against Tiresias and Gandiva (mean change over the seeds where both ran, 95 %
    interval), and in words where Dally is ahead (the interval below zero), behind (above zero) or undecided."""
    head = ("| arrivals | racks | Dally | seeds | makespan vs Tiresias | avg JCT vs Tiresias | makespan vs Gandiva "
            "| avg JCT vs Gandiva | ahead of the baseline (95 %) | behind it (95 %) | undecided |")
    lines = [head, "| " + " | ".join(["---"] * (head.count("|") - 1)) + " |"]
    by = {(r["arrival"], r["racks"], r["policy"], trace_seed(r)): r for r in results}
    groups = sorted({(a, n) for a, n, p, _ in by if p == HEADLINE_READINGS[0]})
    for arrival, racks in groups:
        for dally in HEADLINE_READINGS:
            cells, verdict = [], {"ahead": [], "behind": [], "undecided": []}
            seeds = set()
            for base in ("tiresias", "gandiva"):
                for key, label in (("makespan_s", "makespan"), ("avg_jct_s", "avg JCT")):
                    both = [s for a, n, p, s in by if (a, n, p) == (arrival, racks, dally)
                            and (arrival, racks, base, s) in by]
                    seeds.update(both)
                    ratios = [by[(arrival, racks, dally, s)][key] / by[(arrival, racks, base, s)][key] for s in both]
                    if len(ratios) < 2:
                        cells.append("-")
                        continue
                    cells.append(interval(ratios))
                    _, lo, hi = ratio_interval(ratios)
                    side = "ahead" if hi < 1.0 else "behind" if lo > 1.0 else "undecided"
                    verdict[side].append(f"{label} vs {base.capitalize()}")
            if len(seeds) < 2:
                continue
            lines.append(f"| {arrival} | {racks} | `{dally}` | {len(seeds)} | {' | '.join(cells)} | "
                         + " | ".join(", ".join(v) or "-" for v in verdict.values()) + " |")
    return "\n".join(lines)


def seeds_table(results: list[dict]) -> str:
    """Each Dally's makespan, average JCT and communication share against Tiresias and Gandiva, per seed
    as a ratio, over the seeds where both ran: the mean change with its 95 % interval (negative: Dally
    lower). A seed where the baseline exposed no communication gives no comm.-share ratio."""
    head = ("| arrivals | racks | Dally | seeds | makespan (d), mean over seeds | avg JCT (d) | comm. share (%) "
            "| makespan vs Tiresias | avg JCT vs Tiresias | comm. share vs Tiresias | makespan vs Gandiva "
            "| avg JCT vs Gandiva | comm. share vs Gandiva |")
    lines = [head, "| " + " | ".join(["---"] * (head.count("|") - 1)) + " |"]
    by = {(r["arrival"], r["racks"], r["policy"], trace_seed(r)): r for r in results}
    groups = dict.fromkeys((a, n, p) for a, n, p, _ in by if p.startswith("dally"))  # those with 2+ seeds below
    for arrival, racks, dally in sorted(groups, key=lambda g: (g[0], g[1], g[2])):
        seeds = sorted(s for a, n, p, s in by if (a, n, p) == (arrival, racks, dally))
        if len(seeds) < 2:
            continue
        ours = [by[(arrival, racks, dally, s)] for s in seeds]
        cells = []
        for key, unit in (("makespan_s", 86400.0), ("avg_jct_s", 86400.0), ("comm_share", 0.01)):
            values = [r[key] / unit for r in ours]
            mean = sum(values) / len(values)
            half = stats.t.ppf(0.975, len(values) - 1) * stats.tstd(values) / math.sqrt(len(values))
            cells.append(f"{mean:.1f} ± {half:.1f}")
        for base in ("tiresias", "gandiva"):
            for key in ("makespan_s", "avg_jct_s", "comm_share"):
                ratios = [by[(arrival, racks, dally, s)][key] / by[(arrival, racks, base, s)][key]
                          for s in seeds if (arrival, racks, base, s) in by and by[(arrival, racks, base, s)][key]]
                cells.append(interval(ratios) if ratios else "-")
        lines.append(f"| {arrival} | {racks} | {dally} | {len(seeds)} | {' | '.join(cells)} |")
    return "\n".join(lines)


def public_match(comparison: Path) -> str:
    """From the side-by-side with cluster-sim (docs/reproductions/dally-public-comparison.json, written by
    benchmarks/dally_public_perjob.py): the agreement of the two cluster-sim readings with the cluster-sim
    set-ups they are run beside, its own table's rows (Halyard / cluster-sim over its seeds)."""
    if not comparison.is_file():
        return "(no side-by-side stored: run benchmarks/dally_public_perjob.py)"
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    try:
        from dally_public_perjob import LEASE_S, agreement_table
    finally:
        sys.path.pop(0)
    runs = json.loads(comparison.read_text(encoding="utf-8"))["runs"]
    return agreement_table([r for r in runs if r["policy"] in CLUSTER_SIM_READINGS
                            and r.get("public_lease_s", LEASE_S) == LEASE_S and r.get("profile", "table1") == "table1"])


def table(results: list[dict], arrival: str) -> str:
    rows = [r for r in results if r["arrival"] == arrival]
    head = ("| racks | policy | makespan (d) | avg JCT (d) | median JCT (d) | >P95 JCT (d) | >P99 JCT (d) "
            "| >P95 queue (d) | >P99 queue (d) | avg exposed comm. per job (h) | comm. share | preemptions "
            "| restarts (resumes, migrations) |")
    lines = [head, "| " + " | ".join(["---"] * (head.count("|") - 1)) + " |"]
    day = 86400.0
    for racks in sorted({r["racks"] for r in rows}):
        for policy in dict.fromkeys(r["policy"] for r in rows):
            for r in rows:
                if r["racks"] == racks and r["policy"] == policy:
                    lines.append(
                        f"| {racks} | {policy} | {r['makespan_s'] / day:.1f} | {r['avg_jct_s'] / day:.2f} "
                        f"| {r['p50_jct_s'] / day:.2f} | {r['tail95_jct_s'] / day:.1f} | {r['tail99_jct_s'] / day:.1f} "
                        f"| {r['tail95_queue_s'] / day:.1f} | {r['tail99_queue_s'] / day:.1f} "
                        f"| {r['avg_exposed_comm_s'] / 3600:.2f} | {100 * r['comm_share']:.2f}% "
                        f"| {r['preemptions']} | {r['restarts']} |")
    return "\n".join(lines)


def plot(results: list[dict], path: Path) -> None:
    metrics = [("makespan_s", "makespan (days)", 86400.0), ("avg_jct_s", "average JCT (days)", 86400.0),
               ("tail95_queue_s", ">P95 queueing delay (days)", 86400.0),
               ("comm_share", "exposed communication / run time (%)", 0.01)]
    arrivals = list(dict.fromkeys(r["arrival"] for r in results))
    policies = list(dict.fromkeys(r["policy"] for r in results))
    racks = sorted({r["racks"] for r in results})
    fig, axes = plt.subplots(len(arrivals), len(metrics), figsize=(4.2 * len(metrics), 3.5 * len(arrivals)),
                             constrained_layout=True, squeeze=False)
    width = 0.8 / len(policies)
    for i, arrival in enumerate(arrivals):
        for col, (key, label, unit) in enumerate(metrics):
            ax = axes[i][col]
            for k, policy in enumerate(policies):
                values = [next((r[key] / unit for r in results if r["arrival"] == arrival and r["racks"] == n
                                and r["policy"] == policy), float("nan")) for n in racks]
                ax.bar(np.arange(len(racks)) + (k - (len(policies) - 1) / 2) * width, values, width, label=policy,
                       color=plt.get_cmap("tab20")(k % 20))  # (the default cycle repeats after 10 policies)
            if key == "makespan_s":
                ax.set_yscale("log")  # the paper's Dally without re-placement runs for years
            ax.set_xticks(np.arange(len(racks)), [str(n) for n in racks])
            ax.set_xlabel("racks")
            ax.set_title(f"{arrival}: {label}", fontsize=9)
    axes[0][-1].legend(fontsize=7)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--racks", type=int, nargs="+", default=list(RACKS))
    p.add_argument("--policies", nargs="+", default=[*POLICIES, *VARIANTS])
    p.add_argument("--catalog", default=CATALOG,
                   help=f"catalog profile of the runs (default {CATALOG}: Dally Table 1; 'builtin': none)")
    p.add_argument("--contention", default=CONTENTION, help=f"link sharing between jobs (default {CONTENTION})")
    p.add_argument("--arrivals", nargs="+", default=["batch", "poisson"])
    p.add_argument("--trace", type=Path, default=None, help="replay this trace instead of the drawn workloads")
    p.add_argument("--seeds", type=_seeds, default=[1], help="workload draws, e.g. 1-5 (default 1)")
    p.add_argument("--jobs", type=int, default=None,
                   help=f"draw this many jobs instead of {BATCH_JOBS} (batch) / {POISSON_JOBS} (Poisson): a workload "
                        "of its own, reported in the table over seeds only (for rule sets too slow for the full one)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--ray", default=None, metavar="ADDRESS", help="run on this Ray cluster (halyard compare --ray)")
    p.add_argument("--out", type=Path, default=Path("docs/reproductions"))
    p.add_argument("--work", type=Path, default=Path("out/dally-reproduction"),
                   help="traces, each run's files and the HTML reports (default: out/dally-reproduction)")
    p.add_argument("--from-json", action="store_true",
                   help="no simulation: rewrite the tables and plot from <out>/dally-reproduction.json")
    p.add_argument("--merge", action="store_true",
                   help="run only the given --policies/--racks/--arrivals and merge them into "
                        "<out>/dally-reproduction.json (replacing the same runs) before rewriting the page")
    args = p.parse_args()
    stored = args.out / "dally-reproduction.json"
    if args.from_json:
        results = json.loads(stored.read_text(encoding="utf-8"))
        write(results, args.out, sorted({r["arrival"] for r in results}))
        return 0
    catalog = None if args.catalog == "builtin" else args.catalog
    drawn = {seed: workloads(args.arrivals, seed, args.trace, args.work / "traces", args.jobs) for seed in args.seeds}
    traces = drawn[args.seeds[0]]
    runs = run_and_save([spec for seed, paths in drawn.items()
                         for spec in specs(paths, args.racks, args.policies, catalog, args.contention, seed,
                                           args.jobs)],
                        args.work / "runs",
                        workers=args.workers,
                        ray_address=args.ray, label="dally reproduction")
    baseline = "tiresias" if "tiresias" in args.policies else args.policies[0]
    for arrival in traces:
        for n in args.racks:
            group = [r for r in runs if (dict(r.spec.tags)["arrival"], dict(r.spec.tags)["racks"],
                                         dict(r.spec.tags)["trace_seed"]) == (arrival, n, args.seeds[0])]
            write_sweep_report(group, args.work / "reports" / f"{arrival}-{n}rack.html", runs_dir=args.work / "runs",
                               baseline=baseline, command=shlex.join(["python", *sys.argv]),
                               title=f"Dally reproduction: {arrival} arrivals on dally-{n}rack",
                               cluster_gpus=load_cluster(f"dally-{n}rack").total_gpus)
    results = [row(r) for r in runs]
    if args.merge:
        if args.trace is not None:
            raise SystemExit("--merge adds runs of the drawn workloads to the stored page; not with --trace")
        new = {(r["arrival"], r["racks"], r["policy"], trace_seed(r)) for r in results}
        kept = [r for r in json.loads(stored.read_text(encoding="utf-8"))
                if (r["arrival"], r["racks"], r["policy"], trace_seed(r)) not in new]
        results = kept + results
    args.out.mkdir(parents=True, exist_ok=True)
    stored.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    write(results, args.out, list(dict.fromkeys(r["arrival"] for r in results)))
    print(f"{len(runs)} runs; per-run files in {args.work / 'runs'}, HTML reports in {args.work / 'reports'}")
    return 0


def _find(results: list[dict], arrival: str, racks: int, policy: str) -> dict | None:
    return next((r for r in results if r["arrival"] == arrival and r["racks"] == racks and r["policy"] == policy),
                None)


def _change(ours: float, base: float) -> str:
    return f"{100.0 * (ours / base - 1.0):+.0f}%" if base else "n/a"


def versus_paper(results: list[dict], dallys: list[str]) -> str:
    """Dally against each baseline, per cluster size, beside the paper's stated range."""
    names = {"makespan_s": "makespan", "avg_jct_s": "average JCT", "comm_share": "comm. share"}
    racks = sorted({r["racks"] for r in results})
    sizes = "/".join(str(n) for n in racks)
    head = ("| arrivals | metric | Dally vs | paper: Dally lower by | "
            + " | ".join(f"{d}, ours at {sizes} racks" for d in dallys) + " |")
    lines = [head, "| " + " | ".join(["---"] * (head.count("|") - 1)) + " |"]
    for arrival, key, base, claim in PAPER_CLAIMS:
        cells = []
        for dally in dallys:
            values = []
            for n in racks:
                ours, other = _find(results, arrival, n, dally), _find(results, arrival, n, base)
                values.append("-" if ours is None or other is None else _change(ours[key], other[key]))
            cells.append(" / ".join(values))
        lines.append(f"| {arrival} | {names[key]} | {base} | {claim} | {' | '.join(cells)} |")
    return "\n".join(lines)


def paper_table(results: list[dict], arrival: str, dally: str, manual: str) -> str:
    """Table 2 (batch) or 3 (Poisson) beside ours at 8 racks: each statistic as a ratio to Dally's."""
    paper = PAPER_TABLES[arrival]
    ours = {p: _find(results, arrival, 8, name) for p, name in
            (("gandiva", "gandiva"), ("tiresias", "tiresias"), ("dally-manual", manual), ("dally", dally))}
    if any(v is None for p, v in ours.items() if p != "dally-manual"):
        return f"(not run: needs {dally}, gandiva and tiresias at 8 racks, seed 1)"
    head = ("| statistic | Dally, paper (d) | Dally, ours (d) | Gandiva / Dally, paper / ours "
            "| Tiresias / Dally, paper / ours | Dally-manual / Dally, paper / ours |")
    lines = [head, "| " + " | ".join(["---"] * (head.count("|") - 1)) + " |"]
    day = 86400.0
    for i, (label, key) in enumerate(STATS):
        d_paper, d_ours = paper["dally"][i], ours["dally"][key]
        cells = [f"{paper[b][i] / d_paper:.2f} / " + ("-" if ours[b] is None else f"{ours[b][key] / d_ours:.2f}")
                 for b in ("gandiva", "tiresias", "dally-manual")]  # (- : a Dally-manual not run)
        lines.append(f"| {label} | {d_paper / day:.1f} | {d_ours / day:.2f} | {' | '.join(cells)} |")
    return "\n".join(lines)


def options_table(results: list[dict], variants: list[str]) -> str:
    """Each of Halyard's options against the paper's Dally (``dally-literal`` or ``dally-manual-literal``, the
    same timers): makespan and average JCT change. ``dally`` is the literal reading with four of them."""
    racks = sorted({r["racks"] for r in results})
    head = "| arrivals | variant | base | " + " | ".join(f"{n} racks: makespan / avg JCT" for n in racks) + " |"
    lines = [head, "| " + " | ".join(["---"] * (head.count("|") - 1)) + " |"]
    for arrival in dict.fromkeys(r["arrival"] for r in results):
        for variant in variants:
            base = spelled_out(variant).partition("+")[0]
            cells = []
            for n in racks:
                v, b = _find(results, arrival, n, variant), _find(results, arrival, n, base)
                cells.append("-" if v is None or b is None else
                             f"{_change(v['makespan_s'], b['makespan_s'])} / {_change(v['avg_jct_s'], b['avg_jct_s'])}")
            lines.append(f"| {arrival} | {variant} | {base} | {' | '.join(cells)} |")
    return "\n".join(lines)


def _seeds(text: str) -> list[int]:
    """'1-5' or '1,3,4' -> the seeds."""
    if "-" in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in text.split(",")]


def write(results: list[dict], out: Path, arrivals: list[str], command: str = "",
          comparison: Path = COMPARISON) -> None:
    """The tables, the plot and, when ``out`` holds the page's template's target, the page itself
    (``comparison``: the side-by-side's JSON, for the cluster-sim readings' agreement).
    Every table but the one over seeds is of the first draw (seed 1)."""
    over_seeds = seeds_table(results)
    headline_text = headline(results)
    results = [r for r in results if trace_seed(r) == 1 and not is_downsized(r)]  # (downsized: over seeds only)
    arrivals = [a for a in arrivals if any(r["arrival"] == a for r in results)]
    text = "\n\n".join(f"**{a} arrivals**\n\n{table(results, a)}" for a in arrivals)
    (out / "dally-reproduction-table.md").write_text(text + "\n", encoding="utf-8")
    if arrivals:  # (a run of other draws only has no seed-1 tables to plot)
        plot(results, out / "img" / "dally-reproduction.png")
    policies = list(dict.fromkeys(r["policy"] for r in results))
    dallys = [p for p in ("dally", STAGGERED, "dally-literal", "dally-literal+migrate", f"{STAGGERED}+hoard")
              if p in policies]
    variants = [p for p in policies if "+" in spelled_out(p)]
    page = PAGE_TEMPLATE.read_text(encoding="utf-8").format(
        command=command or ".venv/bin/python benchmarks/reproduce_dally.py --workers 2",
        results=text, versus=versus_paper(results, dallys),
        table2=paper_table(results, "batch", "dally", "dally-manual") if "batch" in arrivals else "",
        table2_staggered=paper_table(results, "batch", STAGGERED, "dally-manual-literal+reauction+staggered")
        if "batch" in arrivals else "",
        table2_literal=paper_table(results, "batch", "dally-literal", "dally-manual-literal")
        if "batch" in arrivals else "",
        table2_migrate=paper_table(results, "batch", "dally-literal+migrate", "dally-manual-literal+migrate")
        if "batch" in arrivals else "",
        table3=paper_table(results, "poisson", "dally", "dally-manual") if "poisson" in arrivals else "",
        table3_staggered=paper_table(results, "poisson", STAGGERED, "dally-manual-literal+reauction+staggered")
        if "poisson" in arrivals else "",
        table3_literal=paper_table(results, "poisson", "dally-literal", "dally-manual-literal")
        if "poisson" in arrivals else "",
        table3_migrate=paper_table(results, "poisson", "dally-literal+migrate", "dally-manual-literal+migrate")
        if "poisson" in arrivals else "",
        table2_lease=paper_table(results, "batch", "dally-literal+lease", "dally-manual-literal+lease")
        if "batch" in arrivals else "",
        table2_tuner=paper_table(results, "batch", "dally-literal+drop-short-waits", "dally-manual-literal")
        if "batch" in arrivals else "",
        table3_tuner=paper_table(results, "poisson", "dally-literal+drop-short-waits", "dally-manual-literal")
        if "poisson" in arrivals else "",
        table3_lease=paper_table(results, "poisson", "dally-literal+lease", "dally-manual-literal+lease")
        if "poisson" in arrivals else "",
        options=options_table(results, variants), seeds=over_seeds, public_match=public_match(comparison),
        headline=headline_text)
    (out / "dally-reproduction.md").write_text(page, encoding="utf-8")


def pages(docs: Path) -> dict[Path, str]:
    """The table and the page as ``--from-json`` writes them from ``docs/reproductions/dally-reproduction.json`` (no
    simulation): :func:`write` into a scratch folder, read back."""
    import tempfile

    results = json.loads((docs / "dally-reproduction.json").read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch)
        (out / "img").mkdir()
        write(results, out, sorted({r["arrival"] for r in results}), comparison=docs / "dally-public-comparison.json")
        return {docs / name: (out / name).read_text(encoding="utf-8")
                for name in ("dally-reproduction-table.md", "dally-reproduction.md")}


if __name__ == "__main__":
    raise SystemExit(main())
