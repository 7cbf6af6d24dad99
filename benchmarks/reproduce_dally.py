"""Reproduce Dally's evaluation (§5): Dally vs Dally-manual vs Tiresias vs Gandiva.

    .venv/bin/python benchmarks/reproduce_dally.py --workers 2   # about 5 minutes on 2 cores
    .venv/bin/python benchmarks/reproduce_dally.py --trace my.csv --racks 2 --out out/dally-mine

Workloads (§5.1.1): jobs over the six models of Table 1, a batch of 500 jobs all
submitted at t=0 and about 400 jobs with Poisson arrivals, replayed on the
built-in clusters dally-2rack ... dally-16rack (§5.1.2) through the simulator and
the default performance model. The SenseTime rows Dally replays are not
redistributable (shared/traces/README.md), so the jobs are drawn here, seeded
(:func:`dally_trace`); the rules and their sources are in docs/dally-reproduction.md.

``--trace FILE`` replays that trace instead of the two drawn workloads (labelled
by its file name). The runs are ``halyard simulate`` runs through the machinery of
``halyard compare`` (halyard.experiments): parallel worker processes (``--workers``)
or a Ray cluster (``--ray``), one progress bar, each run's summary, per-job table and
timeline under ``<work>/runs/`` with its exact command, and one HTML comparison
report per workload and cluster size under ``<work>/reports/``.

Writes ``<out>/dally-reproduction.json`` (every run's summary), the markdown
tables ``<out>/dally-reproduction-table.md`` and ``<out>/img/dally-reproduction.png``.
Not part of the tests: the 32 runs take minutes.
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

from halyard.datamodel import JobSpec, load_cluster
from halyard.experiments import RunResult, RunSpec, run_and_save
from halyard.experiments.report import write_sweep_report
from halyard.traces import write_trace

matplotlib.use("Agg")
import matplotlib.pyplot as plt

POLICIES = ("dally", "dally-manual", "tiresias", "gandiva")
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


def workloads(arrivals: list[str], seed: int, trace: Path | None, folder: Path) -> dict[str, Path]:
    """Arrival pattern -> trace file: the drawn workloads written as canonical CSV (which reads
    back to the same jobs), or the given trace."""
    if trace is not None:
        return {trace.stem: trace}
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for arrival in arrivals:
        jobs = (dally_trace(BATCH_JOBS, seed=seed, poisson_per_day=None) if arrival == "batch"
                else dally_trace(POISSON_JOBS, seed=seed + 1, poisson_per_day=POISSON_PER_DAY))
        paths[arrival] = folder / f"dally-{arrival}-seed{seed}.csv"
        write_trace(jobs, paths[arrival])
    return paths


def specs(traces: dict[str, Path], racks: list[int], policies: list[str]) -> list[RunSpec]:
    out = [RunSpec(name=f"{arrival}-{n}rack-{policy}", trace=str(path), policy=policy, cluster=f"dally-{n}rack",
                   round_s=ROUND_S, tags=(("arrival", arrival), ("racks", n)))
           for arrival, path in traces.items() for n in racks for policy in policies]
    return sorted(out, key=lambda s: dict(s.tags)["racks"])  # small clusters take longest; start them first


def row(result: RunResult) -> dict:
    """A run's summary with the reproduction's labels and its restarts (from the per-job table)."""
    tags = dict(result.spec.tags)
    return result.summary | {"arrival": tags["arrival"], "racks": tags["racks"], "seed": result.spec.seed,
                             "restarts": int(sum(result.tables.jobs["restarts"].to_pylist()))}


def table(results: list[dict], arrival: str) -> str:
    rows = [r for r in results if r["arrival"] == arrival]
    head = ("| racks | policy | makespan (d) | avg JCT (d) | median JCT (d) | >P95 JCT (d) | >P99 JCT (d) "
            "| >P95 queue (d) | >P99 queue (d) | avg exposed comm. per job (h) | comm. share | preemptions "
            "| restarts (resumes, migrations) |")
    lines = [head, "| " + " | ".join(["---"] * (head.count("|") - 1)) + " |"]
    day = 86400.0
    for racks in sorted({r["racks"] for r in rows}):
        for policy in POLICIES:
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
                ax.bar(np.arange(len(racks)) + (k - (len(policies) - 1) / 2) * width, values, width, label=policy)
            ax.set_xticks(np.arange(len(racks)), [str(n) for n in racks])
            ax.set_xlabel("racks")
            ax.set_title(f"{arrival}: {label}", fontsize=9)
    axes[0][0].legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--racks", type=int, nargs="+", default=list(RACKS))
    p.add_argument("--policies", nargs="+", default=list(POLICIES))
    p.add_argument("--arrivals", nargs="+", default=["batch", "poisson"])
    p.add_argument("--trace", type=Path, default=None, help="replay this trace instead of the drawn workloads")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--ray", default=None, metavar="ADDRESS", help="run on this Ray cluster (halyard compare --ray)")
    p.add_argument("--out", type=Path, default=Path("docs"))
    p.add_argument("--work", type=Path, default=Path("out/dally-reproduction"),
                   help="traces, each run's files and the HTML reports (default: out/dally-reproduction)")
    p.add_argument("--from-json", action="store_true",
                   help="no simulation: rewrite the tables and plot from <out>/dally-reproduction.json")
    args = p.parse_args()
    if args.from_json:
        results = json.loads((args.out / "dally-reproduction.json").read_text(encoding="utf-8"))
        write(results, args.out, sorted({r["arrival"] for r in results}))
        return 0
    traces = workloads(args.arrivals, args.seed, args.trace, args.work / "traces")
    runs = run_and_save(specs(traces, args.racks, args.policies), args.work / "runs", workers=args.workers,
                        ray_address=args.ray, label="dally reproduction")
    baseline = "tiresias" if "tiresias" in args.policies else args.policies[0]
    for arrival in traces:
        for n in args.racks:
            group = [r for r in runs if dict(r.spec.tags) == {"arrival": arrival, "racks": n}]
            write_sweep_report(group, args.work / "reports" / f"{arrival}-{n}rack.html", runs_dir=args.work / "runs",
                               baseline=baseline, command=shlex.join(["python", *sys.argv]),
                               title=f"Dally reproduction: {arrival} arrivals on dally-{n}rack",
                               cluster_gpus=load_cluster(f"dally-{n}rack").total_gpus)
    results = [row(r) for r in runs]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "dally-reproduction.json").write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    write(results, args.out, list(traces))
    print(f"{len(runs)} runs; per-run files in {args.work / 'runs'}, HTML reports in {args.work / 'reports'}")
    return 0


def write(results: list[dict], out: Path, arrivals: list[str]) -> None:
    text = "\n\n".join(f"**{a} arrivals**\n\n{table(results, a)}" for a in arrivals)
    (out / "dally-reproduction-table.md").write_text(text + "\n", encoding="utf-8")
    plot(results, out / "img" / "dally-reproduction.png")


if __name__ == "__main__":
    raise SystemExit(main())
