"""What a forecast costs: 2,000 pending and 1,000 running jobs on the 2,816-GPU ``philly`` cluster.

For each policy it builds that state -- 3,000 jobs of Synergy's multi-GPU synthetic trace (seed 1;
:func:`~halyard.traces.generate_synergy_trace`), all submitted at time 0, then passes until about
1,000 run and about 2,000 wait -- and then, as the control plane does (controlplane/forecast.py),
forks the process and runs the copy forward with no arrivals until every job has ended. It prints
the forecast's CPU seconds (the child's ``time.process_time``), the passes and events it took, and
its ratio to one scheduling pass over the same state measured in the same run (a fork that
completes one running job and makes one pass), so figures from different machines compare by
ratio; and the wall milliseconds the forking process spends in ``os.fork`` (best of 5), which is
all a forecast takes from the control plane's event loop. The goals (docs/forecast.md): at most 1 s of
CPU under fifo and 5 s under the heaviest policy.

    nice -n 10 .venv/bin/python benchmarks/bench_forecast.py [--policies fifo,tiresias,dally-literal,...]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import time

from halyard.controlplane.forecast import _finish_fork, _start_fork, in_fork, run_forward
from halyard.datamodel import load_cluster
from halyard.policies import make_policy
from halyard.scheduling import Simulator
from halyard.traces import generate_synergy_trace

JOBS = 3000
TARGET_RUNNING = 1000
SEED = 1
GOALS_S = {"fifo": 1.0}  # every other policy: HEAVY_GOAL_S
HEAVY_GOAL_S = 5.0


def loaded(policy_name: str, cluster_name: str, jobs: int = JOBS, running: int = TARGET_RUNNING) -> Simulator:
    """A simulator whose core holds about ``running`` running jobs and ``jobs - running`` pending ones.

    The first ``running`` jobs of the trace come at time 0, their 1-GPU jobs made 2-GPU so that together
    they nearly fill the cluster (the trace's mean is 1.9 GPUs a job; 1,000 jobs at 2.6 hold about 2,600
    of the 2,816 GPUs); the rest come at time 1 and wait behind them, topped up with further trace jobs
    as many as started from those free GPUs, so that ``jobs - running`` wait (their pass comes with the
    forecast's first event)."""
    sim = Simulator(load_cluster(cluster_name), make_policy(policy_name))
    specs = iter(generate_synergy_trace(3 * jobs, rate_per_hour=1.0, multi_gpu=True, seed=SEED))
    core = sim.core
    for i in range(running):
        spec = next(specs)
        core.submit(dataclasses.replace(spec, submit_time=0.0, job_id=f"run-{i}", num_gpus=max(2, spec.num_gpus)),
                    0.0)
    sim.pool.execute(core.schedule(0.0), 0.0)
    for i in range(jobs - running):
        core.submit(dataclasses.replace(next(specs), submit_time=1.0, job_id=f"wait-{i}"), 1.0)
    sim.pool.execute(core.schedule(1.0), 1.0)
    for i, spec in enumerate(itertools.islice(specs, jobs - running - len(core.pending))):  # the ones that started
        core.submit(dataclasses.replace(spec, submit_time=1.0, job_id=f"more-{i}"), 1.0)
    return sim


def warm_up() -> None:
    """One small forecast in this process, untimed: one-time work (imports, loading the compiled link
    kernels of :mod:`halyard.emulator.link_kernels`) is done once here, as in a control plane that has
    run passes, instead of in every forked forecast."""
    sim = loaded("fifo", "philly", jobs=600, running=300)
    run_forward(sim.core, sim.pool.pacer, 2.0)


def one_pass_cpu_s(sim: Simulator, now: float) -> float:
    """CPU seconds of one pass over this state after one running job completes (in a fork)."""
    core = sim.core

    def run() -> float:
        job_id = next(iter(core.running))
        core.complete(job_id, now)
        started = time.process_time()
        sim.pool.execute(core.schedule(now), now)
        return time.process_time() - started

    return in_fork(run)


def fork_pause_ms(repeat: int = 5) -> float:
    """Wall milliseconds the forking process spends in ``os.fork`` (what a forecast costs the event loop)."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        pid, read_fd = _start_fork(lambda: None)
        best = min(best, time.perf_counter() - started)
        _finish_fork(pid, read_fd)
    return 1e3 * best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", default="fifo,tiresias,dally-literal,synergy-tune:fifo,crius")  # docs/forecast.md
    ap.add_argument("--cluster", default="philly")
    args = ap.parse_args()
    print(f"{'policy':<20} {'running':>7} {'pending':>7} {'forecast CPU s':>14} {'goal s':>6} {'passes':>6} "
          f"{'events':>6} {'1 pass CPU s':>12} {'ratio':>8} {'fork ms':>7}")
    warm_up()
    for name in args.policies.split(","):
        sim = loaded(name, args.cluster)
        core = sim.core
        running, pending = len(core.running), len(core.pending)
        now = 2.0
        out = in_fork(lambda: run_forward(sim.core, sim.pool.pacer, now))  # noqa: B023 - called at once
        single = one_pass_cpu_s(sim, now)
        unended = running + pending - len(out.finishes)
        goal = GOALS_S.get(name, HEAVY_GOAL_S)
        print(f"{name:<20} {running:>7} {pending:>7} {out.cpu_s:>14.3f} {goal:>6.0f} {out.passes:>6} "
              f"{out.events:>6} {single:>12.4f} {out.cpu_s / max(single, 1e-9):>8.0f} {fork_pause_ms():>7.1f}"
              + (f"  ({unended} not ended within the horizon)" if unended else ""), flush=True)


if __name__ == "__main__":
    main()
