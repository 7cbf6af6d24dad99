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

``--load 0.9`` replaces the trace by Synergy's synthetic one (multi-GPU, seed 1;
:func:`~halyard.traces.generate_synergy_trace`) at the Poisson rate that offers
that fraction of the cluster's GPU-seconds: ``rate = load x GPUs / mean(GPUs x
duration)`` (the loaded runs: 10k jobs at 90% load). On the 2,816-GPU Philly cluster 10k
such jobs arrive within 122 h, less than the longest jobs run (up to 10^4 min),
so the cluster never fills and nothing waits; on ``--cluster synergy-128`` they
span about 2,700 h and queues form:

    .venv/bin/python benchmarks/bench_simulate.py --load 0.9 --cluster synergy-128 --sizes 10000 \
        --policies fifo,las,tiresias,gandiva

Before timing, it simulates the first ``WARM_UP_JOBS`` jobs once, untimed, so that one-time work
(imports, loading the compiled link kernels of :mod:`halyard.emulator.link_kernels`) is not charged
to whichever run comes first -- the baseline.

Besides wall time it prints CPU seconds (``time.process_time``) and their ratio
to the baseline's: on a machine shared with other work the CPU ratio is the
steadier one. Each run also prints the work behind its time (``benchmarks/opcounts.py``: passes and
those skipped as quiet, jobs ranked per pass, link settles and link states solved, Dally's victims built),
since timing noise on a shared machine reaches 20-50% between runs (issue 38), and the digest of its whole event
log (as ``benchmarks/pin_schedules.py`` takes it): a speed-up must leave it unchanged.

    .venv/bin/python benchmarks/bench_simulate.py [--trace PATH | --load 0.9] [--sizes 10000,82247]
        [--policies fifo,las] [--compress 1] [--contention fair]
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import itertools
import sys
import time
from pathlib import Path

from halyard.datamodel import Cluster, JobSpec, load_cluster
from halyard.policies import make_policy
from halyard.scheduling import Simulator, summarize
from halyard.scheduling.timing import performance_model_for
from halyard.traces import generate_synergy_trace, read_trace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_synergy_public_config import event_digest  # (the pin's digest of a whole event log)
from opcounts import add_core, counting, line  # benchmarks/ is not a package: found on sys.path

SECONDS_PER_HOUR = 3600.0
PHILLY_FULL = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "philly_pollux_jobs_full.csv"
SYNTHETIC_SEED = 1
WARM_UP_JOBS = 300  # enough that links are shared and solved (a compressed trace queues within them)


def synthetic_at_load(n: int, load: float, cluster: Cluster) -> list[JobSpec]:
    """``n`` jobs of Synergy's multi-GPU synthetic trace arriving at the rate that offers ``load`` x
    the cluster's GPU-seconds (the rate rescales arrival times only; every job stays the same)."""
    if not load > 0.0:  # also refuses NaN
        raise SystemExit(f"--load must be > 0 (a fraction of the cluster's GPU-seconds), got {load}")
    unit = generate_synergy_trace(n, rate_per_hour=1.0, multi_gpu=True, seed=SYNTHETIC_SEED)
    work_s = sum(j.num_gpus * (j.duration_s or 0.0) for j in unit) / max(1, n)
    rate_per_hour = load * cluster.total_gpus / work_s * SECONDS_PER_HOUR
    return generate_synergy_trace(n, rate_per_hour=rate_per_hour, multi_gpu=True, seed=SYNTHETIC_SEED)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=PHILLY_FULL)
    ap.add_argument("--cluster", default="philly")
    ap.add_argument("--sizes", default="10000,82247")
    ap.add_argument("--policies", default="fifo,las")
    ap.add_argument("--compress", default="1", help="divide submit times by each factor, e.g. 1,8")
    ap.add_argument("--contention", default="fair", help="link contention modes, e.g. off,fair,mltcp")
    ap.add_argument("--load", type=float, default=None,
                    help="use the synthetic trace at this offered load (e.g. 0.9) instead of --trace")
    args = ap.parse_args()

    cluster = load_cluster(args.cluster)
    started = time.perf_counter()
    if args.load is None:
        jobs = read_trace(args.trace).jobs
        source = args.trace.name
    else:
        jobs = synthetic_at_load(max(int(x) for x in args.sizes.split(",")), args.load, cluster)
        per_hour = len(jobs) / (jobs[-1].submit_time / SECONDS_PER_HOUR)
        source = f"the synthetic trace at {args.load:g} load ({per_hour:.1f} jobs/h)"
    load_s = time.perf_counter() - started
    print(f"read {len(jobs)} jobs from {source} in {load_s:.2f} s")
    warm = make_policy(args.policies.split(",")[0])
    factor = float(args.compress.split(",")[0])
    Simulator(cluster, warm, performance_model_for(warm, contention=args.contention.split(",")[0])).run(
        [dataclasses.replace(j, submit_time=j.submit_time / factor) for j in jobs[:WARM_UP_JOBS]])
    baseline: float | None = None
    baseline_cpu: float | None = None
    print(f"{'policy':>8} {'links':>6} {'x':>3} {'jobs':>7} {'completed':>9} {'wall s':>8} {'jobs/s':>9} "
          f"{'vs base':>8} {'cpu s':>8} {'cpu x':>6} {'passes':>7} {'ms/pass':>8} {'preempt':>7} {'queue h':>8} "
          f"{'avg JCT h':>9}")
    for factor in (float(x) for x in args.compress.split(",")):
        for n in (int(x) for x in args.sizes.split(",")):
            subset = [dataclasses.replace(j, submit_time=j.submit_time / factor) for j in jobs[:n]]
            for name, contention in itertools.product(args.policies.split(","), args.contention.split(",")):
                policy = make_policy(name)  # Synergy's mechanisms run with data stalls, as simulate does
                sim = Simulator(cluster, policy, performance_model_for(policy, contention=contention))
                gc.collect()  # (the last run's objects, before the run freezes what exists: Simulator.run's freeze_gc)
                with counting(policy) as work:
                    t0, c0 = time.perf_counter(), time.process_time()
                    sim.run(subset, freeze_gc=True)
                    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                s = summarize(sim.core, policy=name, trace_jobs=len(subset), rejected=0, wall_s=wall)
                rate = len(subset) / wall
                baseline = baseline or rate
                baseline_cpu = baseline_cpu or cpu
                print(f"{name:>8} {contention:>6} {factor:>3g} {len(subset):>7} {s['completed']:>9} {wall:>8.2f} "
                      f"{rate:>9.0f} {rate / baseline:>8.2f} {cpu:>8.2f} {cpu / baseline_cpu:>6.2f} "
                      f"{s['passes']:>7} {s['avg_pass_ms']:>8.3f} "
                      f"{s['preemptions']:>7} {s['avg_queue_s'] / 3600:>8.2f} {s['avg_jct_s'] / 3600:>9.2f}")
                print(f"{'':>8} work: {line(add_core(work, sim.core))}", flush=True)
                print(f"{'':>8} event log digest: {event_digest(sim)[:16]}", flush=True)


if __name__ == "__main__":
    main()
