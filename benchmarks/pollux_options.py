"""What Pollux's two named options change (docs/pollux.md).

    .venv/bin/python benchmarks/pollux_options.py [--jobs 120] [--seeds 1,2,3] [--loads 0.8,1.0]

Runs ``Pollux()`` (default: each allocation ranked at its goodput-optimal batch, the paper's rule;
no restart penalty on a first start), ``Pollux(adapt_batch=False)`` (ranked at the submitted batch
``M0``, the one Halyard's jobs train) and ``Pollux(penalize_starts=True)`` (the reference
simulator's penalty on first starts too) on reproduce_cassini.py's Poisson traces (Table 4.2 mix,
jobs elastic as there) and prints each option's average/p99 JCT and iteration time as ratios to
the default's, measured in the same run (above 1: the option is slower). Not part of the tests.
"""

from __future__ import annotations

import argparse

import numpy as np
from reproduce_cassini import CLUSTER, poisson_trace, pollux_trace

from halyard.controlplane import Simulator
from halyard.datamodel import load_cluster
from halyard.emulator import PerformanceModel
from halyard.policies.pollux import Pollux

OPTIONS = {"adapt_batch=False": {"adapt_batch": False}, "penalize_starts=True": {"penalize_starts": True}}


def measure(traces, cluster, **options: bool) -> dict[str, float]:
    iters, jct = [], []
    for jobs in traces:
        sim = Simulator(cluster, Pollux(**options), PerformanceModel())
        sim.run(jobs)
        done = [r for r in sim.core.records.values() if r.end_time is not None]
        iters += [r.run_time_s(r.end_time) / r.spec.iterations for r in done]
        jct += [r.end_time - r.spec.submit_time for r in done]
    return {"avg_jct": float(np.mean(jct)), "p99_jct": float(np.percentile(jct, 99)),
            "avg_iter": float(np.mean(iters)), "p99_iter": float(np.percentile(iters, 99))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=120)
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--loads", default="0.8,1.0")
    args = parser.parse_args()
    cluster = load_cluster(CLUSTER)
    pm = PerformanceModel()
    for load in (float(x) for x in args.loads.split(",")):
        traces = [pollux_trace(poisson_trace(args.jobs, load, int(s), pm, cluster, "table-4.2"), cluster)
                  for s in args.seeds.split(",")]
        default = measure(traces, cluster)
        for label, options in OPTIONS.items():
            ours = measure(traces, cluster, **options)
            ratios = ", ".join(f"{k} {ours[k] / default[k]:.3f}x" for k in default)
            print(f"load {load:.0%}: {label} over the default: {ratios}", flush=True)


if __name__ == "__main__":
    main()
