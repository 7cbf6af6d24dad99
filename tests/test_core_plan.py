"""The scheduling core applies every Plan action, and refuses bad plans atomically."""

from __future__ import annotations

import pytest
from factories import job

from halyard.datamodel import Allocation, EventKind, JobState, NodeAllocation, ValidationError
from halyard.policies import Plan, make_policy
from halyard.scheduling import PlanError, SchedulingCore, SimulatedPool


def alloc(*parts: tuple[str, tuple[int, ...]], cpus: int = 3, mem: int = 62_500) -> Allocation:
    return Allocation(tuple(NodeAllocation(n, g, cpus * len(g), mem * len(g)) for n, g in parts))


@pytest.fixture
def core(small_cluster, perf) -> SchedulingCore:
    return SchedulingCore(small_cluster, make_policy("fifo"), perf)


def ledger(core: SchedulingCore) -> tuple:
    f = core.free
    return (tuple(f.gpus), tuple(f.cpus), tuple(f.memory_mb), tuple(f.gpu_mask))


def test_start_takes_resources_and_logs(core):
    core.submit(job(2, job_id="a"), 0.0)
    plan = Plan()
    plan.start("a", alloc(("r0-n1", (1, 3))))
    core.apply(plan, 5.0)
    rec = core.records["a"]
    assert rec.state is JobState.RUNNING and rec.queued_s == 5.0
    assert core.free.gpus[1] == 2 and core.free.gpu_mask[1] == 0b0101
    assert core.free.cpus[1] == 12 - 6 and core.free.memory_mb[1] == 250_000 - 125_000
    last = list(core.log)[-1]
    assert (last.kind, last.detail, last.seq) == (EventKind.STARTED, "r0-n1:1,3", 2)


def test_bad_plan_changes_nothing(core):
    core.submit(job(2, job_id="a"), 0.0)
    core.submit(job(2, job_id="b"), 0.0)
    before, events = ledger(core), len(core.log)
    plan = Plan()
    plan.start("a", alloc(("r0-n0", (0, 1))))
    plan.start("b", alloc(("r0-n0", (1, 2))))  # GPU 1 twice
    with pytest.raises(PlanError, match=r"#1 Start\(b\).*GPUs \[1\] are not free"):
        core.apply(plan, 1.0)
    assert ledger(core) == before and len(core.log) == events
    assert core.records["a"].state is JobState.PENDING


@pytest.mark.parametrize(("build", "message"), [
    (lambda p: p.start("nope", alloc(("r0-n0", (0,)))), "unknown job"),
    (lambda p: p.start("a", alloc(("r0-n0", (0,)))), r"job a allows exactly 2 GPUs \(num_gpus\)"),
    (lambda p: p.start("a", alloc(("r0-n0", (0, 1)), cpus=7)), "CPUs asked"),
    (lambda p: p.start("a", alloc(("r0-n0", (3, 4)))), "out of range"),
    (lambda p: p.preempt("a"), "not running"),
    (lambda p: (p.start("a", alloc(("r0-n0", (0, 1)))), p.start("a", alloc(("r0-n1", (0, 1))))),
     "at most one allocation"),
    (lambda p: (p.start("a", alloc(("r0-n0", (0, 1)))), p.set_time_shift("a", -1.0)), "time shift"),
])
def test_invalid_actions_are_named(core, build, message):
    core.submit(job(2, job_id="a"), 0.0)
    plan = Plan()
    build(plan)
    with pytest.raises(PlanError, match=message):
        core.apply(plan, 0.0)
    assert core.records["a"].state is JobState.PENDING and core.free.total_gpus == 16


def test_preempt_keeps_last_checkpoint_and_requeues(core, perf):
    core.submit(job(1, job_id="a", iterations=10_000), 0.0)
    pool = SimulatedPool(core, perf, lambda *a: None)
    plan = Plan()
    plan.start("a", alloc(("r0-n0", (0,))))
    pool.execute(core.apply(plan, 0.0), 0.0)
    rec = core.records["a"]
    t = 100.5 * rec.iteration_s  # halfway through iteration 101
    stop = Plan()
    stop.preempt("a")
    core.apply(stop, t)
    assert rec.state is JobState.PENDING and rec.allocation is None
    assert rec.iterations_done(t + 1000) == 100  # the partial iteration is lost
    assert core.free.total_gpus == 16 and rec.preemptions == 1
    assert [e.kind for e in core.log][-2:] == [EventKind.PREEMPTED, EventKind.REQUEUED]
    assert rec.attained_gpu_s(t + 50) == pytest.approx(t)  # 1 GPU held for t seconds


