"""Reproduce Synergy's simulation results (§5.3-§5.6) on the built-in synergy-128 cluster.

    .venv/bin/python benchmarks/reproduce_synergy.py --workers 2
    .venv/bin/python benchmarks/reproduce_synergy.py --trace my.csv --out out/synergy-mine

Three experiments, all on ``--cluster synergy-128`` (16 x 8 V100, 24 CPUs, 500 GB)
with Synergy's production-derived trace generator (traces/generator.py), metrics
over a steady-state window of job ids (``--measure``, as the paper's jobs 4000-4999):

1. **Load sweep**: average JCT of Synergy-TUNE vs GPU-proportional for FIFO, SRTF,
   LAS and FTF, single-GPU and multi-GPU traces, across arrival rates (§5.3.2, Fig. 9);
2. **TUNE vs OPT**: the same for Synergy-OPT (the §4.1 ILP) on a smaller trace (§5.6);
3. **GREEDY at CPU-heavy splits**: GREEDY vs TUNE vs proportional as the image share of
   the (image, language, speech) split grows (§5.4).

Scaled down from the paper (which replays 6,000+ jobs and measures ids 4000-4999) so
the whole script runs in a few minutes on 2 cores: ``--jobs`` jobs per run (default
2,000), measured over ids [jobs/4, 3*jobs/4) (the first quarter warms the cluster up,
the last quarter keeps it loaded while the window finishes). Writes
``docs/synergy-reproduction.json``, ``docs/synergy-reproduction-table.md`` and
``docs/img/synergy-reproduction.png``. Not part of the tests.

``--trace FILE`` instead runs GPU-proportional and TUNE under each ordering on that
trace (same cluster and window rule) and writes its table, the JSON and an HTML
comparison report. The runs are ``halyard simulate`` runs through the machinery of
``halyard compare`` (halyard.experiments): the generated traces are written as
canonical CSV (which reads back to the same jobs), runs go to worker processes
(``--workers``) or a Ray cluster (``--ray``) under one progress bar, and each run's
summary, per-job table, timeline and exact command land under ``<work>/runs/``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import matplotlib

from halyard.datamodel import load_cluster
from halyard.experiments import RunResult, RunSpec, run_and_save
from halyard.experiments.report import write_sweep_report
from halyard.traces import generate_synergy_trace, read_trace, write_trace

matplotlib.use("Agg")
import matplotlib.pyplot as plt

ORDERINGS = ("fifo", "srtf", "las", "ftf")
SPLIT = (60, 30, 10)  # (image, language, speech): one of the paper's splits (§5.4), image-heavy
LOADS = (4.0, 6.0, 8.0, 10.0)  # jobs per hour on 128 GPUs (multi-GPU trace: about 1.9 GPUs per job)
SINGLE_LOADS = (8.0, 12.0, 16.0, 20.0)  # single-GPU trace
OPT_LOADS = (6.0, 8.0)
GREEDY_SPLITS = ((20, 70, 10), (40, 50, 10), (60, 30, 10), (80, 10, 10))
ROOT = Path(__file__).resolve().parents[1]
CLUSTER = "synergy-128"


def tasks(jobs: int, opt_jobs: int, seed: int) -> list[tuple]:
    """(experiment, policy, load, multi-GPU, split, jobs, seed) of every run of the three experiments."""
    out = []
    for multi, loads in ((False, SINGLE_LOADS), (True, LOADS)):
        for load in loads:
            for o in ORDERINGS:
                for mech in ("proportional", "synergy-tune"):
                    out.append(("load", f"{mech}:{o}", load, multi, SPLIT, jobs, seed))
    for load in OPT_LOADS:
        for mech in ("proportional", "synergy-tune", "synergy-opt"):
            out.append(("opt", f"{mech}:srtf", load, True, SPLIT, opt_jobs, seed))
    for split in GREEDY_SPLITS:
        for mech in ("proportional", "synergy-greedy", "synergy-tune"):
            out.append(("greedy", f"{mech}:srtf", 8.0, True, split, jobs, seed))
    return out


def window(jobs: int) -> tuple[int, int]:
    return jobs // 4, 3 * jobs // 4


def specs(work: list[tuple], folder: Path) -> list[RunSpec]:
    """One run per task; each distinct generated trace is written once as canonical CSV."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for experiment, policy, load, multi, split, jobs, seed in work:
        stem = f"synergy-{'multi' if multi else 'single'}-{load:g}jph-{'-'.join(map(str, split))}-{jobs}-s{seed}"
        path = folder / f"{stem}.csv"
        if not path.exists():
            write_trace(generate_synergy_trace(jobs, rate_per_hour=load, split=split, multi_gpu=multi, seed=seed),
                        path)
        out.append(RunSpec(name=f"{experiment}-{stem}-{policy.replace(':', '_')}", trace=str(path), policy=policy,
                           cluster=CLUSTER, seed=seed, measure=window(jobs),
                           tags=(("experiment", experiment), ("load", load), ("multi_gpu", multi),
                                 ("split", tuple(split)), ("jobs", jobs))))
    return out


