"""Halyard's CPU and work on the public Synergy simulator's headline configuration, with the event log's digest.

Issue 38 compares Halyard's CPU with msr-fiddle/synergy's simulator on the same trace (5,000 jobs of
``generate_synergy_trace`` at 9 jobs/h, the (20, 70, 10) split, multi-GPU demands, seed 42; 128 V100
in 16 Synergy servers; the run ends when jobs 4000-4999 have ended, as the public ``runner.py`` does).
The machine is shared, so wall time is noise: this prints CPU seconds (``time.process_time``) and the
counts that explain them (``benchmarks/opcounts.py``: passes run and skipped as quiet, jobs keyed,
link settles and states solved; the round placements and the TUNE re-packs run; with ``--counts`` also
the TUNE walk's own work), plus the SHA-256 of the whole event log, so that a speed-up can show it
changed no decision. ``--before`` also runs each policy with issue 38's skips off, alternating with the
default run, so the two compare within one load of the machine (each such run in a child process of its
own: run in this one, a 16-s run's heap made the next default run ~10 % slower, 4.4 against 3.9 s for
TUNE): TUNE re-packs every round (no skip of unchanged re-packs, ``Tune.place_all``, so no promise of an
unchanged next pass, ``Plan.settles``), the core runs every round pass (no skip of a round that repeats an
empty one, ``SchedulingCore.schedule``) and writes every pass's wait reasons at once
(``SchedulingCore._note_reasons``), every pass tells every reason (``StagedPolicy.reason_changes``), the
FIFO walk looks at every waiting job (``StagedPolicy.skip_tail``) and TUNE re-packs on the Packer, not on
lists (``Tune.lean``). What cannot be switched off (the packer's and the walk's leaner code, each running
job keyed once per ranking)
is measured against the code before it in alternating runs of two checkouts (docs/reproductions/simulator-cost.md).

    .venv/bin/python benchmarks/bench_synergy_public_config.py [--policy synergy-tune:fifo] [--repeat 1] [--counts]
        [--before]

With ``--public-simulator`` (msr-fiddle/synergy's ``simulator/`` folder in a checkout) and ``--public-python``
(its own Python environment; see ``benchmarks/synergy_public_perjob.py``'s docstring) the same invocation also
runs the public simulator on the same trace, once per policy right after that policy's Halyard runs, through
``synergy_public_perjob.py public`` as a child process: its CPU seconds (``time.process_time`` around its
``Runner`` and ``run_simulation``, as Halyard's around ``Simulator.run``; and the whole child process's) and its
mean JCT over jobs 4000-4999 go beside Halyard's in the JSON. Without them the JSON keeps the peer's figures it
holds.

    .venv/bin/python benchmarks/bench_synergy_public_config.py --policy synergy-tune:fifo \
        --policy proportional:srtf+starvation-guard --repeat 2 --before \
        --public-simulator /work/ext/synergy/simulator --public-python /work/ext/synergy-venv/bin/python \
        --json docs/reproductions/simulator-cost.json
"""

from __future__ import annotations

import argparse
import concurrent.futures
import functools
import gc
import hashlib
import json
import math
import multiprocessing
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from halyard.datamodel import load_cluster
from halyard.policies import make_policy, synergy_lean
from halyard.policies.staged import StagedPolicy
from halyard.policies.synergy import SynergyMechanism, Tune
from halyard.scheduling import Simulator
from halyard.scheduling.timing import performance_model_for
from halyard.traces.canonical import write_trace
from halyard.traces.generator import generate_synergy_trace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from opcounts import add_core, counting, line  # benchmarks/ is not a package: found on sys.path

# The public configuration (issue 38; docs/reproductions/synergy-public-comparison.md): runner.py's series_id_filter.
JOBS, RATE_PER_HOUR, SPLIT, SEED = 5000, 9.0, (20, 70, 10), 42
MEASURE = (4000, 5000)
CLUSTER = "synergy-128"


