"""Elastic sizing (issue 12, deliverable 2): GPU ranges and logical workers on the job,
sizes, stages and per-GPU worker counts on the allocation, resizes that keep the
progress up to their on-demand checkpoint and pay the model's reconfigure cost
(EasyScale §3.2 "Adapting to elasticity"; Crius' N/2-N-2N Cells, §6)."""

from __future__ import annotations

import json
import math

import pytest
from factories import job
from policy_fakes import OneResize

from halyard.controlplane.store import SqliteStore
from halyard.datamodel import (
    Allocation,
    EventKind,
    JobSpec,
    JobState,
    NodeAllocation,
    Parallelism,
    StagePlan,
    ValidationError,
)
from halyard.emulator.elastic import DETERMINISM_D1_OVERHEAD
from halyard.policies import Plan, make_policy
from halyard.scheduling import PlanError, SchedulingCore, Simulator
from halyard.scheduling.records import JobRecord, allocation_from_dict, allocation_to_dict
from halyard.wire import allocation_from_pb, allocation_to_pb, spec_from_pb, spec_to_pb


def on(node: str, *gpus: int, workers: tuple[int, ...] = ()) -> Allocation:
    return Allocation((NodeAllocation(node, gpus, 3 * len(gpus), 62_500 * len(gpus), workers),))


# --- the data model -------------------------------------------------------------------


def test_crius_cells_and_easyscale_ests_are_expressible():
    """A Crius job of N_G = 4 spans Cells of 2, 4 and 8 GPUs; an EasyScale job of maxP = 8 ESTs."""
    crius = job(4, job_id="c", min_gpus=2, max_gpus=8)
    easy = job(2, job_id="e", min_gpus=1, max_gpus=8, logical_workers=8)
    assert crius.gpu_range == (2, 8) and crius.elastic
    assert easy.gpu_range == (1, 8) and easy.logical_workers == 8
    assert job(4).gpu_range == (4, 4) and not job(4).elastic
    cell = Allocation((NodeAllocation("r0-n0", (0, 1, 2, 3), 12, 250_000),
                       NodeAllocation("r0-n1", (0, 1, 2, 3), 12, 250_000)),
                      stages=(StagePlan(4, data=2, tensor=2), StagePlan(4, data=4)))
    assert cell.num_gpus == 8 and len(cell.stages) == 2
    three = on("r0-n0", 0, 1, 2, workers=(3, 3, 2))
    assert three.logical_workers == 8


@pytest.mark.parametrize(("kw", "field", "text"), [
    ({"num_gpus": 2, "min_gpus": 0}, "min_gpus", "between 1 and num_gpus"),
    ({"num_gpus": 2, "min_gpus": 3}, "min_gpus", "between 1 and num_gpus"),
    ({"num_gpus": 2, "max_gpus": 1}, "max_gpus", ">= num_gpus"),
    ({"num_gpus": 2, "logical_workers": -1}, "logical_workers", "between 0 and"),
    ({"num_gpus": 2, "max_gpus": 8, "logical_workers": 4}, "logical_workers", "cannot cover up to 8 GPUs"),
    ({"num_gpus": 2, "logical_workers": 4, "parallelism": Parallelism(data=1, tensor=2)}, "logical_workers",
     "data-parallel"),
])
def test_bad_ranges_name_the_field(kw, field, text):
    num_gpus = kw.pop("num_gpus")
    with pytest.raises(ValidationError, match=text) as err:
        job(num_gpus, job_id="x", **kw)
    assert err.value.field == field


@pytest.mark.parametrize(("build", "text"), [
    (lambda: StagePlan(4, data=2), "split data 2 x tensor 1"),
    (lambda: StagePlan(0), ">= 1"),
    (lambda: NodeAllocation("n", (0, 1), 0, 0, (2,)), "1 worker counts for 2 GPUs"),
    (lambda: NodeAllocation("n", (0, 1), 0, 0, (2, 0)), "at least one logical worker"),
    (lambda: Allocation((NodeAllocation("a", (0,), 0, 0, (2,)), NodeAllocation("b", (0,), 0, 0))),
     "every node or of none"),
])
def test_inconsistent_allocations_are_refused(build, text):
    with pytest.raises(ValueError, match=text):
        build()


