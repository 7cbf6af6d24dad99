"""Reproduce EasyScale's trace experiment (§5.2): YARN-CS vs EasyScale_homo vs EasyScale_heter.

    .venv/bin/python benchmarks/reproduce_easyscale.py          # about 100 s on one core

On the built-in ``easyscale-64`` cluster (4 x 8 V100, 8 x 2 P100, 4 x 4 T4) through the
simulator and the default performance model, at the artifact's 60 s rounds. Two workloads from
:func:`halyard.traces.generate_easyscale_trace` (seeded; docs/reproductions/easyscale-reproduction.md lists
every choice): ``gavel-sizes`` (GPU counts 1/2/4/8 at Gavel's 70/10/15/5 %) and ``multi-gpu``
(the same at 25 % each: the regime where gang scheduling makes jobs wait). Each job runs the
same number of iterations under every policy: the trace's run time on the GPU type it requests,
consolidated. YARN-CS gets the jobs as fixed-size DDP jobs of their requested type; EasyScale
gets them as elastic jobs (maxP = GPUs requested, 1..maxP GPUs, any type). A third workload,
``artifact-mix``, takes the job sizes, requested types, job count and arrival rate of the public
artifact's §5.2 trace (``ARTIFACT_DEMAND``: half the jobs ask for all 32 V100s) with Gavel's run
times x ``ARTIFACT_DURATION_SCALE``; on it YARN-CS also runs with each of its two named options
(``backfill``, ``one_job_at_a_time``), to measure them.

The drawn traces go to ``<work>/<workload>-{fixed,elastic}.csv`` (canonical CSV, iterations set),
so any run can be repeated with the CLI, e.g. ``halyard simulate --trace
out/easyscale-reproduction/multi-gpu-elastic.csv --cluster easyscale-64 --policy easyscale-heter
--round-s 60``.

Writes ``<out>/easyscale-reproduction.json`` (every run's summary and allocation timeline),
the tables of ``<out>/easyscale-reproduction.md`` (its marked blocks, when every workload ran),
``<out>/easyscale-reproduction-table.md`` and ``<out>/img/easyscale-reproduction.png``
(JCT and makespan over YARN-CS, and allocated GPUs over time as the paper's Fig. 15), and the
co-location experiment (§5.3): one day of a serving load that takes GPUs at peak hours, alone, with
YARN-CS training jobs, and with EasyScale_heter training jobs filling the gaps.
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
from generated_blocks import filled  # benchmarks/ is not a package: found on sys.path

from halyard.datamodel import EventKind, JobSpec, load_cluster
from halyard.emulator import PerformanceModel
from halyard.parallelism import needs_homogeneous
from halyard.policies import make_policy
from halyard.policies.yarn import yarn_cs
from halyard.scheduling import Simulator, summarize
from halyard.traces import (
    ARTIFACT_DEMAND,
    ARTIFACT_JOBS,
    ARTIFACT_RATE_PER_HOUR,
    generate_easyscale_trace,
    write_trace,
)
from halyard.traces.generator import GPU_DEMAND_PROBS

matplotlib.use("Agg")
import matplotlib.pyplot as plt

CLUSTER = "easyscale-64"
ROUND_S = 60.0  # EasyScale artifact's scheduling interval (REFERENCE-NUMBERS.md)
POLICIES = ("yarn-cs", "easyscale-homo", "easyscale-heter")
# The artifact's run times (epochs of 1 % of each dataset) are minutes; Gavel's at x 0.01 have a
# 164 s median and a 600 s mean, the same order (a choice: the paper's distribution is not public).
ARTIFACT_DURATION_SCALE = 0.01
# name -> generator arguments; None means "from the command line" (--jobs, --rate, --duration-scale).
WORKLOADS: dict[str, dict] = {
    "gavel-sizes": {"gpu_probabilities": GPU_DEMAND_PROBS},
    "multi-gpu": {"gpu_probabilities": (0.25, 0.25, 0.25, 0.25)},  # each size alike
    "artifact-mix": {"demand": ARTIFACT_DEMAND, "n": ARTIFACT_JOBS, "rate": ARTIFACT_RATE_PER_HOUR,
                     "scale": ARTIFACT_DURATION_SCALE},
}
# YARN-CS with one of its options on (policies/yarn.py; rules the paper does not state), run on artifact-mix.
YARN_VARIANTS = {"yarn-cs+backfill": lambda: yarn_cs(backfill=True, name="yarn-cs+backfill"),
                 "yarn-cs+one-at-a-time": lambda: yarn_cs(one_job_at_a_time=True, name="yarn-cs+one-at-a-time")}
# The artifact's type rule (simulator.py get_placement_proposals; not in the paper's text, so measured as
# extra rows, not the default): a job that may not mix GPU types -- every job under EasyScale_homo, a
# convolution model (D2-costly, §3.3) under EasyScale_heter -- runs on its *preferred* (requested) type
# only, and waits for it, instead of starting on whichever type has room and staying there.
REQUESTED_TYPE = "@requested-type"
ARTIFACT_FIGURES = {"yarn-cs": (8904.97, 16560.0), "easyscale-homo": (1070.50, 6720.0),
                    "easyscale-heter": (676.75, 6000.0)}  # artifact simulator/plot/jct_makespan.csv (s)
PAPER = {"easyscale-homo": (8.3, 2.5), "easyscale-heter": (13.2, 2.8)}  # §5.2: JCT and makespan over YARN-CS


def traces(n: int, rate: float, seed: int, scale: float, shape: dict, perf: PerformanceModel,
           cluster) -> tuple[list[JobSpec], list[JobSpec]]:
    """(fixed, elastic) versions of one drawn workload with the same iterations per job; ``shape`` is
    a :data:`WORKLOADS` entry (its n, rate and scale override the arguments)."""
    n, rate, scale = shape.get("n", n), shape.get("rate", rate), shape.get("scale", scale)
    sizes = {k: v for k, v in shape.items() if k in ("gpu_probabilities", "demand")}
    fixed = generate_easyscale_trace(n, rate_per_hour=rate, seed=seed, elastic=False, duration_scale=scale,
                                     **sizes)
    elastic = generate_easyscale_trace(n, rate_per_hour=rate, seed=seed, elastic=True, duration_scale=scale,
                                       **sizes)
    iterations = [perf.iterations_for(j, cluster) for j in fixed]
    return ([replace(j, iterations=i, duration_s=None) for j, i in zip(fixed, iterations, strict=True)],
            [replace(j, iterations=i, duration_s=None) for j, i in zip(elastic, iterations, strict=True)])


def requested_type(policy: str, jobs: list[JobSpec]) -> list[JobSpec]:
    """``jobs`` under the artifact's type rule (:data:`REQUESTED_TYPE`) for ``policy``."""
    pin = (lambda j: True) if policy == "easyscale-homo" else (lambda j: needs_homogeneous(j.model))
    return [replace(j, gpu_type=j.extra["requested_gpu_type"]) if pin(j) else j for j in jobs]


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
    if policy.endswith(REQUESTED_TYPE):
        return run(policy.removesuffix(REQUESTED_TYPE), requested_type(policy.removesuffix(REQUESTED_TYPE), jobs),
                   cluster, perf) | {"policy": policy}
    sim = Simulator(cluster, YARN_VARIANTS[policy]() if policy in YARN_VARIANTS else make_policy(policy), perf,
                    round_s=ROUND_S)
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