# Each configuration: the public simulator's scheduler and mode for it (synergy_public_perjob.py public), its CPU
# seconds as issue 38 quoted them (one run each, not in the same run as Halyard's; replaced in the JSON by
# --public-simulator's measurement), Halyard's CPU seconds then, and what is known of the two simulators'
# agreement on it (docs/reproductions/synergy-public-comparison.md).
PUBLIC_ROWS = (
    {"configuration": "FIFO + TUNE, 5,000 jobs at 9/h on synergy-128, jobs 4000-4999", "policy": "synergy-tune:fifo",
     "public_args": ["--scheduler", "FIFO", "--mode", "tune"],
     "public_cpu_s": 190.0, "halyard_cpu_s_then": "7.3-9.0",
     "agreement": "not joined per job for FIFO; SRTF + TUNE on this generator: mean JCT 1.003x, 470 of 500 jobs "
                  "within 0.5 h (synergy-public-comparison.md)"},
    {"configuration": "SRTF + GPU-proportional, same trace", "policy": "proportional:srtf+starvation-guard",
     "public_args": ["--scheduler", "SRTF", "--mode", "fair"],
     "public_cpu_s": 198.0, "halyard_cpu_s_then": "3.6-3.8",
     "agreement": "1,500-job trace of this generator: mean JCT 0.997x, 497 of 500 jobs within 0.5 h "
                  "(synergy-public-comparison.md); not joined on this trace"},
)
PERJOB = Path(__file__).resolve().parent / "synergy_public_perjob.py"


def run_public(row: dict, trace: Path, simulator: Path, python: str, work: Path) -> dict[str, object]:
    """The public simulator on ``trace`` for ``row``'s configuration, as a child process
    (``synergy_public_perjob.py public``): its run's and its whole process's CPU seconds, wall seconds and mean JCT
    over the measured jobs (the child's own ``time.process_time``; the process's also from ``getrusage``)."""
    name = row["policy"].replace(":", "_").replace("+", "_")
    out, cpu_json = work / f"{name}.csv", work / f"{name}.json"
    command = [python, str(PERJOB), "public", "--simulator", str(simulator), "--trace", str(trace),
               *row["public_args"], "--measure", f"{MEASURE[0]}:{MEASURE[1]}", "--out", str(out),
               "--cpu-json", str(cpu_json)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    measured = json.loads(cpu_json.read_text(encoding="utf-8"))
    measured["child_cpu_s"] = round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2)
    return measured


def mean_jct_h(sim: Simulator) -> float:
    """Mean JCT (hours) of the measured jobs that completed (the public simulator's printed figure's jobs)."""
    lo, hi = MEASURE
    done = [r.end_time - r.spec.submit_time for r in sim.core.records.values()
            if r.end_time is not None and lo <= int(r.job_id.rsplit("-", 1)[-1]) < hi]
    return statistics.mean(done) / 3600 if done else math.nan


def event_digest(sim: Simulator) -> str:
    """The pin's digest (benchmarks/pin_schedules.py) over this run's whole event log."""
    h = hashlib.sha256()
    for e in sim.core.log:
        h.update(f"{e.seq}|{e.time:.6f}|{e.job_id}|{e.kind.value}|{e.state.value}|{e.detail}\n".encode())
    return h.hexdigest()


# The lean re-pack's steps (policies/synergy_lean.py), as imported: --counts wraps them for a run and
# run_once puts these back after it.
LEAN_STEPS = {name: getattr(synergy_lean, name) for name in ("_replace_running", "_pack_new", "_pack_running",
                                                             "_renewing")}


