"""What Pollux's batch adaptation changes when the fabric runs the submitted batch (docs/pollux.md).

    .venv/bin/python benchmarks/pollux_batch_option.py [--jobs 120] [--seeds 1,2,3] [--loads 0.8,1.0]

Runs ``Pollux()`` (the paper's rule: each allocation ranked at its goodput-optimal batch) and
``Pollux(adapt_batch=False)`` (ours, off by default: ranked at the submitted batch ``M0``, the one
Halyard's jobs train) on reproduce_cassini.py's Poisson traces (Table 4.2 mix, jobs elastic as
there) and prints the second's average/p99 JCT and iteration time as ratios to the first's,
measured in the same run (above 1: the option is slower). Not part of the tests.
"""

from __future__ import annotations

import argparse

import numpy as np
from reproduce_cassini import CLUSTER, poisson_trace, pollux_trace

from halyard.controlplane import Simulator
from halyard.datamodel import load_cluster
from halyard.emulator import PerformanceModel
from halyard.policies.pollux import Pollux


def measure(traces, cluster, adapt_batch: bool) -> dict[str, float]:
    iters, jct = [], []
    for jobs in traces:
        sim = Simulator(cluster, Pollux(adapt_batch=adapt_batch), PerformanceModel())
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
        paper, ours = measure(traces, cluster, True), measure(traces, cluster, False)
        ratios = ", ".join(f"{k} {ours[k] / paper[k]:.3f}x" for k in paper)
        print(f"load {load:.0%}: adapt_batch=False over the paper's rule: {ratios}")


if __name__ == "__main__":
    main()