# Co-location (§5.3, Fig. 16): a serving load of 16 GPUs all day and 32 more at peak hours (8:00-20:00),
# as high-priority fixed jobs (NeuMF inference stands in for serving: it barely communicates), and
# elastic training jobs that fill what serving leaves idle. Shape and sizes are ours (the paper's
# cluster has 3,000+ GPUs and gives no per-hour load); the day is 24 h of simulated time.
DAY_S = 24 * 3600.0
SERVING = [(0.0, DAY_S, 8), (0.0, DAY_S, 8)] + [(8 * 3600.0, 20 * 3600.0, 8)] * 4  # (start, end, GPUs)
TRAINING_JOBS = 12  # maxP 8 each, enough to fill the cluster at night
TRAINING_MODELS = ("bert-large", "swint", "neumf")  # no convolution models: heterogeneous GPUs are fair game


def colocation_jobs(elastic: bool) -> list[JobSpec]:
    serving = [JobSpec(job_id=f"serve-{i}", submit_time=t0, model="neumf", num_gpus=g, duration_s=t1 - t0,
                       priority=1) for i, (t0, t1, g) in enumerate(SERVING)]
    shape = {"min_gpus": 1, "max_gpus": 8, "logical_workers": 8} if elastic else {}
    training = [JobSpec(job_id=f"train-{i:02d}", submit_time=1.0 + i, model=TRAINING_MODELS[i % len(TRAINING_MODELS)],
                        num_gpus=8, duration_s=2 * DAY_S, **shape) for i in range(TRAINING_JOBS)]
    return sorted(serving + training, key=lambda j: j.submit_time)