def instrument(policy: StagedPolicy) -> Counter[str]:
    """Count a staged policy's work by wrapping its stages' methods on this instance (the library keeps no
    counters): ``keyed`` jobs keyed by the ordering, ``ranked`` jobs in the rankings, ``placed_all`` batch
    placements (round passes) and ``runnable`` jobs handed to them, ``repacked`` of those that re-packed (TUNE:
the others were answered by the last re-pack, Tune.place_all), ``renewed`` running jobs the re-pack
    kept as they are (Tune._renewing), ``retuned`` jobs re-packed one by one (placed, re-placed or
    reshaped by the TUNE walk; on the Packer or on lists, Tune.lean: the same steps), ``tail`` waiting jobs
    past the point where a FIFO walk's GPU budget ran out and ``tail_looked`` those of them it looked at
    (StagedPolicy.skip_tail). The wrappers cost CPU of their own: time a run without ``--counts``."""
    counts: Counter[str] = Counter()
    ordering, placement = policy.ordering, policy.placement
    key, ranking = ordering.key, ordering.ranking

    def counted_key(view, state):
        inner = key(view, state)

        def keyed(job):
            counts["keyed"] += 1
            return inner(job)
        return keyed

    def counted_ranking(view, state, pending):
        r = ranking(view, state, pending)
        counts["ranked"] += len(r.jobs)
        return r

    ordering.key, ordering.ranking = counted_key, counted_ranking
    walk_tail = policy._walk_tail

    def counted_walk_tail(view, ranking, start, *a):
        looked = walk_tail(view, ranking, start, *a)
        counts["tail"] += int((ranking.held[start:] == 0).sum())  # waiting jobs past the budget's end
        counts["tail_looked"] += looked  # of those, the ones the walk looked at (StagedPolicy._walk_tail)
        return looked
    policy._walk_tail = counted_walk_tail
    if hasattr(placement, "place_all"):
        place_all = placement.place_all

        def counted_place_all(view, runnable, new, plan, free, state):
            counts["placed_all"] += 1
            counts["runnable"] += len(runnable)
            return place_all(view, runnable, new, plan, free, state)
        placement.place_all = counted_place_all
    count_repacks(placement, counts, "repacked")
    for name in ("_replace_running", "_pack_new", "_pack_running"):
        for owner, method in ((placement, getattr(placement, name, None)), (synergy_lean, LEAN_STEPS[name])):
            if method is not None:  # the lean re-pack's steps are module functions of the same names
                def counted(*a, _m=method, **k):
                    counts["retuned"] += 1
                    return _m(*a, **k)
                setattr(owner, name, counted)
    for owner, renewing in ((placement, getattr(placement, "_renewing", None)),
                            (synergy_lean, LEAN_STEPS["_renewing"])):
        if renewing is not None:
            def counted_renewing(*a, _m=renewing):
                kept, to_demand = _m(*a)
                counts["renewed"] += len(kept)
                return kept, to_demand
            owner._renewing = counted_renewing
    return counts


def skips(policy: object) -> bool:
    """Whether the policy's placement is TUNE's, which skips a re-pack handed what the last one was."""
    placement = getattr(policy, "placement", None)
    return isinstance(placement, Tune) and type(placement).pack is Tune.pack


def count_rounds(policy: object, work: Counter[str]) -> None:
    """Count a batch placement's round placements (``rounds``) and, for TUNE, the re-packs it ran
    (``retuned``; the others were answered by the last re-pack, ``Tune.place_all``): two calls a round."""
    placement = getattr(policy, "placement", None)
    place_all = getattr(placement, "place_all", None)
    if place_all is None:
        return

    def counted_place_all(*a, **k):
        work["rounds"] += 1
        return place_all(*a, **k)
    placement.place_all = counted_place_all
    count_repacks(placement, work, "retuned")


def count_repacks(placement: object, counts: Counter[str], key: str) -> None:
    """Count TUNE's re-packs run under ``key``: the Packer's (``repack``) or the one on lists (``repack_lean``,
    Tune.lean), whichever the placement has, wrapped on this instance."""
    for attr in ("repack", "repack_lean"):
        repack = getattr(placement, attr, None)
        if repack is not None:
            def counted_repack(*a, _m=repack, **k):
                counts[key] += 1
                return _m(*a, **k)
            setattr(placement, attr, counted_repack)


def count_told(core: object, work: Counter[str]) -> None:
    """Count the wait reasons the passes tell the core (``told``: a whole pass tells every waiting job's, a
    change set only those that changed, StagedPolicy.reason_changes); ``told/pass`` in the line."""
    note = core._note_reasons

    def noting(told, *args, **kwargs):
        work["told"] += len(told)
        return note(told, *args, **kwargs)
    core._note_reasons = noting