def test_restart_pays_restore_cost(core, perf):
    core.submit(job(1, job_id="a", iterations=1000), 0.0)
    pool = SimulatedPool(core, perf, lambda *a: None)
    first = Plan()
    first.start("a", alloc(("r0-n0", (0,))))
    pool.execute(core.apply(first, 0.0), 0.0)
    rec = core.records["a"]
    step = rec.iteration_s
    stop = Plan()
    stop.preempt("a")
    core.apply(stop, 400 * step)
    again = Plan()
    again.start("a", alloc(("r1-n1", (2,))))
    pool.execute(core.apply(again, 1000.0), 1000.0)
    restore = perf.restart_cost_s(rec.spec)
    assert restore > 0
    assert rec.finish_time() == pytest.approx(1000.0 + restore + 600 * step)
    assert rec.iterations_done(1000.0 + restore) == pytest.approx(400)
    assert rec.restarts == 1


def test_migrate_moves_the_ledger(core, perf):
    core.submit(job(2, job_id="a"), 0.0)
    plan = Plan()
    plan.start("a", alloc(("r0-n0", (0, 1))))
    core.apply(plan, 0.0)
    move = Plan()
    move.migrate("a", alloc(("r1-n0", (2, 3))))
    core.apply(move, 10.0)
    assert core.records["a"].allocation.node_names == ("r1-n0",)
    assert core.free.gpus.tolist() == [4, 4, 2, 4]
    assert list(core.log)[-1].kind is EventKind.MIGRATED
    wrong = Plan()
    wrong.migrate("a", alloc(("r0-n0", (0,))))
    with pytest.raises(PlanError, match="keeps the GPU count"):
        core.apply(wrong, 11.0)


def test_resize_respects_elastic_bounds(core):
    core.submit(job(2, job_id="e", min_gpus=1, max_gpus=4), 0.0)
    core.submit(job(2, job_id="rigid"), 0.0)
    plan = Plan()
    plan.start("e", alloc(("r0-n0", (0, 1))))
    plan.start("rigid", alloc(("r0-n1", (0, 1))))
    core.apply(plan, 0.0)
    grow = Plan()
    grow.resize("e", alloc(("r0-n0", (0, 1, 2, 3))))
    core.apply(grow, 1.0)
    assert core.records["e"].num_gpus == 4 and core.free.gpus[0] == 0
    too_big = Plan()
    too_big.resize("e", alloc(("r1-n0", (0, 1, 2, 3)), ("r1-n1", (0,))))
    with pytest.raises(PlanError, match=r"allows 1\.\.4"):
        core.apply(too_big, 2.0)
    rigid = Plan()
    rigid.resize("rigid", alloc(("r0-n1", (0, 1, 2))))
    with pytest.raises(PlanError, match=r"job rigid allows exactly 2 GPUs \(num_gpus\)"):
        core.apply(rigid, 2.0)


def test_time_shift_and_resources(core):
    core.submit(job(2, job_id="a"), 0.0)
    plan = Plan()
    plan.start("a", alloc(("r0-n0", (0, 1))))
    plan.set_time_shift("a", 0.25)
    plan.set_resources("a", "r0-n0", 10, 200_000)
    core.apply(plan, 0.0)
    a = core.records["a"].allocation
    assert a.time_shift_s == 0.25
    assert (a.nodes[0].cpus, a.nodes[0].memory_mb) == (10, 200_000)
    assert (core.free.cpus[0], core.free.memory_mb[0]) == (2, 50_000)
    greedy = Plan()
    greedy.set_resources("a", "r0-n0", 13, 200_000)
    with pytest.raises(PlanError, match="CPUs"):
        core.apply(greedy, 1.0)
    elsewhere = Plan()
    elsewhere.set_resources("a", "r1-n0", 1, 1)
    with pytest.raises(PlanError, match="holds nothing on node r1-n0"):
        core.apply(elsewhere, 1.0)


def test_submit_validation(core):
    core.submit(job(1, job_id="dup"), 0.0)
    with pytest.raises(ValidationError, match="duplicate job id 'dup'"):
        core.submit(job(1, job_id="dup"), 0.0)
    with pytest.raises(ValidationError, match="unknown model 'nosuchnet'") as err:
        core.submit(job(1, model="nosuchnet"), 0.0)
    assert err.value.field == "model"
    with pytest.raises(ValidationError, match="asks for 17 GPUs, the cluster has 16"):
        core.submit(job(17), 0.0)
    with pytest.raises(ValidationError, match="no A100 GPUs"):
        core.submit(job(1, gpu_type="A100"), 0.0)
    assert list(core.records) == ["dup"]


def test_event_sequence_is_gap_free(core):
    for i in range(3):
        core.submit(job(1, job_id=f"x{i}"), float(i))
    core.schedule(3.0)
    assert core.records["x0"].state is JobState.RUNNING
    core.complete("x0", 4.0)
    assert [e.seq for e in core.log] == list(range(1, len(core.log) + 1))
