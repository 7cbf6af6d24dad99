"""Reproduce Synergy's simulation results (§5.3) on the built-in synergy-128 cluster.

    .venv/bin/python benchmarks/reproduce_synergy.py --workers 2
    .venv/bin/python benchmarks/reproduce_synergy.py --trace my.csv --out out/synergy-mine

Everything runs on ``--cluster synergy-128`` (16 x 8 V100, 24 CPUs, 500 GB; the public
simulator's default cluster) with Synergy's production-derived trace generator
(traces/generator.py), single-GPU jobs, the paper's split (image, language, speech) =
(20, 70, 10) "in all cases" (§5.3.2), and the public simulator's run semantics: arrivals go
on until the measured jobs have ended (``--until-measured``) and SRTF/LAS carry its 1,000-hour
starvation guard (``+starvation-guard``; docs/synergy.md says why both). Four parts (``--parts``):

1. ``public`` -- **the public simulator's configuration** (msr-fiddle/synergy ``runner.py``: 9 jobs/h,
   seed 42, jobs 4000-4999 measured): SRTF, LAS and FIFO with GPU-proportional and TUNE,
   beside the public simulator's printed means and the paper's Fig. 9 FIFO point;
2. ``candidates`` -- the same configuration, TUNE's remaining differences from the public simulator
   one at a time (every-pass vs round-based, GPU re-placement, restart cost, SRTF key);
3. ``sweep`` -- **load sweep**: SRTF and FIFO, proportional vs TUNE, across loads that bracket the
   window where proportional saturates and TUNE does not (jobs 1000-1999 of each run measured);
4. ``philly`` -- **Table 6a**: the Philly trace on 512 GPUs (``synergy-512``), SRTF, LAS, FIFO.

``--quick`` runs the ``public`` part only (the slow parts skipped) and writes under the work
folder, not docs/. Writes ``docs/synergy-reproduction.json``, ``docs/synergy-reproduction-table.md``
and ``docs/img/synergy-reproduction.png``. Not part of the tests.

``--trace FILE`` instead runs GPU-proportional and TUNE under each ordering on that trace
(window: the middle half) and writes its table, the JSON and an HTML comparison report. The
runs are ``halyard simulate`` runs through the machinery of ``halyard compare``
(halyard.experiments): the generated traces are written as canonical CSV, runs go to worker
processes (``--workers``) or a Ray cluster (``--ray``) under one progress bar, and each run's
summary, per-job table, timeline and exact command land under ``<work>/runs/``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
import time
from pathlib import Path

import matplotlib

from halyard.controlplane.runtables import SUMMARY_FILE
from halyard.datamodel import load_cluster
from halyard.experiments import RunResult, RunSpec, run_and_save
from halyard.experiments.report import write_sweep_report
from halyard.traces import generate_synergy_trace, read_trace, write_trace
from halyard.traces.philly import read_philly

matplotlib.use("Agg")
import matplotlib.pyplot as plt

ORDERINGS = ("fifo", "srtf", "las", "ftf")  # the --trace comparison
SPLIT = (20, 70, 10)  # (image, language, speech): the paper's split in §5.3.2 ("in all cases")
ROOT = Path(__file__).resolve().parents[1]
CLUSTER = "synergy-128"
GUARD = "+starvation-guard"  # the public simulator's 1,000-hour rule, on SRTF and LAS

# 1. The public simulator's configuration (runner.py: jobs_per_hour 9, seed 42,
# series_id_filter (4000, 5000)). The trace is long enough that arrivals never stop before
# the measured jobs end (the run stops there).
PUBLIC_RATE, PUBLIC_SEED, PUBLIC_WINDOW, PUBLIC_JOBS = 9.0, 42, (4000, 5000), 20_000
PUBLIC_POLICIES = ("proportional:srtf", "synergy-tune:srtf", "synergy-tune:las", "proportional:fifo",
                   "synergy-tune:fifo")
# Their figures: average JCT (h) printed by msr-fiddle/synergy's simulator on this configuration
# (issue 21), and the paper's Fig. 9 caption (FIFO, single-GPU, 9 jobs/h: 81 h -> 22 h).
PUBLIC_FIGURES = {"proportional:srtf": 38.03, "synergy-tune:srtf": 16.60, "synergy-tune:las": 33.15}
PUBLIC_P99 = {"proportional:srtf": 1158.0}
PAPER_FIG9 = {"proportional:fifo": 81.0, "synergy-tune:fifo": 22.0}

# 2. TUNE's remaining differences from the public simulator, one at a time, all in one part
# (label, policy, catalog): "free" is a catalog overlay with (next to) no checkpoint-and-restart cost,
# as the public simulator charges none for preemption or re-placement. On a smaller window of the
# same generator, rate and seed (a 1,500-job trace, jobs 500-999: the public configuration's runs take
# about 10-30 min each on the shared 2-core machine, these under a minute).
CANDIDATE_JOBS, CANDIDATE_WINDOW = 1500, (500, 1000)
CANDIDATES = (
    ("GPU-proportional", "proportional:srtf", None),
    ("every pass, running jobs keep GPUs (Halyard before)", "synergy-tune-every-pass:srtf", None),
    ("round-based, running jobs keep GPUs", "synergy-tune-keep-gpus:srtf", None),
    ("round-based, re-placed each round (§3; default)", "synergy-tune:srtf", None),
    ("default, no restart cost", "synergy-tune:srtf", "free"),
    ("default, SRTF key / speed-up", "synergy-tune:srtf+srtf-by-speedup", None),
    ("default, no restart cost and SRTF key / speed-up", "synergy-tune:srtf+srtf-by-speedup", "free"),
    ("LAS: GPU-proportional", "proportional:las", None),
    ("LAS: every pass, running jobs keep GPUs (before)", "synergy-tune-every-pass:las", None),
    ("LAS: round-based, re-placed (default)", "synergy-tune:las", None),
    ("LAS: default, no restart cost", "synergy-tune:las", "free"),
)
# The every-pass variants are the code that produced this page at bd5d843 (docs/synergy-reproduction.json
# there; the same schedules: synergy-tune-every-pass:* reproduces the old synergy-tune:* pins exactly), so
# their figures on the public configuration are quoted beside the public part, not rerun: (avg JCT h, p99 h).
EVERY_PASS = {"proportional-every-pass:srtf": (32.85, 1141.0), "synergy-tune-every-pass:srtf": (24.17, 208.0),
              "synergy-tune-every-pass:las": (66.26, 1889.0), "proportional-every-pass:fifo": (97.88, 221.0),
              "synergy-tune-every-pass:fifo": (40.65, 158.0)}
# The catalog overlay: the catalog allows no zero, so 1e-9 s and a 1e-9 state factor (restart and
# migration then cost about 1e-9 s instead of about 21 s).
FREE_RESTART = """schema_version = 2
[constants]
restart_fixed_s = { value = 1e-9, source = "no preemption cost, as Synergy's public simulator" }
checkpoint_state_factor = { value = 1e-9, source = "no checkpoint to write or read" }
"""

# 4. Table 6a (§5.3.1): "a cluster of 512 GPUs across 64 servers using a subrange of the publicly
# available Philly trace", "a subrange of the trace containing 8000 jobs", split (20,70,10), 1,000
# monitored jobs. The paper names neither the subrange nor the window: ours are Philly jobs
# 16000-23999 in submit order of the Pollux artifact's processed file (GPU demand about 1.04x of 512
# GPUs at the trace durations) and jobs 3500-4499 of them.
PHILLY_FILE = ROOT.parent / "shared" / "traces" / "philly_pollux_jobs_full.csv"
PHILLY_SLICE, PHILLY_WINDOW, PHILLY_CLUSTER = (16000, 24000), (3500, 4500), "synergy-512"
PHILLY_ORDERINGS = ("srtf", "las", "fifo")
PAPER_TABLE_6A = {"srtf": (30.0, 26.0), "las": (32.0, 28.0), "fifo": (71.0, 62.0)}  # (GPU-prop., Synergy) h

# 3. Load sweep. With these durations a single-GPU job asks 16.8 GPU-hours on average, so 128 GPUs
# saturate at about 7.6 jobs/h at the proportional share; TUNE's speed-ups lower the load by about 14 %.
SWEEP_LOADS = (6.0, 7.5)  # the public configuration above is the 9 jobs/h point
SWEEP_POLICIES = ("proportional:srtf", "synergy-tune:srtf", "proportional:fifo", "synergy-tune:fifo")
SWEEP_JOBS, SWEEP_WINDOW, SWEEP_SEED = 6000, (1000, 2000), 0


PARTS = ("public", "candidates", "sweep", "philly")


def policy_of(name: str) -> str:
    """The preset run: SRTF and LAS with the public simulator's starvation guard."""
    return name + GUARD if name.partition("+")[0].endswith((":srtf", ":las")) else name