def run_once(policy_name: str, jobs: list, *, count: bool, skip: bool = True,
             changes: bool = True) -> dict[str, object]:
    """One run. ``skip=False`` (``--before``): issue 38's skips off (module docstring). ``changes=False``
    (``--whole-reasons``): every pass tells every reason (StagedPolicy.reason_changes off), nothing else."""
    policy = make_policy(policy_name)
    if isinstance(policy, StagedPolicy):
        policy.reason_changes = skip and changes
    if not skip and skips(policy):
        policy.placement.place_all = functools.partial(SynergyMechanism.place_all, policy.placement)
    if not skip and isinstance(policy, StagedPolicy):  # the round re-pack on the Packer, every waiting job walked
        policy.skip_tail = False
        if isinstance(policy.placement, Tune):
            policy.placement.lean = False
    if not skip and isinstance(policy, StagedPolicy):  # no round skipped as a repeat (Policy.quiet_until)
        policy.ordering.same_until = lambda view: -math.inf
    counts = instrument(policy) if count and isinstance(policy, StagedPolicy) else Counter()
    sim = Simulator(load_cluster(CLUSTER), policy, performance_model_for(policy, contention="fair"))
    sim.core.late_reasons = skip
    with counting(policy) as work:
        count_rounds(policy, work)
        count_told(sim.core, work)
        gc.collect()  # (the last run's objects, before the run freezes what exists: Simulator.run's freeze_gc)
        cpu0 = time.process_time()
        sim.run(jobs, until=MEASURE, freeze_gc=True)
        cpu = time.process_time() - cpu0
    for name, step in LEAN_STEPS.items():
        setattr(synergy_lean, name, step)
    return {"cpu_s": cpu, "mean_jct_h": mean_jct_h(sim), "passes": sim.core.passes, "skipped": sim.core.skipped_passes,
            "pass_s": sim.core.pass_seconds.total, "events": len(sim.core.log), "digest": event_digest(sim),
            "work": dict(add_core(work, sim.core)), "counts": dict(counts)}


def synergy_trace() -> list:
    """The public configuration's trace (the module docstring)."""
    return generate_synergy_trace(JOBS, rate_per_hour=RATE_PER_HOUR, split=SPLIT, multi_gpu=True, seed=SEED)


def run_apart(policy_name: str, *, count: bool) -> dict[str, object]:
    """:func:`run_once` with the skips off (``--before``) in a fresh child process, on the trace made there (a
    trace does not pickle), so that its heap (a run four times as long, its garbage frozen by
    ``Simulator.run``) does not slow the default runs that follow it here."""
    spawn = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=spawn) as child:
        return child.submit(_run_before, policy_name, count).result()


