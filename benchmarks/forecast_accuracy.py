"""How far off are start forecasts? A loaded Philly slice, forecast every N cluster minutes (docs/forecast.md).

Replays ``--jobs`` jobs of the processed Philly trace from position ``--skip``, submit times divided by
``--compress``, on the ``philly`` cluster in the simulator. Every ``--every-min`` cluster minutes,
between two passes, it forks the run and forecasts every waiting job's start exactly as the
control plane does (controlplane/forecast.py: the same core, policy state and forward loop),
with no arrivals and, with ``--samples K``, as the median of K sampled-arrival runs. Once the run
has ended it compares each forecast with the job's actual first start (jobs that had not started
yet at the forecast) and prints the median and p90 absolute error, in hours, over every forecast
and over each job's first forecast after its submission.

This measures in the simulator, not through ``replay``'s control plane and emulated agents: the
two make the same schedule (tests/test_same_policy.py, DESIGN.md's invariant), and the forecast runs
the same core either way. Regenerate the table in docs/forecast.md with

    nice -n 10 .venv/bin/python benchmarks/forecast_accuracy.py --skip 10000 --jobs 5000 --compress 8 --every-min 120 \\
        --policies fifo,tiresias,dally,synergy-tune:fifo,crius --samples 4
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import numpy as np

from halyard.controlplane import Simulator
from halyard.controlplane.forecast import (
    DEFAULT_ARRIVAL_WINDOW_S,
    in_fork,
    recent_specs,
    run_forward,
    sampled_arrivals,
)
from halyard.datamodel import load_cluster
from halyard.policies import make_policy
from halyard.traces import read_trace

PHILLY_FULL = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "philly_pollux_jobs_full.csv"
HOUR = 3600.0


def measure(policy_name: str, jobs: list, every_s: float, samples: int) -> dict[str, list[float]]:
    """Absolute start errors, cluster seconds: ``all``/``first`` with no arrivals, ``all_sampled``/``first_sampled``;
    ``lead``: how long after each forecast the job really started."""
    sim = Simulator(load_cluster("philly"), make_policy(policy_name))
    core, pacer = sim.core, sim.pool.pacer
    made: list[tuple[str, float, float | None, float | None]] = []  # job, made at, no-arrival start, sampled start
    next_at = [0.0]

    def checkpoint(_finished: int, _known: int, now: float) -> None:
        if now < next_at[0] or not core.pending:
            return
        next_at[0] = now + every_s
        waiting = [r.job_id for r in core.pending if r.first_start is None]
        if not waiting:
            return
        base = in_fork(lambda: run_forward(core, pacer, now).starts)
        sampled: dict[str, list[float]] = {}
        if samples:
            mix, rate = recent_specs(core, now, DEFAULT_ARRIVAL_WINDOW_S)
            for k in range(samples):
                starts = in_fork(lambda k=k: run_forward(
                    core, pacer, now, arrivals=sampled_arrivals(mix, rate, now, k)).starts)
                for job_id, t in starts.items():
                    sampled.setdefault(job_id, []).append(t)
        for job_id in waiting:
            s = sampled.get(job_id)
            made.append((job_id, now, base.get(job_id), float(np.median(s)) if s else None))

    sim.run(jobs, on_progress=checkpoint)
    out: dict[str, list[float]] = {"all": [], "first": [], "all_sampled": [], "first_sampled": [], "lead": []}
    seen: set[str] = set()
    for job_id, at, start, sampled_start in made:
        actual = core.records[job_id].first_start
        if actual is None:
            continue
        out["lead"].append(actual - at)  # how far ahead the forecast looked
        first = job_id not in seen
        seen.add(job_id)
        for key, value in (("all", start), ("all_sampled", sampled_start)):
            if value is not None:
                out[key].append(abs(value - actual))
                if first:
                    out[key.replace("all", "first")].append(abs(value - actual))
    return out


def stats(xs: list[float]) -> str:
    if not xs:
        return f"{'-':>7} {'-':>7} {0:>6}"
    return f"{np.median(xs) / HOUR:>7.2f} {np.percentile(xs, 90) / HOUR:>7.2f} {len(xs):>6}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=PHILLY_FULL)
    ap.add_argument("--skip", type=int, default=0,
                    help="start the slice at this trace position")
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--compress", type=float, default=8.0)
    ap.add_argument("--every-min", type=float, default=120.0)
    ap.add_argument("--samples", type=int, default=0)
    ap.add_argument("--policies", default="fifo,tiresias,dally,synergy-tune:fifo,crius")
    args = ap.parse_args()
    trace = read_trace(args.trace).jobs[args.skip:args.skip + args.jobs]
    jobs = [dataclasses.replace(j, submit_time=j.submit_time / args.compress) for j in trace]
    print(f"{args.jobs} Philly jobs from #{args.skip} compressed {args.compress:g}x on philly, a forecast every "
          f"{args.every_min:g} min; absolute start error, hours")
    print(f"{'policy':<20} {'arrivals':<12} {'forecasts':<10} {'median':>7} {'p90':>7} {'n':>6}   "
          "(lead: how long after the forecast the job started)")
    for name in args.policies.split(","):
        errors = measure(name, jobs, args.every_min * 60.0, args.samples)
        for arrivals, suffix in (("none", ""), (f"sampled x{args.samples}", "_sampled")):
            if suffix and not args.samples:
                continue
            for which in ("first", "all"):
                print(f"{name:<20} {arrivals:<12} {which:<10} {stats(errors[which + suffix])}", flush=True)
        print(f"{name:<20} {'lead':<12} {'all':<10} {stats(errors['lead'])}", flush=True)


if __name__ == "__main__":
    main()