def colocation(cluster, perf: PerformanceModel) -> list[dict]:
    """GPU allocation over the day and the serving jobs' waits: serving alone, with YARN-CS gang jobs,
    with EasyScale_heter elastic jobs."""
    out = []
    for label, policy, jobs in (("serving only", "yarn-cs", [j for j in colocation_jobs(False)
                                                              if j.job_id.startswith("serve")]),
                                ("+ YARN-CS training", "yarn-cs", colocation_jobs(False)),
                                ("+ EasyScale_heter training", "easyscale-heter", colocation_jobs(True))):
        sim = Simulator(cluster, make_policy(policy), perf, round_s=ROUND_S)
        sim.run([replace(j, iterations=perf.iterations_for(j, cluster), duration_s=None) for j in jobs])
        timeline = [(t, g) for t, g in allocation_timeline(sim.core) if t <= DAY_S]
        timeline.append((DAY_S, timeline[-1][1]))  # held until the end of the day
        ends = [*(t for t, _ in timeline[1:]), DAY_S]
        gpu_s = sum((t1 - t0) * g for (t0, g), t1 in zip(timeline, ends, strict=True))
        serving = [r for r in sim.core.records.values() if r.spec.priority > 0]
        out.append({"setting": label, "policy": policy, "allocation": gpu_s / (DAY_S * cluster.total_gpus),
                    "serving_wait_s": max(r.queued_s for r in serving),
                    "scale_ins": sum(1 for e in sim.core.log if e.kind is EventKind.RESIZED),
                    "timeline": timeline})
    return out


EXTRA = (*YARN_VARIANTS, *(p + REQUESTED_TYPE for p in POLICIES[1:]))  # measured on artifact-mix only
SEEDS = range(5)  # artifact-mix has 62 jobs, so one draw is noisy: its gains over five seeds


def cells(gains: list[float]) -> str:
    """Four gains one a cell, then the requested-type pairs two a cell."""
    head = [f"{g:.2f}x" for g in gains[:4]]
    pairs = [f"{a:.2f}x / {b:.2f}x" for a, b in zip(gains[4::2], gains[5::2], strict=True)]
    return " | ".join(head + pairs)


def seed_sweep(cluster, perf: PerformanceModel, scale: float = ARTIFACT_DURATION_SCALE) -> list[dict]:
    """EasyScale's gains over YARN-CS on ``artifact-mix`` (run times x ``scale``) for each seed of :data:`SEEDS`."""
    rows = []
    for seed in SEEDS:
        fixed, elastic = traces(0, 1.0, seed, 1.0, WORKLOADS["artifact-mix"] | {"scale": scale}, perf, cluster)
        r = {p: run(p, fixed if p == "yarn-cs" else elastic, cluster, perf) for p in SWEPT}
        base = r["yarn-cs"]
        rows.append({"seed": seed} | {f"{p}/{m}": base[k] / r[p][k] for p in SWEPT[1:]
                                      for m, k in (("jct", "avg_jct_s"), ("makespan", "makespan_s"))})
    return rows


SWEPT = (*POLICIES, *(p + REQUESTED_TYPE for p in POLICIES[1:]))