def _run_before(policy_name: str, count: bool) -> dict[str, object]:
    return run_once(policy_name, synergy_trace(), count=count, skip=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", action="append", help="a preset (repeatable; default synergy-tune:fifo)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per policy, alternating between policies")
    ap.add_argument("--counts", action="store_true", help="count the policy's work (costs CPU of its own)")
    ap.add_argument("--before", action="store_true", help="also run each policy with issue 38's skips off (every "
                    "round passed and re-packed, reasons written at once and told whole), alternating with the "
                    "default run")
    ap.add_argument("--whole-reasons", action="store_true", help="also run each policy with its wait reasons told "
                    "whole every pass (StagedPolicy.reason_changes off; printed apart, not written to --json), "
                    "alternating with the default run")
    ap.add_argument("--json", type=Path, help="write Halyard's figures and PUBLIC_ROWS into this JSON's 'synergy' "
                    "(docs/reproductions/simulator-cost.json; benchmarks/simulator_cost.py renders the page from it)")
    ap.add_argument("--write-trace", type=Path, help="also write the trace (a canonical CSV) for the public side")
    ap.add_argument("--public-simulator", type=Path, help="msr-fiddle/synergy's simulator/ folder: also run the public "
                    "simulator on the same trace, once per policy after its Halyard runs (module docstring)")
    ap.add_argument("--public-python", default=sys.executable, help="the public simulator's Python (its own "
                    "environment: synergy_public_perjob.py's docstring)")
    args = ap.parse_args()
    jobs = synergy_trace()
    work = Path(tempfile.mkdtemp(prefix="synergy-public-"))
    trace = args.write_trace or work / "trace.csv"
    if args.write_trace or args.public_simulator:
        write_trace(jobs, trace)
    public: dict[str, dict[str, object]] = {}
    names = args.policy or ([row["policy"] for row in PUBLIC_ROWS] if args.json else ["synergy-tune:fifo"])
    kept: dict[str, dict[str, object]] = {}
    before: dict[str, dict[str, object]] = {}
    runs = [(name, True) for name in names]
    if args.before:  # alternate: each TUNE policy with the skip, then without it, in every repeat
        runs = [(name, skip) for name in names for skip in (True, False)]
    variants = (True, False) if args.whole_reasons else (True,)
    for rep in range(args.repeat):
        for (name, skip), changes in ((run, changes) for run in runs for changes in variants):
            r = (run_once(name, jobs, count=args.counts, skip=skip, changes=changes) if skip
                 else run_apart(name, count=args.counts))
            if not changes:
                print(f"{name + ' (whole reasons)':24} cpu {r['cpu_s']:6.2f} s  in passes {r['pass_s']:6.2f} s  "
                      f"sha256 {r['digest'][:16]}  {line(r['work'])}  "
                      f"told/pass={r['work'].get('told', 0) / max(1, r['passes']):.1f}", flush=True)
                continue
            into = kept if skip else before
            if name not in into or r["cpu_s"] < into[name]["cpu_s"]:  # the least of the repeats: the least noise
                into[name] = {"cpu_s": round(r["cpu_s"], 2), "passes": r["passes"], "events": r["events"],
                              "work": r["work"], "sha256": r["digest"]}
            extra = " ".join(f"{k}={v}" for k, v in sorted(r["counts"].items()))
            label = name if skip else f"{name} (before)"
            print(f"{label:24} cpu {r['cpu_s']:6.2f} s  in passes {r['pass_s']:6.2f} s  events {r['events']:7d}  "
                  f"mean JCT {r['mean_jct_h']:.2f} h  sha256 {r['digest'][:16]}  {line(r['work'])}  "
                  f"told/pass={r['work'].get('told', 0) / max(1, r['passes']):.1f}  {extra}", flush=True)
            if skip:
                into[name]["mean_jct_h"] = round(r["mean_jct_h"], 4)
            row = next((row for row in PUBLIC_ROWS if row["policy"] == name), None)
            if args.public_simulator and row is not None and name not in public and rep == args.repeat - 1 and (
                    not args.before or not skip):  # the peer once per policy, after its last Halyard run
                public[name] = p = run_public(row, trace, args.public_simulator, args.public_python, work)
                print(f"{'public ' + name:24} cpu {p['run_cpu_s']:6.2f} s  (whole process {p['process_cpu_s']:.2f} s, "
                      f"child rusage {p['child_cpu_s']:.2f} s, wall {p['wall_s']:.0f} s)  mean JCT "
                      f"{p['mean_jct_h']:.2f} h over {p['measured_jobs']} jobs", flush=True)
    if args.json:
        stored = json.loads(args.json.read_text(encoding="utf-8")) if args.json.exists() else {}
        held = {row["policy"]: row for row in stored.get("synergy", {}).get("rows", [])}
        rows = []
        for row in PUBLIC_ROWS:
            if row["policy"] not in kept:
                continue
            row = {k: v for k, v in row.items() if k != "public_args"}
            if row["policy"] in public:  # measured in this run, beside Halyard's
                row["public"] = public[row["policy"]]
                row["public_cpu_s"] = public[row["policy"]]["run_cpu_s"]
            elif "public" in held.get(row["policy"], {}):  # measured in an earlier run: kept, with its command
                for key in ("public", "public_cpu_s", "public_command"):
                    if key in held[row["policy"]]:
                        row[key] = held[row["policy"]][key]
            rows.append(row)
        command = " ".join(["benchmarks/bench_synergy_public_config.py", *(f"--policy {n}" for n in names),
                            f"--repeat {args.repeat}", *(["--before"] if args.before else []),
                            *([f"--public-simulator {args.public_simulator} --public-python {args.public_python}"]
                              if args.public_simulator else []), "--json", str(args.json)])
        for row in rows:
            if row["policy"] in public:
                row["public_command"] = command
        stored["synergy"] = {"command": command, "rows": rows, "halyard": kept, "before": before}
        args.json.write_text(json.dumps(stored, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