def tasks(parts: tuple[str, ...]) -> list[tuple]:
    """(experiment, policy, load, jobs, window, seed, catalog, label) of every generated-trace run."""
    out = []
    if "public" in parts:
        out += [("public", p, PUBLIC_RATE, PUBLIC_JOBS, PUBLIC_WINDOW, PUBLIC_SEED, None, p) for p in PUBLIC_POLICIES]
    if "candidates" in parts:
        out += [("candidates", p, PUBLIC_RATE, CANDIDATE_JOBS, CANDIDATE_WINDOW, PUBLIC_SEED, c, label)
                for label, p, c in CANDIDATES]
    if "sweep" in parts:
        out += [("load", p, load, SWEEP_JOBS, SWEEP_WINDOW, SWEEP_SEED, None, p)
                for load in SWEEP_LOADS for p in SWEEP_POLICIES]
    return out


def specs(work: list[tuple], folder: Path) -> list[RunSpec]:
    """One run per task; each distinct generated trace is written once as canonical CSV."""
    folder.mkdir(parents=True, exist_ok=True)
    free = folder / "free-restart.toml"
    free.write_text(FREE_RESTART, encoding="utf-8")
    out = []
    for experiment, policy, load, jobs, window, seed, catalog, label in work:
        stem = f"synergy-single-{load:g}jph-{'-'.join(map(str, SPLIT))}-{jobs}-s{seed}"
        path = folder / f"{stem}.csv"
        if not path.exists():
            write_trace(generate_synergy_trace(jobs, rate_per_hour=load, split=SPLIT, seed=seed), path)
        run = policy_of(policy)
        name = f"{experiment}-{stem}-{run.replace(':', '_').replace('+', '_')}" + (f"-{catalog}" if catalog else "")
        out.append(RunSpec(name=name, trace=str(path), policy=run, cluster=CLUSTER, seed=seed, measure=window,
                           until_measured=True, catalog=str(free) if catalog == "free" else None,
                           tags=(("experiment", experiment), ("load", load), ("mechanism_ordering", policy),
                                 ("jobs", jobs), ("label", label), ("catalog", catalog))))
    return out