def test_even_spread_of_logical_workers():
    a = Allocation((NodeAllocation("r0-n0", (0, 1), 6, 1), NodeAllocation("r0-n1", (2,), 3, 1)))
    spread = a.with_workers(8)
    assert [n.workers for n in spread.nodes] == [(3, 3), (2,)] and spread.logical_workers == 8
    with pytest.raises(ValueError, match="cannot cover"):
        a.with_workers(2)


# --- the core ---------------------------------------------------------------------------


@pytest.fixture
def core(small_cluster, perf) -> SchedulingCore:
    return SchedulingCore(small_cluster, make_policy("fifo"), perf)


def test_start_and_resize_anywhere_in_the_range(core):
    core.submit(job(2, job_id="e", min_gpus=1, max_gpus=4, logical_workers=4), 0.0)
    plan = Plan()
    plan.start("e", on("r0-n0", 0))  # below num_gpus, within the range
    core.apply(plan, 0.0)
    record = core.records["e"]
    assert record.num_gpus == 1
    assert record.allocation.nodes[0].workers == (4,)  # no counts given: all four ESTs on the one GPU
    grow = Plan()
    grow.resize("e", on("r0-n0", 0, 1, 2, workers=(2, 1, 1)))
    core.apply(grow, 10.0)
    assert record.allocation.nodes[0].workers == (2, 1, 1) and core.free.gpus[0] == 1
    assert list(core.log)[-1].kind is EventKind.RESIZED


@pytest.mark.parametrize(("build", "text"), [
    (lambda p: p.start("e", Allocation((NodeAllocation("r0-n0", (0, 1, 2, 3), 12, 1),
                                        NodeAllocation("r0-n1", (0,), 3, 1)))),
     r"Start\(e\): allocation has 5 GPUs; job e allows 1\.\.4 GPUs \(min_gpus\.\.max_gpus\)"),
    (lambda p: p.start("r", on("r0-n0", 0)), r"Start\(r\): allocation has 1 GPU; job r allows exactly 2 GPUs"),
    (lambda p: p.start("e", on("r0-n0", 0, 1, workers=(2, 1))),
     r"Start\(e\): allocation's per-GPU logical workers add up to 3; job e has 4 \(logical_workers\)"),
    (lambda p: p.start("e", Allocation((NodeAllocation("r0-n0", (0, 1), 6, 1),), stages=(StagePlan(1), StagePlan(1)))),
     r"Start\(e\): job e runs logical workers, which are data-parallel .* 2 pipeline stages"),
    (lambda p: p.resize("e", on("r0-n0", 0)), r"Resize\(e\): job is not running"),
    (lambda p: p.start("r", Allocation((NodeAllocation("r0-n0", (0, 1), 6, 1),), stages=(StagePlan(1),))),
     r"Start\(r\): allocation's pipeline stages hold 1 GPU; it has 2"),
])
def test_out_of_range_start_names_job_and_range(core, build, text):
    core.submit(job(2, job_id="e", min_gpus=1, max_gpus=4, logical_workers=4), 0.0)
    core.submit(job(2, job_id="r"), 0.0)
    plan = Plan()
    build(plan)
    with pytest.raises(PlanError, match=text):
        core.apply(plan, 0.0)
    assert all(r.state is JobState.PENDING for r in core.records.values())


def test_out_of_range_resize_names_job_and_range(core):
    core.submit(job(2, job_id="e", min_gpus=2, max_gpus=4), 0.0)
    start = Plan()
    start.start("e", on("r0-n0", 0, 1))
    core.apply(start, 0.0)
    shrink = Plan()
    shrink.resize("e", on("r0-n0", 0))
    with pytest.raises(PlanError, match=r"#0 Resize\(e\): allocation has 1 GPU; job e allows 2\.\.4 GPUs"):
        core.apply(shrink, 1.0)
    assert core.records["e"].num_gpus == 2


# --- the simulator: a resize mid-run --------------------------------------------------


