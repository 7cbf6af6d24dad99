"""Synergy-OPT (ILP + second LP, §4.1) against TUNE on a generated Synergy trace (synergy-128, SRTF).

Usage: ``python benchmarks/synergy_opt_vs_tune.py JOBS RATE single|multi`` (split (20,70,10), seed 42).
Prints each variant's mean JCT and wall time, OPT's counters (ILP unsolved, second LP failed, jobs
split) and the JCT ratios to TUNE measured in the same run. ``synergy-opt`` is round-based (both LPs
at each round over the runnable set), ``synergy-opt-every-pass`` the reading before it (running jobs
fixed in the second LP); ``ilp+tune-placement`` is the one before that (the ILP's vectors packed by
TUNE's placement every pass, no second LP), kept as a baseline.
"""

from __future__ import annotations

import sys
import time

from halyard.datamodel import load_cluster
from halyard.policies import make_policy
from halyard.policies.ordering import ORDERINGS
from halyard.policies.staged import StagedPolicy
from halyard.policies.synergy import Opt, Tune
from halyard.scheduling import Simulator
from halyard.scheduling.timing import performance_model_for
from halyard.traces.generator import generate_synergy_trace

VARIANTS = ("synergy-tune:srtf", "synergy-opt:srtf", "synergy-opt-every-pass:srtf", "synergy-opt-fit-running:srtf",
            "ilp+tune-placement:srtf")


class IlpThenTune(Opt):
    """An earlier synergy-opt: the ILP's vectors packed by TUNE's placement every pass (no second LP)."""

    pack = Tune.pack

    def __init__(self) -> None:
        super().__init__(rounds=False)


def main(n: int, rate: float, multi: bool) -> None:
    jobs = generate_synergy_trace(n, rate_per_hour=rate, split=(20, 70, 10), seed=42, multi_gpu=multi)
    cluster = load_cluster("synergy-128")
    jct: dict[str, float] = {}
    for name in VARIANTS:
        policy = (StagedPolicy(name, ORDERINGS["srtf"](), placement=IlpThenTune()) if name.startswith("ilp")
                  else make_policy(name))
        sim = Simulator(cluster, policy, performance_model_for(policy))
        started = time.perf_counter()
        sim.run(jobs)
        wall = time.perf_counter() - started
        records = list(sim.core.records.values())
        jct[name] = sum(r.end_time - r.spec.submit_time for r in records) / len(records) / 3600
        p = policy.placement
        extra = (f" unsolved={p.unsolved} spread_failed={p.spread_failed} split_jobs={p.split_jobs}"
                 if isinstance(p, Opt) else "")
        print(f"{name}: mean JCT {jct[name]:.3f} h, wall {wall:.1f} s, passes {sim.core.passes}{extra}", flush=True)
    tune = jct[VARIANTS[0]]
    print("; ".join(f"{name} / tune = {jct[name] / tune:.3f}" for name in VARIANTS[1:]))


if __name__ == "__main__":
    main(int(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == "multi")
