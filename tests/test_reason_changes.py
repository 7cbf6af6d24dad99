"""Wait reasons said as a change set (Plan.changes_from): a pass tells the core only the reasons that
differ from those it holds, and the core keeps the rest. Whatever a user reads must not change: after
every pass, every waiting job's reason (SchedulingCore.wait_of, what GetJob and the CLI show) and the
counts per code (the halyard_waiting_jobs gauge) are those of the same run told every reason whole.
"""

from __future__ import annotations

from collections import Counter

import pytest

from halyard.datamodel import load_cluster
from halyard.policies import make_policy
from halyard.policies.plan import Plan
from halyard.policies.reasons import cannot_fit, never_fits
from halyard.scheduling import Simulator
from halyard.scheduling.timing import performance_model_for
from halyard.traces import generate_synergy_trace


class _AsChanges:
    """A policy whose plans tell every waiting job's reason, its reasons re-said as changes over the view's
    (``stale``: over a copy of them, which the core no longer holds and must make whole)."""

    def __init__(self, inner: object, *, stale: bool = False) -> None:
        self.inner, self.stale = inner, stale

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def schedule(self, view, state) -> Plan:
        plan = self.inner.schedule(view, state)
        whole, plan.unplaced = plan.unplaced, {}
        plan.changes_from(dict(view.reasons) if self.stale else view.reasons)
        for job_id, why in whole.items():
            plan.wait(job_id, why)
        return plan


def _run(policy) -> tuple[list[tuple[dict, Counter]], int]:
    """Every pass's reasons of the waiting jobs and counts per code, and how many reasons the passes wrote."""
    jobs = generate_synergy_trace(1000, rate_per_hour=5.0, multi_gpu=True, seed=1)  # queues on synergy-128
    sim = Simulator(load_cluster("synergy-128"), policy, performance_model_for(policy, contention="off"))
    core = sim.core
    seen: list[tuple[dict, Counter]] = []
    written = 0
    schedule, note = core.schedule, core._note_reasons

    def noting(told, *args, **kwargs) -> None:
        nonlocal written
        written += len(told)
        note(told, *args, **kwargs)

    def scheduling(now: float):
        applied = schedule(now)
        seen.append(({r.job_id: core.wait_of(r) for r in core.pending}, core.waiting))
        return applied

    core.schedule, core._note_reasons = scheduling, noting
    sim.run(jobs, until=(600, 601))
    return seen, written


def _dally(*, shortcuts: bool):
    policy = make_policy("dally-literal")  # the paper's Nw_sens preemption (the preset re-auctions instead)
    policy.shortcuts = shortcuts
    return policy


def test_dallys_change_sets_leave_every_reason_as_whole_ones_do():
    whole, whole_written = _run(_dally(shortcuts=False))  # a sorted order every pass: reasons said whole
    changes, changes_written = _run(_dally(shortcuts=True))
    assert changes == whole
    assert sum(len(reasons) for reasons, _ in whole) > 10_000  # many passes with many jobs waiting
    assert changes_written < whole_written / 2  # and most reasons were kept, not written again


def test_the_core_keeps_a_change_sets_reasons_and_makes_a_stale_one_whole():
    whole, whole_written = _run(_dally(shortcuts=False))
    changes, changes_written = _run(_AsChanges(_dally(shortcuts=False)))
    stale, _ = _run(_AsChanges(_dally(shortcuts=False), stale=True))
    assert changes == whole and stale == whole
    assert changes_written < whole_written / 2


def test_a_reason_told_again_unchanged_is_not_written_and_the_plan_still_says_it():
    core_reasons = {"a": cannot_fit("fifo", "needs {:#GPU}; {} free", 4, 2), "b": never_fits("fifo", "too big")}
    plan = Plan()
    plan.changes_from(core_reasons)
    plan.wait("a", cannot_fit("fifo", "needs {:#GPU}; {} free", 4, 1))
    plan.wait("a", cannot_fit("fifo", "needs {:#GPU}; {} free", 4, 2))  # back to what the core holds
    plan.wait("b", never_fits("fifo", "too big"))
    plan.wait("c", never_fits("fifo", "too big"))
    assert plan.unplaced == {"c": never_fits("fifo", "too big")}
    assert plan.reasons() == {**core_reasons, "c": never_fits("fifo", "too big")}


def _staged(name: str, *, changes: bool):
    policy = make_policy(name)
    policy.reason_changes = changes
    return policy


@pytest.mark.parametrize("name", ["fifo", "las", "tiresias", "synergy-tune:fifo", "synergy-tune:srtf"])
def test_a_staged_policys_change_sets_leave_every_reason_as_whole_ones_do(name):
    whole, whole_written = _run(_staged(name, changes=False))
    changes, changes_written = _run(_staged(name, changes=True))
    assert changes == whole
    assert sum(len(reasons) for reasons, _ in whole) > 1_000  # passes with jobs waiting
    if make_policy(name).ordering.preemptive or make_policy(name).placement.batch:  # the runnable walk
        assert changes_written < whole_written / 2  # most reasons were kept, not written again
    else:  # fifo's in-order pass may stop early (Plan.otherwise): its reasons stay whole
        assert changes_written == whole_written