def test_resize_keeps_progress_and_pays_the_reconfigure_cost(small_cluster, perf):
    spec = job(2, job_id="e", iterations=4_000, min_gpus=1, max_gpus=2, logical_workers=2)
    policy = OneResize("e", on("r0-n0", 0, 1), on("r0-n0", 0), when=lambda view, job: view.now == 100.0)
    sim = Simulator(small_cluster, policy, perf, round_s=100.0)
    sim.run([spec])
    record = sim.core.records["e"]
    assert record.state is JobState.COMPLETED

    two = perf.iteration_time(spec, on("r0-n0", 0, 1, workers=(1, 1)), small_cluster).total_s
    one = perf.iteration_time(spec, on("r0-n0", 0, workers=(2,)), small_cluster).total_s
    assert one > 1.9 * perf.ideal_iteration_time(spec, "V100") > two  # one GPU time-slices both ESTs
    cost = perf.reconfigure_cost_s(spec)
    assert cost == pytest.approx(perf.checkpoint_s(spec) + perf.restart_cost_s(spec)) and cost > 0
    # Until the resize the job ran at the two-GPU rate from t = 0 ...
    assert policy.resized == pytest.approx((100.0, 100.0 / two))
    # ... it keeps the whole iterations of its on-demand checkpoint, pays the cost, then runs at the one-GPU rate.
    kept = math.floor(100.0 / two)
    assert record.end_time == pytest.approx(100.0 + cost + (4_000 - kept) * one)
    restarted_from_scratch = 100.0 + cost + 4_000 * one
    assert record.end_time < restarted_from_scratch - 0.9 * kept * one
    assert record.restarts == 1 and record.preemptions == 0
    assert record.allocation.nodes[0].workers == (2,)
    kinds = [e.kind for e in sim.core.log]
    assert kinds == [EventKind.SUBMITTED, EventKind.STARTED, EventKind.RESIZED, EventKind.COMPLETED]


def test_time_slicing_of_logical_workers(small_cluster, perf):
    """EasyScale §3.2: a GPU with A ESTs runs A local steps per global step, the gradient copy of
    all but the last hidden behind the next EST's compute; one EST per GPU is plain data parallel."""
    spec = job(2, job_id="e", min_gpus=1, max_gpus=4, logical_workers=4)
    t = perf.ideal_iteration_time(spec, "V100")
    copy = perf.profile("resnet50").gradient_bytes / (perf.catalog.constants.gradient_copy_gbyte_s * 1e9)
    d1 = 1 + DETERMINISM_D1_OVERHEAD  # every EasyScale job trains with D1 determinism (§5.1.3)
    sliced = perf.iteration_time(spec, on("r0-n0", 0, workers=(4,)), small_cluster)
    assert sliced.total_s == pytest.approx((4 * t + 3 * max(0.0, copy - t)) * d1)
    uneven = perf.iteration_time(spec, on("r0-n0", 0, 1, 2, workers=(2, 1, 1)), small_cluster)
    flat = perf.iteration_time(spec, on("r0-n0", 0, 1, 2), small_cluster)
    # the 2-EST GPU sets the pace
    assert uneven.total_s == pytest.approx((2 * t + max(0.0, copy - t)) * d1 + flat.exposed_s)
    assert perf.iteration_time(spec, on("r0-n0", 0, 1, workers=(1, 1)), small_cluster) == \
        perf.iteration_time(spec, on("r0-n0", 0, 1), small_cluster)


def test_each_rank_learns_its_logical_workers():
    """The process agent's environment: ranks hold consecutive logical workers in allocation order."""
    from halyard.agent.process import _worker_environment
    from halyard.agent.worker import Worker

    a = Allocation((NodeAllocation("r0-n0", (0, 1), 6, 1, (2, 1)), NodeAllocation("r0-n1", (3,), 3, 1, (1,))))
    first, second = (_worker_environment(a, part) for part in a.nodes)
    assert first == {"HALYARD_NUM_GPUS": "3", "HALYARD_LOGICAL_WORKERS": "4", "HALYARD_RANK_WORKERS": "3",
                     "HALYARD_GPU_WORKERS": "2,1", "HALYARD_WORKER_OFFSET": "0"}
    assert (second["HALYARD_RANK_WORKERS"], second["HALYARD_WORKER_OFFSET"]) == ("1", "3")
    worker = Worker(env=second | {"HALYARD_RANK": "1", "HALYARD_WORLD_SIZE": "2"}, handle_sigterm=False)
    assert (worker.num_gpus, worker.logical_workers, worker.gpu_workers) == (3, 4, (1,))
    assert list(worker.logical_ranks) == [3]
    alone = Worker(env={}, handle_sigterm=False)  # outside Halyard: one worker, one GPU
    assert (alone.num_gpus, alone.logical_workers, list(alone.logical_ranks)) == (1, 1, [0])


# --- the wire and the store ---------------------------------------------------------------