def philly_specs(philly: Path, folder: Path) -> list[RunSpec]:
    """Table 6a: proportional and TUNE under SRTF, LAS and FIFO on the Philly subrange (canonical CSV,
    submit times from the subrange's first job)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"philly-{PHILLY_SLICE[0]}-{PHILLY_SLICE[1] - 1}-{'-'.join(map(str, SPLIT))}.csv"
    if not path.exists():
        jobs = read_philly(philly, split=SPLIT).jobs[slice(*PHILLY_SLICE)]
        first = jobs[0].submit_time
        write_trace([dataclasses.replace(j, submit_time=j.submit_time - first) for j in jobs], path)
    out = []
    for o in PHILLY_ORDERINGS:
        for mech in ("proportional", "synergy-tune"):
            policy = policy_of(f"{mech}:{o}")
            out.append(RunSpec(name=f"philly-{policy.replace(':', '_').replace('+', '_')}", trace=str(path),
                               policy=policy, cluster=PHILLY_CLUSTER, measure=PHILLY_WINDOW, until_measured=True,
                               tags=(("experiment", "philly"), ("load", 0.0), ("mechanism_ordering", f"{mech}:{o}"),
                                     ("jobs", PHILLY_SLICE[1] - PHILLY_SLICE[0]), ("label", f"{mech}:{o}"),
                                     ("catalog", None))))
    return out


def row(result: RunResult) -> dict:
    """The reproduction's record of a run (its labels and the figures the tables use)."""
    return record(result.spec, result.summary)


