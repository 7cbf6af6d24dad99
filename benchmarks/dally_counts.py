"""Dally's work counts on loaded Philly: passes, jobs keyed per pass, victims built, and a digest of
the whole event log.

Issue 38 asks a speed-up to show the operation counts that explain its time, before and after, since
this machine's timing noise reaches 20-50% between runs. The counts are taken by wrapping, for this
run only, the places where Dally's pass does per-job work: the running jobs' Nw_sens
(:meth:`~halyard.policies.running_sens.RunningNwSens.at`, one value per running job), the waiting
jobs re-keyed (:class:`~halyard.policies.waiting_sens.WaitingOrder`, one per job whose key changed),
the victims built (``_Victim``), and the wait reasons a pass writes for the core to note (whole, or
only those that changed: Plan.changes_from). The digest (as ``tests/test_loaded_schedule_exact.py`` makes it,
times with ``repr``) shows the schedule is the same to the last bit. Run it on two checkouts:

    nice -n 10 .venv/bin/python benchmarks/dally_counts.py --jobs 20000 --compress 8
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from halyard.datamodel import load_cluster
from halyard.policies import dally_preemption, make_policy
from halyard.policies.running_sens import RunningNwSens
from halyard.policies.waiting_sens import WaitingOrder
from halyard.scheduling import SchedulingCore, Simulator
from halyard.scheduling.timing import performance_model_for
from halyard.traces import read_trace

PHILLY_FULL = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "philly_pollux_jobs_full.csv"


def counted(counts: dict[str, int]) -> None:
    """Wrap the places of per-job work so that each call adds to ``counts`` (this process only)."""
    real_at, real_learn, real_victim = RunningNwSens.at, WaitingOrder._learn, dally_preemption._Victim.__init__
    real_note = SchedulingCore._note_reasons

    def at(self: RunningNwSens, *args: Any, **kwargs: Any) -> Any:
        jobs, values = real_at(self, *args, **kwargs)
        counts["running jobs keyed"] += len(jobs)
        counts["victim lists"] += 1
        return jobs, values

    def learn(self: WaitingOrder, *args: Any, **kwargs: Any) -> None:
        counts["waiting jobs keyed"] += 1
        real_learn(self, *args, **kwargs)

    def victim(self: Any, *args: Any, **kwargs: Any) -> None:
        counts["victims built"] += 1
        real_victim(self, *args, **kwargs)

    def note(self: SchedulingCore, told: Any, *args: Any, **kwargs: Any) -> None:
        counts["reasons written"] += len(told)
        real_note(self, told, *args, **kwargs)

    wrapped: list[tuple[type, str, Callable[..., Any]]] = [
        (RunningNwSens, "at", at), (WaitingOrder, "_learn", learn), (dally_preemption._Victim, "__init__", victim),
        (SchedulingCore, "_note_reasons", note)]
    for owner, name, function in wrapped:
        setattr(owner, name, function)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=PHILLY_FULL)
    ap.add_argument("--cluster", default="philly")
    ap.add_argument("--jobs", type=int, default=20000)
    ap.add_argument("--compress", type=float, default=8.0, help="divide submit times by this")
    ap.add_argument("--contention", default="off")
    ap.add_argument("--policy", default="dally-literal")  # the paper's Nw_sens preemption: its victims
    args = ap.parse_args()
    counts = dict.fromkeys(("running jobs keyed", "waiting jobs keyed", "victims built", "victim lists",
                            "reasons written"), 0)
    counted(counts)
    jobs = [dataclasses.replace(j, submit_time=j.submit_time / args.compress)
            for j in read_trace(args.trace).jobs[:args.jobs]]
    policy = make_policy(args.policy)
    sim = Simulator(load_cluster(args.cluster), policy, performance_model_for(policy, contention=args.contention))
    sim.run(jobs)
    passes = sim.core.passes
    h = hashlib.sha256()
    for e in sim.core.log:
        h.update(f"{e.seq}|{e.time!r}|{e.job_id}|{e.kind.value}|{e.state.value}|{e.detail}\n".encode())
    print(f"{args.policy}: {len(jobs)} jobs /{args.compress:g}, links {args.contention}: {passes} passes")
    for name, value in counts.items():
        print(f"  {name:>20} {value:>10} ({value / max(passes, 1):.1f} per pass)")
    print(f"  event log: {len(sim.core.log)} events, digest {h.hexdigest()[:16]}")


if __name__ == "__main__":
    main()