def test_wire_round_trip_of_elastic_fields(small_cluster):
    spec = JobSpec(job_id="e", submit_time=0.0, model="resnet50", num_gpus=2, iterations=10, min_gpus=1,
                   max_gpus=4, logical_workers=6)
    back = spec_from_pb(spec_to_pb(spec), submit_time=0.0)
    assert back == spec and back.logical_workers == 6 and back.gpu_range == (1, 4)
    alloc = Allocation((NodeAllocation("r0-n0", (0, 2), 6, 125_000, (2, 2)),
                        NodeAllocation("r1-n1", (3,), 3, 62_500, (2,))),
                       time_shift_s=0.25, stages=(StagePlan(2, data=2), StagePlan(1)))
    msg = allocation_to_pb(alloc)
    assert list(msg.nodes[0].workers) == [2, 2] and msg.stages[0].data == 2
    wire = type(msg).FromString(msg.SerializeToString())
    assert allocation_from_pb(wire, small_cluster) == alloc
    # A bad count or stage from the wire names the field.
    msg.nodes[1].workers[:] = [0]
    with pytest.raises(ValidationError) as err:
        allocation_from_pb(msg, small_cluster)
    assert err.value.field == "allocation.nodes[1]"
    msg.nodes[1].workers[:] = [2]
    msg.stages[0].data = 3
    with pytest.raises(ValidationError) as err:
        allocation_from_pb(msg, small_cluster)
    assert err.value.field == "allocation.stages[0]"


def test_store_keeps_worker_counts_and_logical_workers(tmp_path, small_cluster, perf):
    alloc = on("r0-n0", 0, 1, workers=(3, 2))
    assert allocation_from_dict(json.loads(json.dumps(allocation_to_dict(alloc)))) == alloc
    path = tmp_path / "state.db"
    core = SchedulingCore(small_cluster, make_policy("fifo"), perf)
    core.submit(job(2, job_id="e", min_gpus=1, max_gpus=2, logical_workers=5), 0.0)
    plan = Plan()
    plan.start("e", alloc)
    core.apply(plan, 0.0)
    store = SqliteStore(path)
    store.save(*core.take_changes())
    store.close()
    state = SqliteStore(path).load()
    (record,) = state.records
    assert isinstance(record, JobRecord)
    assert record.spec.logical_workers == 5 and record.allocation == alloc
    again = SchedulingCore(small_cluster, make_policy("fifo"), perf)
    again.restore(state)
    assert again.records["e"].allocation.nodes[0].workers == (3, 2)


# --- the control plane and emulated agents: a resize across nodes -----------------------


async def test_resize_on_emulated_agents_follows_the_model(tmp_path):
    """Through the control plane: the node the job keeps gets a Reconfigure that restarts it as
    the next attempt, the node it joins a Launch; the job ends when the model says it does."""
    from worlds import World, train_spec

    across = Allocation((NodeAllocation("r0-n0", (0, 1), 6, 1000), NodeAllocation("r0-n1", (4, 5), 6, 1000)))
    policy = OneResize("e", on("r0-n0", 0, 1), across, when=lambda view, job: view.now >= 20.0)
    async with World("emulated", tmp_path, nodes=2, policy=policy, speedup=50.0, round_s=10.0) as w:
        await w.submit(train_spec("e", 400, gpus=2, min_gpus=2, max_gpus=4, logical_workers=4, command=[]))
        await w.wait_for(lambda: w.job("e").state is JobState.RUNNING and w.job("e").num_gpus == 4)
        record = w.job("e")
        assert record.attempt == 2

        def attempts() -> dict[str, int]:
            return {n: a.jobs["e"].attempt for n, a in w.agents.items() if "e" in a.jobs}

        await w.wait_for(lambda: attempts() == {"r0-n0": 2, "r0-n1": 2})
        assert w.agents["r0-n0"].jobs["e"].leader and not w.agents["r0-n1"].jobs["e"].leader
        await w.wait_for(lambda: record.state is JobState.COMPLETED)
        perf, cluster = w.cp.perf, w.cp.cluster
    when, done = policy.resized
    spec = record.spec
    step = perf.iteration_time(spec, record.allocation, cluster).total_s * w.cp.pacer.slowdown("e")
    expected = when + perf.reconfigure_cost_s(spec) + (400 - math.floor(done)) * step
    assert record.end_time == pytest.approx(expected, rel=1e-6)
    assert [n.workers for n in record.allocation.nodes] == [(1, 1), (1, 1)]
