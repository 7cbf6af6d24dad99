"""A plan answers what it does by job: what starts, stops and moves, and the allocations after it.

Stages ask these instead of scanning the action list by type (Kubernetes' ``NodeInfo`` after
``Assume``). The strongest check is the core's own: the allocations a plan says jobs hold after it
are exactly the ones the core gives them when it applies the plan.
"""

from __future__ import annotations

import pytest
from factories import job

from halyard.datamodel import Allocation, NodeAllocation
from halyard.policies import Migrate, Plan, Preempt, Resize, Start, make_policy
from halyard.scheduling import SchedulingCore


def alloc(*parts: tuple[str, tuple[int, ...]], cpus: int = 3, mem: int = 62_500) -> Allocation:
    return Allocation(tuple(NodeAllocation(n, g, cpus * len(g), mem * len(g)) for n, g in parts))


A0, A1 = alloc(("r0-n0", (0, 1))), alloc(("r0-n1", (0, 1)))
B0, B1 = alloc(("r0-n0", (2, 3))), alloc(("r1-n0", (2, 3)))
C0 = alloc(("r1-n1", (0, 1, 2, 3)))


def _a_plan() -> Plan:
    plan = Plan()
    plan.preempt("a")
    plan.migrate("b", B1)
    plan.start("c", C0)
    plan.set_resources("b", "r1-n0", 4, 70_000)
    plan.set_time_shift("c", 0.25, 1.5)
    return plan


def test_the_index_by_job_lists_each_jobs_actions_in_order():
    plan = _a_plan()
    assert plan.touched() == {"a", "b", "c"}
    assert plan.touches("b") and not plan.touches("d")
    assert [type(a).__name__ for a in plan.actions_of("b")] == ["Migrate", "SetResources"]
    assert plan.actions_of("c")[0] == Start("c", C0)
    assert plan.actions_of("d") == []


def test_starts_stops_and_moves():
    plan = _a_plan()
    plan.suspend("e")
    plan.resize("f", A1)
    assert plan.starts() == {"c": C0}
    assert plan.stops() == {"a", "e"}
    assert plan.stopped("a") and plan.stopped("e") and not plan.stopped("b") and not plan.stopped("zz")
    assert plan.moves() == {"b": B1, "f": A1}
    assert plan.resized() == {"f"}
    assert plan.replaced() == {"a", "b", "c", "e", "f"}  # not a job whose only action is a time-shift


def test_a_plan_built_from_actions_is_indexed_too():
    plan = Plan(actions=[Preempt("a"), Migrate("b", B1)])
    assert plan.touched() == {"a", "b"} and plan.stops() == {"a"} and plan.moves() == {"b": B1}


def test_replace_keeps_the_index_and_refuses_another_job():
    plan = Plan()
    plan.resize("f", A0)
    plan.resize("g", B0)
    plan.replace(0, Resize("f", A1))
    assert plan.moves() == {"f": A1, "g": B0} and plan.actions_of("f") == [Resize("f", A1)]
    with pytest.raises(ValueError, match="about job f, not g"):
        plan.replace(0, Resize("g", A1))


def test_placements_after_move_gpus_only_and_keep_the_running_order():
    plan = _a_plan()
    after = plan.placements_after({"a": A0, "b": B0, "idle": None})
    assert list(after) == ["b", "c"]  # a stopped; c, started, comes after the jobs that keep running
    assert after == {"b": B1, "c": C0}  # the CPU change and the time-shift are not applied here


def test_a_job_stopped_and_started_again_in_one_plan_is_where_it_starts():
    plan = Plan()
    plan.preempt("a")
    plan.start("a", A1)
    assert plan.placements_after({"a": A0}) == {"a": A1}
    assert plan.stops() == {"a"} and plan.starts() == {"a": A1}


def test_allocations_after_are_the_cores_after_it_applies_the_plan(small_cluster, perf):
    core = SchedulingCore(small_cluster, make_policy("fifo"), perf)
    for job_id, gpus in (("a", 2), ("b", 2), ("c", 4)):
        core.submit(job(gpus, job_id=job_id), 0.0)
    first = Plan()
    first.start("a", A0)
    first.start("b", B0)
    core.apply(first, 1.0)
    held = {j: r.allocation for j, r in core.running.items()}
    plan = _a_plan()
    predicted = plan.allocations_after(held, 7.0)
    core.apply(plan, 7.0)
    assert predicted == {j: r.allocation for j, r in core.running.items()}
    assert predicted["b"].on("r1-n0").cpus == 4 and predicted["c"].time_shift_period_s == 1.5
