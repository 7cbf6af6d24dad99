"""What Pollux's two named options change (docs/pollux.md).

    .venv/bin/python benchmarks/pollux_options.py [--jobs 120] [--seeds 1,2,3] [--loads 0.8,1.0]

Runs ``Pollux()`` (default: each allocation ranked at its goodput-optimal batch, the paper's rule;
no restart penalty on a first start), ``Pollux(adapt_batch=False)`` (ranked at the submitted batch
``M0``, the one Halyard's jobs train) and ``Pollux(penalize_starts=True)`` (the reference
simulator's penalty on first starts too) on reproduce_cassini.py's Poisson traces (Table 4.2 mix,
jobs elastic as there) and prints each option's average/p99 JCT and iteration time as ratios to
the default's, measured in the same run (above 1: the option is slower). Not part of the tests.

    .venv/bin/python benchmarks/pollux_options.py --pass-speed

times instead one pass over 1,000 pending jobs (Synergy's trace, each elastic 1..2x) on 1,000
V100s (125 nodes of 8), Pollux's CPU seconds beside FIFO's on the same state: the first pass
(cold: every throughput computed) and a second on the same view (warm: the memo filled).
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np
from reproduce_cassini import CLUSTER, poisson_trace, pollux_trace

from halyard.datamodel import load_cluster, parse_cluster
from halyard.emulator import PerformanceModel
from halyard.policies import PassState, make_policy
from halyard.policies.pollux import Pollux
from halyard.scheduling import SchedulingCore, Simulator
from halyard.testing.cluster import small_cluster_toml
from halyard.traces import generate_synergy_trace

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


def pass_speed(jobs: int) -> None:
    cluster = parse_cluster(small_cluster_toml(125), source="bench")  # 1,000 V100
    specs = [dataclasses.replace(j, min_gpus=1, max_gpus=2 * j.num_gpus)
             for j in generate_synergy_trace(jobs, rate_per_hour=0.0, multi_gpu=True, seed=1)]
    times = {}
    for name in ("fifo", "pollux"):
        core = SchedulingCore(cluster, make_policy(name), PerformanceModel())
        for spec in specs:
            core.submit(spec, 0.0)
        view = core.view(1.0)
        for label in ("cold", "warm"):
            t0 = time.process_time()
            core.policy.schedule(view, PassState())
            times[name, label] = time.process_time() - t0
    for label in ("cold", "warm"):
        print(f"{jobs} jobs, 1,000 GPUs, {label} pass: fifo {times['fifo', label] * 1e3:.1f} ms CPU, "
              f"pollux {times['pollux', label] * 1e3:.1f} ms ({times['pollux', label] / times['fifo', label]:.0f}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=120)
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--loads", default="0.8,1.0")
    parser.add_argument("--pass-speed", action="store_true", help="time one pass over 1,000 jobs instead")
    args = parser.parse_args()
    if args.pass_speed:
        pass_speed(1000)
        return
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