def seed_table(rows: list[dict]) -> str:
    lines = ["| artifact-mix seed | homo JCT gain | homo makespan gain | heter JCT gain | heter makespan gain "
             "| homo JCT / makespan, requested type | heter JCT / makespan, requested type |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    cols = [f"{p}/{m}" for p in SWEPT[1:] for m in ("jct", "makespan")]
    for r in rows:
        lines.append(f"| {r['seed']} | " + cells([r[c] for c in cols]) + " |")
    lines.append("| mean | " + cells([sum(r[c] for r in rows) / len(rows) for c in cols]) + " |")
    lines.append("| paper | 8.3x | 2.5x | 13.2x | 2.8x | 8.3x / 2.5x | 13.2x / 2.8x |")
    return "\n".join(lines) + "\n"


def colocation_table(rows: list[dict]) -> str:
    lines = ["| setting | GPU allocation over the day | longest serving wait (s) | resizes |", "|---|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['setting']} | {100 * r['allocation']:.1f} % | {r['serving_wait_s']:.0f} "
                     f"| {r['scale_ins']} |")
    return "\n".join(lines) + "\n"


def artifact(workload: str, policy: str) -> str:
    """The artifact's own simulated figures beside the artifact-like workload's rows."""
    fig = ARTIFACT_FIGURES.get(policy) if workload == "artifact-mix" else None
    return f"{fig[0] / 3600:.2f} / {fig[1] / 3600:.2f}" if fig else ""


def table(results: dict[str, list[dict]]) -> str:
    lines = ["| workload | policy | avg JCT (h) | makespan (h) | avg wait (h) | resizes | JCT gain | makespan gain "
             "| paper JCT / makespan gain | artifact JCT / makespan (h) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for name, rows in results.items():
        base = next(r for r in rows if r["policy"] == "yarn-cs")
        for r in rows:
            paper = PAPER.get(r["policy"])
            claim = (f"{paper[0]:.1f}x / {paper[1]:.1f}x" if paper else
                     "1x (baseline)" if r["policy"] == "yarn-cs" else "not in the paper")
            lines.append(f"| {name} | {r['policy']} | {r['avg_jct_s'] / 3600:.2f} | {r['makespan_s'] / 3600:.2f} | "
                         f"{r['avg_wait_s'] / 3600:.2f} | {r['resizes']} | "
                         f"{base['avg_jct_s'] / r['avg_jct_s']:.2f}x | {base['makespan_s'] / r['makespan_s']:.2f}x | "
                         f"{claim} | {artifact(name, r['policy'])} |")
    return "\n".join(lines) + "\n"


def plot(results: dict[str, list[dict]], coloc: list[dict], path: Path) -> None:
    fig, axes = plt.subplots(1, 2 + len(results), figsize=(5 * (2 + len(results)), 3.6))
    names = list(results)
    width = 0.25
    for k, policy in enumerate(POLICIES[1:]):  # the YARN-CS variants are in the table only
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
    for r in coloc:
        axes[-1].step([t / 3600 for t, _ in r["timeline"]], [g for _, g in r["timeline"]], where="post",
                      label=r["setting"], lw=1)
    axes[-1].set_title("co-location with serving (one day)", fontsize=9)
    axes[-1].set_xlabel("hour of day")
    axes[-1].set_ylim(0, 66)
    axes[-1].legend(fontsize=7)
    for ax, name in zip(axes[1:-1], names, strict=True):
        for r in (r for r in results[name] if r["policy"] in POLICIES):
            ts = [t / 3600 for t, _ in r["timeline"]]
            ax.step(ts, [g for _, g in r["timeline"]], where="post", label=r["policy"], lw=1)
        ax.set_title(f"allocated GPUs ({name})", fontsize=9)
        ax.set_xlabel("hours")
        ax.set_ylim(0, 66)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def table_page(command: str, results: dict[str, list[dict]], sweep: list[dict], coloc: list[dict]) -> str:
    """``easyscale-reproduction-table.md``: every table of the run."""
    return (f"<!-- generated by `{command}` -->\n\n" + table(results) + "\n"
            + (seed_table(sweep) + "\n" if sweep else "") + colocation_table(coloc))


def pages(docs: Path) -> dict[Path, str]:
    """The table page and the page's generated blocks, rendered from ``docs/reproductions/easyscale-reproduction.json``
    (no simulation)."""
    stored = json.loads((docs / "easyscale-reproduction.json").read_text(encoding="utf-8"))
    results, sweep, coloc = stored["results"], stored["artifact_mix_seeds"], stored["colocation"]
    out = {docs / "easyscale-reproduction-table.md": table_page(stored["command"], results, sweep, coloc)}
    if set(results) == set(WORKLOADS):
        out[docs / "easyscale-reproduction.md"] = filled(docs / "easyscale-reproduction.md", {
            "results": table(results), "seeds": seed_table(sweep), "colocation": colocation_table(coloc)})
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=160)
    p.add_argument("--rate", type=float, default=40.0, help="Poisson arrivals per hour")
    p.add_argument("--duration-scale", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    p.add_argument("--out", type=Path, default=Path("docs/reproductions"))
    p.add_argument("--work", type=Path, default=Path("out/easyscale-reproduction"),
                   help="where the drawn traces go (canonical CSV), for halyard simulate/replay --trace")
    p.add_argument("--scale-sweep", type=float, nargs="+", metavar="SCALE",
                   help="only print artifact-mix's mean gains over the seeds at each run-time scale (writes nothing)")
    args = p.parse_args()
    if args.scale_sweep:
        cluster, perf = load_cluster(CLUSTER), PerformanceModel()
        for scale in args.scale_sweep:
            lines = seed_table(seed_sweep(cluster, perf, scale)).splitlines()
            print(f"run times x {scale}:", *lines[:2], lines[-2], sep="\n")  # the header and the mean
        return 0
    args.work.mkdir(parents=True, exist_ok=True)
    cluster = load_cluster(CLUSTER)
    perf = PerformanceModel()
    results: dict[str, list[dict]] = {}
    for name in args.workloads:
        fixed, elastic = traces(args.jobs, args.rate, args.seed, args.duration_scale, WORKLOADS[name], perf, cluster)
        write_trace(fixed, args.work / f"{name}-fixed.csv")
        write_trace(elastic, args.work / f"{name}-elastic.csv")
        results[name] = []
        for policy in (*POLICIES, *EXTRA) if name == "artifact-mix" else POLICIES:
            r = run(policy, fixed if policy.startswith("yarn-cs") else elastic, cluster, perf)
            results[name].append(r)
            print(f"{name} {policy}: avg JCT {r['avg_jct_s'] / 3600:.2f} h, makespan {r['makespan_s'] / 3600:.2f} h, "
                  f"{r['resizes']} resizes ({r['wall_s']:.1f} s)", file=sys.stderr)
    sweep = seed_sweep(cluster, perf) if "artifact-mix" in args.workloads else []
    coloc = colocation(cluster, perf)
    command = "python benchmarks/reproduce_easyscale.py " + shlex.join(sys.argv[1:])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "easyscale-reproduction-table.md").write_text(table_page(command.strip(), results, sweep, coloc))
    def slim(r: dict) -> dict:  # the timeline thinned to about 400 points
        step = max(1, len(r["timeline"]) // 400)
        return {k: v for k, v in r.items() if k not in ("timeline", "wall_s")} | {"timeline": r["timeline"][::step]}

    (args.out / "easyscale-reproduction.json").write_text(json.dumps(
        {"command": command.strip(), "cluster": CLUSTER, "round_s": ROUND_S, "jobs": args.jobs,
         "rate_per_hour": args.rate, "duration_scale": args.duration_scale, "seed": args.seed,
         "results": {n: [slim(r) for r in rows] for n, rows in results.items()},
         "artifact_mix_seeds": sweep, "colocation": [slim(r) for r in coloc]}, indent=1) + "\n")
    plot(results, coloc, args.out / "img" / "easyscale-reproduction.png")
    page = args.out / "easyscale-reproduction.md"
    if page.exists() and set(args.workloads) == set(WORKLOADS):
        page.write_text(filled(page, {"results": table(results), "seeds": seed_table(sweep),
                                      "colocation": colocation_table(coloc)}))
    print(table(results) + "\n" + (seed_table(sweep) + "\n" if sweep else "") + colocation_table(coloc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
