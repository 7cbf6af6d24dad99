"""One Synergy-TUNE pass over 1,000 runnable jobs on 512 GPUs (DESIGN.md: well under a second).

The cluster is 64 Synergy servers (8 V100, 24 CPUs, 500 GB each). A core holds
``--running`` jobs already placed by TUNE (so the pass has servers to repack and
jobs to revert) and ``--pending`` new ones, drawn from Synergy's (60, 30, 10)
image/language/speech split with multi-GPU demands; the timed pass ranks all of
them, picks the runnable set and packs it. Printed: the jobs it started and keyed
(benchmarks/opcounts.py, on one more pass, untimed), the wall time of the TUNE
pass, of a GPU-proportional pass over the same state (the baseline, measured in
the same run) and their ratio. Every job is profiled before timing (profiling
happens once per job, on arrival, and is cached per model).

    .venv/bin/python benchmarks/bench_synergy_tune.py [--running 0] [--pending 1000] [--repeat 5]

With the defaults 1,000 jobs wait on an empty cluster; `--running 150 --pending 850` starts
150 first so that the pass repacks around running jobs (and SRTF preempts).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from halyard.datamodel import parse_cluster
from halyard.emulator import PerformanceModel
from halyard.policies import make_policy
from halyard.policies.passstate import PassState
from halyard.policies.synergy_profile import job_profile
from halyard.scheduling import SchedulingCore
from halyard.traces.generator import generate_synergy_trace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from opcounts import counting  # benchmarks/ is not a package: found on sys.path

CLUSTER = """
name = "synergy-512"
[[racks]]
name = "r{i}"
count = 8
uplink_gbit_s = 400
[[racks.nodes]]
name = "{rack}-n{i}"
count = 8
gpu_type = "V100"
gpus = 8
cpus = 24
memory_gb = 500
fabric = "nvlink"
fabric_gbyte_s = 150
nic_gbit_s = 200
"""


def build(policy: str, running: int, pending: int, perf: PerformanceModel) -> SchedulingCore:
    cluster = parse_cluster(CLUSTER, source="bench")
    jobs = generate_synergy_trace(running + pending, rate_per_hour=0.0, split=(60, 30, 10), multi_gpu=True, seed=1)
    core = SchedulingCore(cluster, make_policy(policy), perf)
    for spec in jobs[:running]:
        core.submit(spec, 0.0)
    core.schedule(0.0)  # place the first jobs (they now run)
    for spec in jobs[running:]:
        core.submit(spec, 1.0)
    return core


def timed_pass(policy: str, running: int, pending: int, perf: PerformanceModel, repeat: int
               ) -> tuple[float, int, int]:
    """The best wall time of the pass over ``repeat`` fresh cores, the jobs it started, and the jobs its
    ordering keyed (counted on one more pass, untimed: the counting wrapper costs time of its own)."""
    best, started, keyed = float("inf"), 0, 0
    for i in range(repeat + 1):
        core = build(policy, running, pending, perf)
        # A round boundary: Synergy's mechanisms are round-based (§3) and change nothing between rounds.
        view = core.view(core.round_s)
        for job in view.pending:  # profiling is on arrival, not part of the pass
            job_profile(view, job)
        if i == repeat:
            with counting(core.policy) as work:
                core.policy.schedule(view, PassState())
            keyed = work["keyed"]
            break
        t0 = time.perf_counter()
        plan = core.policy.schedule(view, PassState())
        best = min(best, time.perf_counter() - t0)
        core.apply(plan, core.round_s)  # the plan is valid
        started = sum(1 for a in plan.actions if type(a).__name__ == "Start")
    return best, started, keyed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--running", type=int, default=0)
    ap.add_argument("--pending", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    perf = PerformanceModel(data_stalls=True)
    base, base_started, base_keyed = timed_pass("proportional:fifo", args.running, args.pending, perf, args.repeat)
    print(f"{'pass':>28} {'jobs':>6} {'started':>8} {'keyed':>6} {'wall ms':>9} {'vs proportional':>16}")
    print(f"{'proportional:fifo':>28} {args.running + args.pending:>6} {base_started:>8} {base_keyed:>6} "
          f"{base * 1e3:>9.1f} {1.0:>16.2f}")
    for name in ("synergy-tune:fifo", "synergy-tune:srtf", "synergy-tune-every-pass:srtf", "synergy-tune-raise:srtf",
                 "synergy-greedy:fifo"):
        wall, started, keyed = timed_pass(name, args.running, args.pending, perf, args.repeat)
        print(f"{name:>28} {args.running + args.pending:>6} {started:>8} {keyed:>6} {wall * 1e3:>9.1f} "
              f"{wall / base:>16.2f}")


if __name__ == "__main__":
    main()