def row(result: RunResult) -> dict:
    """The reproduction's record of a run (its labels and the figures the tables use)."""
    s = result.summary
    tags = dict(result.spec.tags)
    if "split" in tags:
        tags["split"] = list(tags["split"])
    return tags | {"policy": result.spec.policy, "avg_jct_h": s["avg_jct_s"] / 3600.0,
                                     "p99_jct_h": s["p99_jct_s"] / 3600.0, "makespan_h": s["makespan_s"] / 3600.0,
                                     "wall_s": s["wall_s"]}


def trace_specs(trace: Path) -> list[RunSpec]:
    """Proportional and TUNE under each ordering on a given trace, over the same window rule."""
    jobs = len(read_trace(trace).jobs)
    return [RunSpec(name=f"{mech}_{o}", trace=str(trace), policy=f"{mech}:{o}", cluster=CLUSTER,
                    measure=window(jobs), tags=(("experiment", "trace"), ("jobs", jobs)))
            for o in ORDERINGS for mech in ("proportional", "synergy-tune")]


def trace_table(rows: list[dict], trace: Path) -> str:
    by_policy = {r["policy"]: r for r in rows}
    lines = ["<!-- generated by benchmarks/reproduce_synergy.py --trace; do not edit -->", "",
             f"### {trace.name} on {CLUSTER}: average JCT (h), proportional -> TUNE (speed-up)", "",
             "| ordering | proportional | TUNE | speed-up |", "| --- | --- | --- | --- |"]
    for o in ORDERINGS:
        p, t = by_policy[f"proportional:{o}"]["avg_jct_h"], by_policy[f"synergy-tune:{o}"]["avg_jct_h"]
        lines.append(f"| {o.upper()} | {p:.1f} | {t:.1f} | {p / t:.2f}x |")
    return "\n".join(lines) + "\n"


