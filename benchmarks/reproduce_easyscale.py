"""Reproduce EasyScale's trace experiment (§5.2): YARN-CS vs EasyScale_homo vs EasyScale_heter.

    .venv/bin/python benchmarks/reproduce_easyscale.py          # about a minute on one core

On the built-in ``easyscale-64`` cluster (4 x 8 V100, 8 x 2 P100, 4 x 4 T4) through the
simulator and the default performance model, at the artifact's 60 s rounds. Two workloads from
:func:`halyard.traces.generate_easyscale_trace` (seeded; docs/easyscale-reproduction.md lists
every choice): ``gavel-sizes`` (GPU counts 1/2/4/8 at Gavel's 70/10/15/5 %) and ``multi-gpu``
(the same at 25 % each: the regime where gang scheduling makes jobs wait). Each job runs the
same number of iterations under every policy: the trace's run time on the GPU type it requests,
consolidated. YARN-CS gets the jobs as fixed-size DDP jobs of their requested type; EasyScale
gets them as elastic jobs (maxP = GPUs requested, 1..maxP GPUs, any type).

Writes ``<out>/easyscale-reproduction.json`` (every run's summary and allocation timeline),
``<out>/easyscale-reproduction-table.md`` and ``<out>/img/easyscale-reproduction.png``
(JCT and makespan over YARN-CS, and allocated GPUs over time as the paper's Fig. 15).
Not part of the tests.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path

import matplotlib

from halyard.controlplane import Simulator, summarize
from halyard.datamodel import EventKind, JobSpec, load_cluster
from halyard.emulator import PerformanceModel
from halyard.policies import make_policy
from halyard.traces import generate_easyscale_trace

matplotlib.use("Agg")
import matplotlib.pyplot as plt

CLUSTER = "easyscale-64"
ROUND_S = 60.0  # EasyScale artifact's scheduling interval (REFERENCE-NUMBERS.md)
POLICIES = ("yarn-cs", "easyscale-homo", "easyscale-heter")
WORKLOADS = {"gavel-sizes": (0.70, 0.10, 0.15, 0.05), "multi-gpu": (0.25, 0.25, 0.25, 0.25)}
PAPER = {"easyscale-homo": (8.3, 2.5), "easyscale-heter": (13.2, 2.8)}  # §5.2: JCT and makespan over YARN-CS


def traces(n: int, rate: float, seed: int, scale: float, sizes: tuple[float, ...], perf: PerformanceModel,
           cluster) -> tuple[list[JobSpec], list[JobSpec]]:
    """(fixed, elastic) versions of one drawn workload with the same iterations per job."""
    fixed = generate_easyscale_trace(n, rate_per_hour=rate, seed=seed, elastic=False, duration_scale=scale,
                                     gpu_probabilities=sizes)
    elastic = generate_easyscale_trace(n, rate_per_hour=rate, seed=seed, elastic=True, duration_scale=scale,
                                       gpu_probabilities=sizes)
    iterations = [perf.iterations_for(j, cluster) for j in fixed]
    return ([replace(j, iterations=i, duration_s=None) for j, i in zip(fixed, iterations, strict=True)],
            [replace(j, iterations=i, duration_s=None) for j, i in zip(elastic, iterations, strict=True)])


def allocation_timeline(core) -> list[tuple[float, int]]:
    """(time, GPUs allocated) after every start, resize and end, from the event log."""
    held: dict[str, int] = {}
    out: list[tuple[float, int]] = []
    for e in core.log:
        if e.kind in (EventKind.STARTED, EventKind.RESIZED, EventKind.MIGRATED):
            held[e.job_id] = sum(len(p.split(":")[1].split(",")) for p in e.detail.split(";"))
        elif e.kind in (EventKind.COMPLETED, EventKind.PREEMPTED, EventKind.FAILED, EventKind.CANCELLED):
            held.pop(e.job_id, None)
        else:
            continue
        out.append((e.time, sum(held.values())))
    return out


def run(policy: str, jobs: list[JobSpec], cluster, perf: PerformanceModel) -> dict:
    began = time.perf_counter()
    sim = Simulator(cluster, make_policy(policy), perf, round_s=ROUND_S)
    sim.run(jobs)
    s = summarize(sim.core, policy=policy, trace_jobs=len(jobs), rejected=0, wall_s=time.perf_counter() - began)
    waits = [r.queued_s for r in sim.core.records.values()]
    resized = sum(1 for e in sim.core.log if e.kind is EventKind.RESIZED)
    timeline = allocation_timeline(sim.core)
    end = s["makespan_s"] + min(j.submit_time for j in jobs)
    busy = sum((t1 - t0) * g for (t0, g), (t1, _) in zip(timeline, [*timeline[1:], (end, 0)], strict=True))
    return {"policy": policy, "completed": s["completed"], "avg_jct_s": s["avg_jct_s"], "makespan_s": s["makespan_s"],
            "avg_wait_s": sum(waits) / len(waits), "resizes": resized,
            "gpu_hours": busy / 3600.0, "wall_s": s["wall_s"], "timeline": timeline}


def table(results: dict[str, list[dict]]) -> str:
    lines = ["| workload | policy | avg JCT (h) | makespan (h) | avg wait (h) | resizes | JCT gain | makespan gain "
             "| paper JCT / makespan gain |", "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for name, rows in results.items():
        base = next(r for r in rows if r["policy"] == "yarn-cs")
        for r in rows:
            paper = PAPER.get(r["policy"])
            claim = f"{paper[0]:.1f}x / {paper[1]:.1f}x" if paper else "1x (baseline)"
            lines.append(f"| {name} | {r['policy']} | {r['avg_jct_s'] / 3600:.2f} | {r['makespan_s'] / 3600:.2f} | "
                         f"{r['avg_wait_s'] / 3600:.2f} | {r['resizes']} | "
                         f"{base['avg_jct_s'] / r['avg_jct_s']:.2f}x | {base['makespan_s'] / r['makespan_s']:.2f}x | "
                         f"{claim} |")
    return "\n".join(lines) + "\n"


def plot(results: dict[str, list[dict]], path: Path) -> None:
    fig, axes = plt.subplots(1, 1 + len(results), figsize=(5 * (1 + len(results)), 3.6))
    names = list(results)
    width = 0.25
    for k, policy in enumerate(POLICIES[1:]):
        gains = []
        for name in names:
            base = next(r for r in results[name] if r["policy"] == "yarn-cs")
            r = next(r for r in results[name] if r["policy"] == policy)
            gains += [base["avg_jct_s"] / r["avg_jct_s"], base["makespan_s"] / r["makespan_s"]]
        xs = [i + (k - 0.5) * width for i in range(len(gains))]
        axes[0].bar(xs, gains, width, label=policy)
    axes[0].set_xticks(range(2 * len(names)), [f"{n}\n{m}" for n in names for m in ("JCT", "makespan")], fontsize=7)
    axes[0].axhline(1.0, color="grey", lw=0.8)
    axes[0].set_ylabel("improvement over YARN-CS (x)")
    axes[0].legend(fontsize=7)
    for ax, name in zip(axes[1:], names, strict=True):
        for r in results[name]:
            ts = [t / 3600 for t, _ in r["timeline"]]
            ax.step(ts, [g for _, g in r["timeline"]], where="post", label=r["policy"], lw=1)
        ax.set_title(f"allocated GPUs ({name})", fontsize=9)
        ax.set_xlabel("hours")
        ax.set_ylim(0, 66)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=160)
    p.add_argument("--rate", type=float, default=40.0, help="Poisson arrivals per hour")
    p.add_argument("--duration-scale", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    p.add_argument("--out", type=Path, default=Path("docs"))
    args = p.parse_args()
    cluster = load_cluster(CLUSTER)
    perf = PerformanceModel()
    results: dict[str, list[dict]] = {}
    for name in args.workloads:
        fixed, elastic = traces(args.jobs, args.rate, args.seed, args.duration_scale, WORKLOADS[name], perf, cluster)
        results[name] = []
        for policy in POLICIES:
            r = run(policy, fixed if policy == "yarn-cs" else elastic, cluster, perf)
            results[name].append(r)
            print(f"{name} {policy}: avg JCT {r['avg_jct_s'] / 3600:.2f} h, makespan {r['makespan_s'] / 3600:.2f} h, "
                  f"{r['resizes']} resizes ({r['wall_s']:.1f} s)", file=sys.stderr)
    command = "python benchmarks/reproduce_easyscale.py " + shlex.join(sys.argv[1:])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "easyscale-reproduction-table.md").write_text(
        f"<!-- generated by `{command.strip()}` -->\n\n" + table(results))
    def slim(r: dict) -> dict:  # the timeline thinned to about 400 points
        step = max(1, len(r["timeline"]) // 400)
        return {k: v for k, v in r.items() if k != "timeline"} | {"timeline": r["timeline"][::step]}

    (args.out / "easyscale-reproduction.json").write_text(json.dumps(
        {"command": command.strip(), "cluster": CLUSTER, "round_s": ROUND_S, "jobs": args.jobs,
         "rate_per_hour": args.rate, "duration_scale": args.duration_scale, "seed": args.seed,
         "results": {n: [slim(r) for r in rows] for n, rows in results.items()}}, indent=1) + "\n")
    plot(results, args.out / "img" / "easyscale-reproduction.png")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
