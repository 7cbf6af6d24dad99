"""Simulated jobs per wall second on the Philly trace and the 2,816-GPU Philly cluster.

Runs FIFO and LAS on the first 10,000 and on all 82,247 jobs of the processed
Philly file and prints each run's wall time, jobs per second and its ratio to
the FIFO / 10,000-job run measured in the same invocation (the baseline), so
figures from different machines compare by ratio, not by absolute time.

At its real arrival rate Philly loads 2,816 GPUs to about 13%, so no job ever
waits; ``--compress 8`` divides every submit time by 8 so that queues form
and preemptive policies preempt (``--compress 1,8`` runs both).
``--contention off,fair`` measures what the link-contention fabric costs
(the first mode listed is the baseline's).

    .venv/bin/python benchmarks/bench_simulate.py [--trace PATH] [--sizes 10000,82247]
        [--policies fifo,las] [--compress 1] [--contention fair]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import time
from pathlib import Path

from halyard.controlplane import Simulator, summarize
from halyard.controlplane.timing import performance_model_for
from halyard.datamodel import load_cluster
from halyard.policies import make_policy
from halyard.traces import read_trace

PHILLY_FULL = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "philly_pollux_jobs_full.csv"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=PHILLY_FULL)
    ap.add_argument("--cluster", default="philly")
    ap.add_argument("--sizes", default="10000,82247")
    ap.add_argument("--policies", default="fifo,las")
    ap.add_argument("--compress", default="1", help="divide submit times by each factor, e.g. 1,8")
    ap.add_argument("--contention", default="fair", help="link contention modes, e.g. off,fair,mltcp")
    args = ap.parse_args()

    started = time.perf_counter()
    jobs = read_trace(args.trace).jobs
    load_s = time.perf_counter() - started
    print(f"read {len(jobs)} jobs from {args.trace.name} in {load_s:.2f} s")
    cluster = load_cluster(args.cluster)
    baseline: float | None = None
    print(f"{'policy':>6} {'links':>6} {'x':>3} {'jobs':>7} {'completed':>9} {'wall s':>8} {'jobs/s':>9} "
          f"{'vs base':>8} {'passes':>7} {'ms/pass':>8} {'preempt':>7} {'queue h':>8} {'avg JCT h':>9}")
    for factor in (float(x) for x in args.compress.split(",")):
        for n in (int(x) for x in args.sizes.split(",")):
            subset = [dataclasses.replace(j, submit_time=j.submit_time / factor) for j in jobs[:n]]
            for name, contention in itertools.product(args.policies.split(","), args.contention.split(",")):
                policy = make_policy(name)  # Synergy's mechanisms run with data stalls, as simulate does
                sim = Simulator(cluster, policy, performance_model_for(policy, contention=contention))
                t0 = time.perf_counter()
                sim.run(subset)
                wall = time.perf_counter() - t0
                s = summarize(sim.core, policy=name, trace_jobs=len(subset), rejected=0, wall_s=wall)
                rate = len(subset) / wall
                baseline = baseline or rate
                print(f"{name:>6} {contention:>6} {factor:>3g} {len(subset):>7} {s['completed']:>9} {wall:>8.2f} "
                      f"{rate:>9.0f} {rate / baseline:>8.2f} {s['passes']:>7} {s['avg_pass_ms']:>8.3f} "
                      f"{s['preemptions']:>7} {s['avg_queue_s'] / 3600:>8.2f} {s['avg_jct_s'] / 3600:>9.2f}")


if __name__ == "__main__":
    main()
