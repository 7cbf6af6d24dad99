"""Why Dally's Table 2 (auto-tuner vs manual timers, batch, 8 racks) comes out as it does.

    .venv/bin/python benchmarks/dally_timers_probe.py --seeds 1 2 3 \
        --policies dally-literal dally-manual-literal dally-literal+manual-start dally-literal+drop-short-waits \
        "dally-literal+lease:lease_rounds=12"

Replays the reproduction's drawn workload (benchmarks/reproduce_dally.py: same trace, Table 1
profile, no contention, 300 s rounds) through the simulator and prints, per policy and seed,
the average and median JCT, the makespan, the preemptions, the placements (starts and
migrations) at each consolidation level, those of the first day, and the auto-tuner's
(T_Mc, T_Rk) for a few GPU demands at eight instants of the run. ``NAME:attr=value`` sets a
Dally attribute (or its auto-tuner's) that has no registered name, e.g. ``lease_rounds=12``.
The last line per seed is Dally-manual's average JCT over each policy's (Table 2: 1.11).
"""

from __future__ import annotations

import argparse
import statistics
from collections import Counter

import numpy as np
from reproduce_dally import BATCH_JOBS, CATALOG, POISSON_JOBS, POISSON_PER_DAY, ROUND_S, dally_trace

from halyard.datamodel import load_cluster
from halyard.emulator import PerformanceModel, load_model_catalog
from halyard.policies import make_policy
from halyard.policies.dally import Dally
from halyard.policies.dally_pass import allocation_level
from halyard.policies.dally_timers import AutoTuner
from halyard.policies.plan import Migrate, Start
from halyard.scheduling import Simulator

DAY_S = 86400.0
DEMANDS = (1, 4, 8, 16)  # GPU demands whose timers are printed
SAMPLES = 8  # instants of the run at which they are printed


def build(spec: str) -> Dally:
    """A registered Dally name, then ``:attr=value`` settings on the policy or its auto-tuner."""
    name, *settings = spec.split(":")
    policy = make_policy(name)
    if not isinstance(policy, Dally):
        raise SystemExit(f"{name!r} is not a Dally policy")
    for setting in settings:
        attr, _, text = setting.partition("=")
        target = policy.timers if hasattr(policy.timers, attr) else policy
        if not hasattr(target, attr):
            raise SystemExit(f"{spec!r}: neither Dally nor its timers have an attribute {attr!r}")
        value = float(text)
        if attr == "lease_rounds":
            policy.lease = True
        setattr(target, attr, value)
    return policy


def probe(spec: str, racks: int, seed: int, arrival: str) -> float:
    policy = build(spec)
    placed: Counter[tuple[str, str]] = Counter()
    first_day: Counter[tuple[str, str]] = Counter()
    timers: list[tuple[float, int, float, float]] = []
    schedule = policy.schedule

    def observed(view, state):  # the pass as Dally makes it, with what it placed and its timers
        plan = schedule(view, state)
        for action in plan.actions:
            if isinstance(action, Start | Migrate):
                key = (type(action).__name__.lower(), allocation_level(action.allocation, view.cluster).name.lower())
                placed[key] += 1
                if view.now < DAY_S:
                    first_day[key] += 1
        if isinstance(policy.timers, AutoTuner):
            timers.extend((view.now, d, *policy.timers.timers(d, view.round_s, view.now)) for d in DEMANDS)
        return plan

    policy.schedule = observed
    jobs = (dally_trace(BATCH_JOBS, seed=seed, poisson_per_day=None) if arrival == "batch"
            else dally_trace(POISSON_JOBS, seed=seed + 1, poisson_per_day=POISSON_PER_DAY))
    model = PerformanceModel(load_model_catalog(CATALOG), contention="off")
    sim = Simulator(load_cluster(f"dally-{racks}rack"), policy, model, round_s=ROUND_S)
    sim.run(jobs)
    records = list(sim.core.records.values())
    jct = [r.end_time - r.spec.submit_time for r in records]
    avg = statistics.mean(jct)
    print(f"{spec} (seed {seed}): avg JCT {avg / DAY_S:.2f} d, median {statistics.median(jct) / DAY_S:.2f} d, "
          f"makespan {max(r.end_time for r in records) / DAY_S:.1f} d, "
          f"preemptions {sum(r.preemptions for r in records)}")
    print("   placed:", ", ".join(f"{k[0]} {k[1]} {v}" for k, v in sorted(placed.items())))
    print("   first day:", ", ".join(f"{k[0]} {k[1]} {v}" for k, v in sorted(first_day.items())))
    for demand in DEMANDS if timers else ():
        rows = [t for t in timers if t[1] == demand]
        picks = [rows[int(i)] for i in np.linspace(0, len(rows) - 1, SAMPLES)]
        print(f"   {demand} GPUs, hour: T_Mc/T_Rk h:",
              " ".join(f"{t / 3600:.0f}: {mc / 3600:.1f}/{rk / 3600:.1f}" for t, _, mc, rk in picks))
    return avg


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--policies", nargs="+", default=["dally-literal", "dally-manual-literal"])
    p.add_argument("--seeds", type=int, nargs="+", default=[1])
    p.add_argument("--racks", type=int, default=8)
    p.add_argument("--arrival", choices=("batch", "poisson"), default="batch")
    args = p.parse_args()
    for seed in args.seeds:
        avg = {spec: probe(spec, args.racks, seed, args.arrival) for spec in args.policies}
        manual = avg.get("dally-manual-literal", avg.get("dally-manual"))
        if manual is not None:
            print(f"seed {seed}: Dally-manual / policy, avg JCT:",
                  ", ".join(f"{spec} {manual / a:.2f}" for spec, a in avg.items()
                            if spec not in ("dally-manual", "dally-manual-literal")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