def record(spec: RunSpec, s: dict) -> dict:
    return dict(spec.tags) | {"policy": spec.policy, "avg_jct_h": s["avg_jct_s"] / 3600.0,
                              "p50_jct_h": s["p50_jct_s"] / 3600.0, "p99_jct_h": s["p99_jct_s"] / 3600.0,
                              "completed": s["completed"], "wall_s": s["wall_s"]}


def reused(work: list[RunSpec], runs_dir: Path) -> dict[str, dict]:
    """The summaries of runs an earlier invocation finished (``--reuse``), by run name."""
    found = {}
    for spec in work:
        path = runs_dir / spec.name / SUMMARY_FILE
        if path.is_file():
            found[spec.name] = json.loads(path.read_text(encoding="utf-8"))
    return found


def trace_specs(trace: Path) -> list[RunSpec]:
    """Proportional and TUNE under each ordering on a given trace, over its middle half."""
    jobs = len(read_trace(trace).jobs)
    return [RunSpec(name=f"{mech}_{o}", trace=str(trace), policy=f"{mech}:{o}", cluster=CLUSTER,
                    measure=(jobs // 4, 3 * jobs // 4), tags=(("experiment", "trace"), ("jobs", jobs)))
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


def get(rows: list[dict], experiment: str, policy: str, load: float) -> dict:
    for r in rows:
        if r["experiment"] == experiment and r["mechanism_ordering"] == policy and r["load"] == load:
            return r
    raise KeyError((experiment, policy, load))


def table(rows: list[dict]) -> str:
    """The page's tables, one section per part that ran."""
    done = {r["experiment"] for r in rows}
    lines = ["<!-- generated by benchmarks/reproduce_synergy.py; do not edit -->", ""]
    if "public" in done:
        lines += public_table(rows)
    if "candidates" in done:
        lines += candidates_table(rows)
    if "load" in done:
        lines += sweep_table(rows)
    if "philly" in done:
        lines += philly_table(rows)
    return "\n".join(lines) + "\n"


def find(rows: list[dict], experiment: str, policy: str, load: float) -> dict | None:
    try:
        return get(rows, experiment, policy, load)
    except KeyError:
        return None


def public_table(rows: list[dict]) -> list[str]:
    """Ours (round-based) beside the public simulator's and the paper's figures, and the every-pass
    figures of bd5d843 (quoted); a policy whose run is missing (``--only-reuse``) says so."""
    lines = [f"### The public simulator's configuration: single-GPU, {PUBLIC_RATE:g} jobs/h, split {SPLIT}, "
             f"seed {PUBLIC_SEED}, jobs {PUBLIC_WINDOW[0]}-{PUBLIC_WINDOW[1] - 1}", "",
             "| policy | Halyard avg JCT (h) | p99 (h) | every pass, bd5d843 (h) | public simulator avg (h) "
             "| Halyard / public | paper Fig. 9 |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for p in PUBLIC_POLICIES:
        r = find(rows, "public", p, PUBLIC_RATE)
        mech, _, o = p.partition(":")
        before = EVERY_PASS.get(f"{mech}-every-pass:{o}")
        pub = PUBLIC_FIGURES.get(p)
        fig9 = f"{PAPER_FIG9[p]:g} h" if p in PAPER_FIG9 else ""
        theirs = "" if pub is None else f"{pub:.2f}" + (f" (p99 {PUBLIC_P99[p]:,.0f})" if p in PUBLIC_P99 else "")
        old = "" if before is None else f"{before[0]:.2f} (p99 {before[1]:,.0f})"
        if r is None:
            lines.append(f"| {policy_of(p)} | not rerun | | {old} | {theirs} | | {fig9} |")
            continue
        ratio = "" if pub is None else f"{r['avg_jct_h'] / pub:.2f}"
        lines.append(f"| {r['policy']} | {r['avg_jct_h']:.2f} | {r['p99_jct_h']:,.0f} | {old} | {theirs} | {ratio} "
                     f"| {fig9} |")
    for o in ("srtf", "fifo"):
        pair = [find(rows, "public", f"{m}:{o}", PUBLIC_RATE) for m in ("proportional", "synergy-tune")]
        if None in pair:
            continue
        pr, tu = (x["avg_jct_h"] for x in pair)
        public = ""
        if f"proportional:{o}" in PUBLIC_FIGURES and f"synergy-tune:{o}" in PUBLIC_FIGURES:
            gain = PUBLIC_FIGURES[f"proportional:{o}"] / PUBLIC_FIGURES[f"synergy-tune:{o}"]
            public = f"; public simulator {gain:.2f}x"
        if o == "fifo":
            public = f"; paper Fig. 9 {PAPER_FIG9['proportional:fifo'] / PAPER_FIG9['synergy-tune:fifo']:.2f}x"
        lines.append(f"\n{o.upper()}: TUNE speeds average JCT up {pr / tu:.2f}x here{public}.")
    return [*lines, ""]


def candidates_table(rows: list[dict]) -> list[str]:
    """Each candidate's average JCT, and its ratio to the default TUNE of its ordering in the same part."""
    lines = [f"### TUNE's differences from the public simulator, one at a time: single-GPU, {PUBLIC_RATE:g} jobs/h, "
             f"split {SPLIT}, seed {PUBLIC_SEED}, {CANDIDATE_JOBS:,}-job trace, jobs {CANDIDATE_WINDOW[0]}-"
             f"{CANDIDATE_WINDOW[1] - 1} (SRTF/LAS with {GUARD})", "",
             "| variant | policy | restart cost | avg JCT (h) | p99 (h) | / default TUNE |",
             "| --- | --- | --- | --- | --- | --- |"]
    found = {x["label"]: x for x in rows if x["experiment"] == "candidates"}
    for label, _, catalog in CANDIDATES:
        r = found.get(label)
        if r is None:
            lines.append(f"| {label} | not run | | | | |")
            continue
        ordering = r["mechanism_ordering"].partition("+")[0].rpartition(":")[2]
        base = found.get("round-based, re-placed each round (§3; default)" if ordering == "srtf"
                         else "LAS: round-based, re-placed (default)")
        ratio = "" if base is None else f"{r['avg_jct_h'] / base['avg_jct_h']:.3f}"
        cost = "none (1e-9 s)" if catalog == "free" else "model (about 21 s)"
        lines.append(f"| {label} | {r['policy']} | {cost} | {r['avg_jct_h']:.2f} | {r['p99_jct_h']:.0f} | {ratio} |")
    return [*lines, ""]


def sweep_table(rows: list[dict]) -> list[str]:
    lines = [f"### Load sweep, single-GPU, split {SPLIT}: average JCT (h), proportional -> TUNE (speed-up), "
             f"jobs {SWEEP_WINDOW[0]}-{SWEEP_WINDOW[1] - 1}", "",
             "| ordering | " + " | ".join(f"{x:g} jobs/h" for x in SWEEP_LOADS) + " |",
             "| --- |" + " --- |" * len(SWEEP_LOADS)]
    for o in ("srtf", "fifo"):
        cells = []
        for load in SWEEP_LOADS:
            p = get(rows, "load", f"proportional:{o}", load)["avg_jct_h"]
            t = get(rows, "load", f"synergy-tune:{o}", load)["avg_jct_h"]
            cells.append(f"{p:.1f} -> {t:.1f} ({p / t:.2f}x)")
        lines.append(f"| {o.upper()}{GUARD if o == 'srtf' else ''} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def philly_table(rows: list[dict]) -> list[str]:
    lines = [f"### Table 6a: Philly jobs {PHILLY_SLICE[0]}-{PHILLY_SLICE[1] - 1} on {PHILLY_CLUSTER}, split {SPLIT}, "
             f"jobs {PHILLY_WINDOW[0]}-{PHILLY_WINDOW[1] - 1} of them: average JCT (h)", "",
             "| policy | GPU-prop. (ours) | Synergy-TUNE (ours) | ours: speed-up | paper: GPU-prop. | paper: Synergy "
             "| paper: speed-up |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for o in PHILLY_ORDERINGS:
        p = get(rows, "philly", f"proportional:{o}", 0.0)["avg_jct_h"]
        t = get(rows, "philly", f"synergy-tune:{o}", 0.0)["avg_jct_h"]
        pp, pt = PAPER_TABLE_6A[o]
        lines.append(f"| {o.upper()} | {p:.2f} | {t:.2f} | {p / t:.2f}x | {pp:g} | {pt:g} | {pp / pt:.2f}x |")
    return [*lines, ""]


def plot(rows: list[dict], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    for o in ("srtf", "fifo"):
        for mech, style in (("proportional", "--"), ("synergy-tune", "-")):
            ys = [get(rows, "load", f"{mech}:{o}", x)["avg_jct_h"] for x in SWEEP_LOADS]
            ax.plot(SWEEP_LOADS, ys, style, marker="o", label=f"{o.upper()} {'TUNE' if 'tune' in mech else 'prop.'}")
    ax.set_title(f"synergy-128, single-GPU, split {SPLIT}")
    ax.set_xlabel("load (jobs / hour)")
    ax.set_ylabel("average JCT (h)")
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=None,
                    help="compare proportional and TUNE under each ordering on this trace instead")
    ap.add_argument("--parts", default=",".join(PARTS),
                    help=f"comma-separated parts to run (default: all of {','.join(PARTS)})")
    ap.add_argument("--quick", action="store_true",
                    help="the public part only, written under the work folder (not docs/)")
    ap.add_argument("--philly", type=Path, default=PHILLY_FILE, help="the processed Philly file (Table 6a)")
    ap.add_argument("--reuse", action="store_true",
                    help="take the runs an earlier invocation finished from the work folder instead of rerunning")
    ap.add_argument("--only-reuse", action="store_true",
                    help="run nothing: write the page from the runs already in the work folder (missing: 'not rerun')")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--ray", default=None, metavar="ADDRESS", help="run on this Ray cluster (halyard compare --ray)")
    ap.add_argument("--out", type=Path, default=None, help="where the page's files go (default: docs/)")
    ap.add_argument("--work", type=Path, default=ROOT / "out" / "synergy-reproduction",
                    help="generated traces and each run's files (default: out/synergy-reproduction)")
    args = ap.parse_args()
    parts = ("public",) if args.quick else tuple(p.strip() for p in args.parts.split(",") if p.strip())
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        ap.error(f"--parts: unknown part(s) {', '.join(unknown)} (known: {', '.join(PARTS)})")
    if "philly" in parts and not args.trace and not args.philly.is_file():
        ap.error(f"--philly: no such file {args.philly} (Table 6a needs the processed Philly trace)")
    out = args.out or (args.work / "quick" if args.quick else ROOT / "docs")
    started = time.perf_counter()
    if args.trace:
        work = trace_specs(args.trace)
    else:
        work = specs(tasks(parts), args.work / "traces")
        if "philly" in parts:
            work += philly_specs(args.philly, args.work / "traces")
    done = reused(work, args.work / "runs") if (args.reuse or args.only_reuse) and not args.trace else {}
    todo = [] if args.only_reuse else [w for w in work if w.name not in done]
    runs = run_and_save(todo, args.work / "runs", workers=args.workers, ray_address=args.ray,
                        label="synergy reproduction") if todo else []
    rows = [record(w, done[w.name]) for w in work if w.name in done] + [row(r) for r in runs]
    out.mkdir(parents=True, exist_ok=True)
    if args.trace:
        (out / "synergy-trace.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
        text = trace_table(rows, args.trace)
        (out / "synergy-trace-table.md").write_text(text, encoding="utf-8")
        write_sweep_report(runs, out / "synergy-trace.html", runs_dir=args.work / "runs",
                           baseline="proportional:fifo", command=shlex.join(["python", *sys.argv]),
                           title=f"Synergy: proportional vs TUNE on {args.trace.name}",
                           cluster_gpus=load_cluster(CLUSTER).total_gpus)
    else:
        (out / "synergy-reproduction.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
        text = table(rows)
        (out / "synergy-reproduction-table.md").write_text(text, encoding="utf-8")
        if "sweep" in parts:
            plot(rows, out / "img" / "synergy-reproduction.png")
    print(text)
    print(f"{len(rows)} runs in {time.perf_counter() - started:.0f} s; per-run files in {args.work / 'runs'}")


if __name__ == "__main__":
    main()