def table(rows: list[dict]) -> str:
    def get(exp, policy, load=None, multi=None, split=None):
        for r in rows:
            if (r["experiment"] == exp and r["policy"] == policy and (load is None or r["load"] == load)
                    and (multi is None or r["multi_gpu"] == multi) and (split is None or r["split"] == list(split))):
                return r
        raise KeyError((exp, policy, load, multi, split))

    lines = ["<!-- generated by benchmarks/reproduce_synergy.py; do not edit -->", ""]
    for multi, loads in ((False, SINGLE_LOADS), (True, LOADS)):
        kind = "multi-GPU" if multi else "single-GPU"
        lines += [f"### Load sweep, {kind} trace: average JCT (h), proportional -> TUNE (speed-up)", "",
                  "| policy | " + " | ".join(f"{x:g} jobs/h" for x in loads) + " |",
                  "| --- |" + " --- |" * len(loads)]
        for o in ORDERINGS:
            cells = []
            for load in loads:
                p = get("load", f"proportional:{o}", load, multi)["avg_jct_h"]
                t = get("load", f"synergy-tune:{o}", load, multi)["avg_jct_h"]
                cells.append(f"{p:.1f} -> {t:.1f} ({p / t:.2f}x)")
            lines.append(f"| {o.upper()} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["### TUNE vs OPT (SRTF, multi-GPU trace): average JCT (h)", "",
              "| load | proportional | TUNE | OPT | TUNE / OPT |", "| --- | --- | --- | --- | --- |"]
    for load in OPT_LOADS:
        p, t, o = (get("opt", f"{m}:srtf", load)["avg_jct_h"] for m in ("proportional", "synergy-tune", "synergy-opt"))
        lines.append(f"| {load:g} jobs/h | {p:.1f} | {t:.1f} | {o:.1f} | {t / o:.3f} |")
    lines += ["", "### GREEDY at CPU-heavy splits (SRTF, multi-GPU, 8 jobs/h): average JCT (h)", "",
              "| split (image, language, speech) | proportional | GREEDY | TUNE |", "| --- | --- | --- | --- |"]
    for split in GREEDY_SPLITS:
        p, g, t = (get("greedy", f"{m}:srtf", split=split)["avg_jct_h"]
                   for m in ("proportional", "synergy-greedy", "synergy-tune"))
        lines.append(f"| {split} | {p:.1f} | {g:.1f} | {t:.1f} |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, multi, loads in ((axes[0], False, SINGLE_LOADS), (axes[1], True, LOADS)):
        for o in ORDERINGS:
            for mech, style in (("proportional", "--"), ("synergy-tune", "-")):
                ys = [next(r["avg_jct_h"] for r in rows if r["experiment"] == "load" and r["multi_gpu"] == multi
                           and r["policy"] == f"{mech}:{o}" and r["load"] == x) for x in loads]
                ax.plot(loads, ys, style, marker="o", label=f"{o.upper()} {'TUNE' if 'tune' in mech else 'prop.'}")
        ax.set_title(f"synergy-128, {'multi' if multi else 'single'}-GPU trace, split {SPLIT}")
        ax.set_xlabel("load (jobs / hour)")
        ax.set_ylabel("average JCT (h)")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--opt-jobs", type=int, default=600)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--trace", type=Path, default=None,
                    help="compare proportional and TUNE under each ordering on this trace instead")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--ray", default=None, metavar="ADDRESS", help="run on this Ray cluster (halyard compare --ray)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs")
    ap.add_argument("--work", type=Path, default=ROOT / "out" / "synergy-reproduction",
                    help="generated traces and each run's files (default: out/synergy-reproduction)")
    args = ap.parse_args()
    started = time.perf_counter()
    work = trace_specs(args.trace) if args.trace else specs(tasks(args.jobs, args.opt_jobs, args.seed),
                                                             args.work / "traces")
    runs = run_and_save(work, args.work / "runs", workers=args.workers, ray_address=args.ray,
                        label="synergy reproduction")
    rows = [row(r) for r in runs]
    args.out.mkdir(parents=True, exist_ok=True)
    if args.trace:
        (args.out / "synergy-trace.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
        text = trace_table(rows, args.trace)
        (args.out / "synergy-trace-table.md").write_text(text, encoding="utf-8")
        write_sweep_report(runs, args.out / "synergy-trace.html", runs_dir=args.work / "runs",
                           baseline="proportional:fifo", command=shlex.join(["python", *sys.argv]),
                           title=f"Synergy: proportional vs TUNE on {args.trace.name}",
                           cluster_gpus=load_cluster(CLUSTER).total_gpus)
    else:
        (args.out / "synergy-reproduction.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
        text = table(rows)
        (args.out / "synergy-reproduction-table.md").write_text(text, encoding="utf-8")
        plot(rows, args.out / "img" / "synergy-reproduction.png")
    print(text)
    print(f"{len(rows)} runs in {time.perf_counter() - started:.0f} s; per-run files in {args.work / 'runs'}")


if __name__ == "__main__":
    main()
