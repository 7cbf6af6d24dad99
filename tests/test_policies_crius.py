"""Crius (papers/crius-cell-scheduling.txt): Cells (§4.2, §6.1), agile estimation (§5.1) and
Algorithm 1 (§6.1), each rule on hand-built views with the real performance model."""

from __future__ import annotations

from dataclasses import replace

import pytest
from factories import two_type_toml
from policy_fakes import FakeJob, on, view_of

from halyard.controlplane.store import SqliteStore
from halyard.datamodel import (
    Allocation,
    Cluster,
    EventKind,
    JobSpec,
    JobState,
    NodeAllocation,
    StagePlan,
    load_cluster,
    parse_cluster,
)
from halyard.emulator import PerformanceModel
from halyard.policies import PassState, make_policy
from halyard.policies.crius import (
    Cell,
    Crius,
    assembled_plans,
    cell_allocation,
    determine_stages,
    estimate_cell,
    estimation_accuracy,
    gpu_choices,
    job_cells,
    stage_choices,
    tuned_cell,
)
from halyard.policies.plan import Drop, Migrate, Preempt, Resize, Start
from halyard.scheduling import SchedulingCore, Simulator
from halyard.scheduling.metrics import job_metrics, summarize
from halyard.testing.cluster import small_cluster_toml

PM = PerformanceModel()
ONE_TYPE = parse_cluster(small_cluster_toml(2))  # 2 x 8 V100


def two_types() -> Cluster:
    return parse_cluster(two_type_toml(1, 8))  # r0-a40-0, r0-a10-1


def spec(job_id: str, n: int, *, elastic: bool = True, model: str = "bert-large", **kw) -> JobSpec:
    low, high = (max(1, n // 2), 2 * n) if elastic else (None, None)
    return JobSpec(job_id, 0.0, model, n, iterations=1000, min_gpus=low, max_gpus=high, **kw)


def view(cluster, running=(), pending=()):
    return view_of(cluster, 0.0, list(running), list(pending), perf=PM)


def by_kind(plan, kind):
    return {a.job_id: a.allocation for a in plan.actions if isinstance(a, kind)}


# ------------------------------------------------------------------ Cells
def test_initial_cells_take_half_n_n_and_2n_gpus_within_the_range():
    """§6.1: "Crius selects 3 available values (N_G/2, N_G, 2N_G)"; a fixed job has one."""
    assert gpu_choices(spec("a", 8)) == (4, 8, 16)
    assert gpu_choices(spec("a", 1)) == (1, 2)
    assert gpu_choices(spec("a", 8, elastic=False)) == (8,)
    assert gpu_choices(JobSpec("a", 0.0, "bert-large", 8, iterations=1, min_gpus=8, max_gpus=12)) == (8,)


def test_stage_choices_are_log_n_from_1_to_n():
    """§6.1: "log N_G choices ranging from 1 to N_G", capped by the layers to cut."""
    assert stage_choices(8, 24) == (1, 2, 4, 8)
    assert stage_choices(1, 24) == (1,)
    assert stage_choices(16, 2) == (1, 2)


def test_stage_determination_maps_gpus_by_flops_and_cuts_at_the_smallest_communication():
    """§4.2, Fig. 7: 8 GPUs over six operators by FLOPs share (OP1 1/16 -> 0.5 GPU, OP2 3/16 ->
    1.5 GPU), 4 stages cut at the 3 smallest inter-operator communications."""
    flops = [1, 3, 4, 2, 4, 2]  # sixteenths
    comm = [9, 1, 8, 2, 3]  # between op i and i + 1: the 3 smallest follow OP2, OP4 and OP5
    stages = determine_stages(flops, comm, 8, 4)
    # mapped GPUs 0.5, 1.5, 2, 1, 2, 1 -> stages {OP1, OP2} 2, {OP3, OP4} 3, {OP5} 2, {OP6} 1
    assert stages == ((0, 2, 2), (2, 4, 3), (4, 5, 2), (5, 6, 1))
    assert sum(g for _, _, g in stages) == 8


def test_equal_layers_cut_into_balanced_stages_and_impossible_splits_are_none():
    assert determine_stages([1.0] * 24, [1.0] * 23, 8, 4) == ((0, 6, 2), (6, 12, 2), (12, 18, 2), (18, 24, 2))
    assert determine_stages([1.0] * 4, [1.0] * 3, 2, 4) is None  # more stages than GPUs
    assert determine_stages([15, 1], [1], 2, 2) is None  # the small operator maps to no GPU


def test_assembly_makes_2_to_the_s_plans_from_dp_only_and_tp_only_stages():
    """§5.1, Fig. 9: each stage DP-only or TP-only, 2^S plans."""
    plans = assembled_plans([2, 2])
    assert len(plans) == 4
    assert {p[0] for p in plans} == {StagePlan(2, data=2), StagePlan(2, tensor=2)}
    assert len(assembled_plans([1, 2])) == 2  # a one-GPU stage is both
    assert len(assembled_plans([2, 2, 2])) == 8


def test_estimation_accuracy_is_one_minus_relative_error():
    """§8.2: 1 - |Te - Td| / Td."""
    assert estimation_accuracy(0.9, 1.0) == pytest.approx(0.9)
    assert estimation_accuracy(1.1, 1.0) == pytest.approx(0.9)
    assert estimation_accuracy(2.0, 2.0) == 1.0


def test_a_cell_is_estimated_by_its_best_assembled_plan_that_fits_memory():
    """§5.1: the best of the assembled plans is the Cell's estimate; OOM plans are dropped."""
    cluster = load_cluster("crius-64")
    v = view(cluster)
    job = spec("a", 4)
    est = estimate_cell(v, job, Cell("A40", 4, 2))
    assert est is not None and sum(s.gpus for s in est.plan) == 4 and len(est.plan) == 2
    base = cell_allocation(v, "A40", 4)
    times = [PM.job_timing(job, replace(base, stages=p), cluster).iteration.total_s
             for p in assembled_plans([2, 2]) if PM.fits_plan(job, replace(base, stages=p), cluster)]
    assert est.iteration_s == pytest.approx(min(times))
    big = spec("b", 1, batch_size=64)  # BERT-large at 64 per GPU: about 44 GB on one GPU
    assert estimate_cell(v, big, Cell("A10", 1, 1)) is None  # 24 GB: out of memory
    assert estimate_cell(v, big, Cell("A40", 1, 1)) is not None  # 48 GB
    assert ("A10", 1) not in job_cells(v, big) and ("A40", 1) in job_cells(v, big)


# ------------------------------------------------------------------ Algorithm 1
def test_arrival_takes_the_cell_of_highest_throughput():
    """BestPerf (line 18): on an idle heterogeneous cluster an elastic job gets 2 N_G GPUs of the
    faster type, with its Cell's stage plan."""
    cluster = two_types()
    plan = Crius().schedule(view(cluster, pending=[FakeJob(spec("a", 4))]), PassState())
    (alloc,) = by_kind(plan, Start).values()
    assert alloc.num_gpus == 8 and {cluster.node(p.node).gpu_type for p in alloc.nodes} == {"A40"}
    assert sum(s.gpus for s in alloc.stages) == 8


def test_scale_resource_downscales_a_running_job_for_a_new_one():
    """§6.1 "Scaling training jobs": with too few GPUs, a running job is downscaled and the new
    job starts in what it frees; the resize comes first so the plan applies in order."""
    big = FakeJob(spec("big", 8), allocation=on(ONE_TYPE, ("r0-n0", 8), ("r0-n1", 8)))
    new = FakeJob(spec("new", 8, elastic=False), arrival_seq=1)
    plan = Crius().schedule(view(ONE_TYPE, [big], [new]), PassState())
    assert [type(a) for a in plan.actions] == [Resize, Start]
    resized, started = by_kind(plan, Resize)["big"], by_kind(plan, Start)["new"]
    assert resized.num_gpus == 8 and started.num_gpus == 8
    assert not {(p.node, g) for p in resized.nodes for g in p.gpus} & {(p.node, g) for p in started.nodes
                                                                        for g in p.gpus}


@pytest.mark.parametrize(("depth", "starts"), [(3, False), (4, True)])
def test_search_depth_bounds_the_scaling_operations(depth, starts):
    """§6.1: search depth is the maximum job scalings for one choice. Four jobs of 4 GPUs each
    free 2 by halving; a fixed 8-GPU job needs four of them."""
    running = [FakeJob(spec(f"r{i}", 2), arrival_seq=i,
                       allocation=_gpus(f"r0-n{i // 2}", range(4 * (i % 2), 4 * (i % 2) + 4))) for i in range(4)]
    new = FakeJob(spec("new", 8, elastic=False), arrival_seq=9)
    plan = Crius(search_depth=depth).schedule(view(ONE_TYPE, running, [new]), PassState())
    assert ("new" in by_kind(plan, Start)) is starts
    if not starts:
        assert not plan.actions
        assert plan.unplaced["new"].reason == "needs 8 GPUs of one type; no Cell fits with up to 3 jobs scaled (0 free)"
    else:
        assert len(by_kind(plan, Resize)) == 4


def _gpus(node: str, ids) -> Allocation:
    n = ONE_TYPE.node(node)
    ids = tuple(ids)
    return Allocation((NodeAllocation(node, ids, n.proportional_cpus(len(ids)), n.proportional_memory_mb(len(ids))),))


def test_scale_resource_moves_a_running_job_to_another_gpu_type():
    """§6.1: "or moves them to another type of GPU with sufficient resources"."""
    cluster = two_types()
    running = FakeJob(spec("mover", 8, elastic=False), allocation=on(cluster, ("r0-a40-0", 8)))
    new = FakeJob(spec("a40-only", 8, elastic=False, gpu_type="A40"), arrival_seq=1)
    plan = Crius().schedule(view(cluster, [running], [new]), PassState())
    assert [type(a) for a in plan.actions] == [Migrate, Start]
    assert {p.node for p in by_kind(plan, Migrate)["mover"].nodes} == {"r0-a10-1"}
    assert {p.node for p in by_kind(plan, Start)["a40-only"].nodes} == {"r0-a40-0"}


def test_opportunistic_jobs_are_suspended_once_the_blocked_job_fits():
    """§6.1 "Opportunistic execution": a job that cannot start blocks; a later job that fits runs
    opportunistically and is suspended as soon as the blocked job's minimum fits without it."""
    crius = Crius()
    hog = FakeJob(spec("hog", 8, elastic=False), allocation=on(ONE_TYPE, ("r0-n0", 8)))
    blocked = FakeJob(spec("blocked", 16, elastic=False), arrival_seq=1)
    small = FakeJob(spec("small", 8, elastic=False), arrival_seq=2)
    v1, state = view(ONE_TYPE, [hog], [blocked, small]), PassState()
    plan = crius.schedule(v1, state)
    assert list(by_kind(plan, Start)) == ["small"] and "blocked" in plan.unplaced
    crius.on_applied(v1, plan, state)
    small.allocation = by_kind(plan, Start)["small"]  # hog finishes; small runs
    plan = crius.schedule(view(ONE_TYPE, [small], [blocked]), PassState())
    assert [(type(a), a.job_id) for a in plan.actions] == [(Preempt, "small"), (Start, "blocked")]
    assert plan.actions[0].suspend  # a suspension (§6.1), not a preemption


def test_a_suspension_is_its_own_event_and_count_not_a_preemption():
    """§6.1 on a small Crius run: the opportunistic job is logged SUSPENDED (then REQUEUED) and
    counted in ``suspensions``, with no preemption counted anywhere."""
    jobs = [JobSpec("hog", 0.0, "bert-large", 8, iterations=400),
            JobSpec("blocked", 1.0, "bert-large", 16, iterations=50),
            JobSpec("small", 2.0, "bert-large", 8, iterations=4000)]
    sim = Simulator(ONE_TYPE, Crius(), PM)
    sim.run(jobs)
    kinds = [(e.job_id, e.kind) for e in sim.core.log if e.kind in (EventKind.SUSPENDED, EventKind.PREEMPTED)]
    assert kinds == [("small", EventKind.SUSPENDED)]
    suspended = next(e for e in sim.core.log if e.kind is EventKind.SUSPENDED)
    assert suspended.state is JobState.PREEMPTED and suspended.detail == "suspended by policy"
    after = [e.kind for e in sim.core.log if e.job_id == "small" and e.seq > suspended.seq]
    assert after[:2] == [EventKind.REQUEUED, EventKind.STARTED] and after[-1] is EventKind.COMPLETED
    summary = summarize(sim.core, policy="crius", trace_jobs=3, rejected=0, wall_s=1.0)
    assert (summary["suspensions"], summary["preemptions"]) == (1, 0)
    per_job = {m["job_id"]: m for m in job_metrics(sim.core)}
    assert (per_job["small"]["suspensions"], per_job["small"]["preemptions"]) == (1, 0)
    assert sim.core.records["small"].restarts == 1  # it resumed from its checkpoint
    # Not a stored column: a core restored from the store recounts it from the SUSPENDED event.
    store = SqliteStore(":memory:")
    store.save(*sim.core.take_changes())
    restored = SchedulingCore(ONE_TYPE, Crius(), PM)
    restored.restore(store.load())
    assert (restored.records["small"].suspensions, restored.records["small"].preemptions) == (1, 0)


def test_a_job_that_was_not_opportunistic_is_not_suspended():
    running = FakeJob(spec("first", 8, elastic=False), allocation=on(ONE_TYPE, ("r0-n0", 8)))
    blocked = FakeJob(spec("blocked", 16, elastic=False), arrival_seq=1)
    plan = Crius().schedule(view(ONE_TYPE, [running], [blocked]), PassState())
    assert not plan.actions and "blocked" in plan.unplaced


@pytest.mark.parametrize("upscale", [True, False])
def test_released_gpus_go_to_running_jobs_when_nothing_is_pending(upscale):
    """Algorithm 1 line 12: "extra scheduling for utilizing released resource"."""
    running = FakeJob(spec("a", 4), allocation=on(ONE_TYPE, ("r0-n0", 4)))
    crius = Crius(upscale=upscale)
    assert crius.acts_without_pending is upscale
    plan = crius.schedule(view(ONE_TYPE, [running]), PassState())
    if upscale:
        assert by_kind(plan, Resize)["a"].num_gpus == 8
    else:
        assert not plan.actions


@pytest.mark.parametrize("extra_with_pending", [False, True])
def test_line_12_with_a_job_pending_only_under_the_pseudocode_reading(extra_with_pending):
    """§6.1's text runs line 12 only "if there are no pending jobs" (the default); its pseudocode runs
    it after line 10 unconditionally (``extra_with_pending``). A 16-GPU job no Cell of which fits
    waits; the 4-GPU job beside it grows into the idle GPUs only under the pseudocode's reading."""
    running = FakeJob(spec("a", 4), allocation=on(ONE_TYPE, ("r0-n0", 4)))
    blocked = FakeJob(spec("blocked", 16, elastic=False), arrival_seq=1)
    plan = Crius(extra_with_pending=extra_with_pending).schedule(view(ONE_TYPE, [running], [blocked]), PassState())
    assert "blocked" in plan.unplaced
    if extra_with_pending:
        assert by_kind(plan, Resize)["a"].num_gpus == 8
    else:
        assert not plan.actions


def test_presets():
    assert make_policy("crius").stages() == [("policy", "crius"), ("search-depth", "3")]
    fcfs, fifo = make_policy("fcfs"), make_policy("fifo")
    assert fcfs.stages() == fifo.stages()


def test_estimation_accuracy_against_the_tuned_plan_of_the_cell():
    """§8.2: Te (best assembled plan) against Td (the best plan of the Cell's whole DP x TP space,
    what the tuner of §5.2 finds): Te >= Td, equal when a DP-only or TP-only plan is optimal; a
    hybrid optimum (GNMT on 8 A100 as one stage: DP x TP inside a node) lowers the accuracy."""
    cluster = load_cluster("crius-1280")
    v = view(cluster)
    one = spec("a", 1)
    assert estimate_cell(v, one, Cell("A40", 1, 1)).iteration_s == tuned_cell(v, one, Cell("A40", 1, 1)).iteration_s
    gnmt = spec("g", 8, model="gnmt")
    te, td = estimate_cell(v, gnmt, Cell("A100", 8, 1)), tuned_cell(v, gnmt, Cell("A100", 8, 1))
    assert te.iteration_s > td.iteration_s
    assert td.plan[0].data > 1 and td.plan[0].tensor > 1
    assert 0.5 < estimation_accuracy(te.iteration_s, td.iteration_s) < 0.9


# ------------------------------------------------------------------ Crius-DDL (§8.5)
def test_ddl_drops_early_a_job_that_cannot_meet_its_deadline():
    """§8.5: "Crius early drops those jobs that cannot be completed before their deadlines"."""
    v = view(ONE_TYPE)
    fastest = min(e.iteration_s for e in job_cells(v, spec("x", 8)).values())
    late = FakeJob(spec("late", 8, deadline=1000 * fastest * 0.9))  # 1,000 iterations left
    ok = FakeJob(spec("ok", 8, deadline=1000 * fastest * 1.1), arrival_seq=1)
    plan = Crius(deadlines=True).schedule(view(ONE_TYPE, pending=[late, ok]), PassState())
    assert [(type(a), a.job_id) for a in plan.actions] == [(Drop, "late"), (Start, "ok")]
    assert by_kind(plan, Start)["ok"].num_gpus == 16  # the only Cell that meets its deadline


@pytest.mark.parametrize("deadlines", [False, True])
def test_ddl_never_scales_a_running_job_past_its_deadline(deadlines):
    """§8.5 "strict deadline guarantees for each scheduled job": Crius would halve a running job
    for a new one; Crius-DDL does not when the halved Cell would miss the running job's deadline."""
    v = view(ONE_TYPE)
    t16 = job_cells(v, spec("x", 8))[("V100", 16)].iteration_s
    running = FakeJob(spec("running", 8, deadline=1000 * t16 * 1.2), allocation=on(ONE_TYPE, ("r0-n0", 8),
                                                                                       ("r0-n1", 8)))
    new = FakeJob(spec("new", 8, elastic=False), arrival_seq=1)
    plan = Crius(deadlines=deadlines).schedule(view(ONE_TYPE, [running], [new]), PassState())
    assert ("new" in by_kind(plan, Start)) is not deadlines
    assert ("running" in by_kind(plan, Resize)) is not deadlines


def test_a_dropped_job_is_cancelled_with_the_reason_and_counts_against_the_deadline_ratio():
    from halyard.policies import Plan
    from halyard.scheduling import SchedulingCore, summarize
    from halyard.scheduling.core import PlanError

    core = SchedulingCore(ONE_TYPE, make_policy("fifo"), PM)
    core.submit(spec("d", 8, deadline=10.0), 0.0)
    core.submit(spec("r", 8), 0.0)
    core.schedule(0.0)  # both start under FIFO
    drop_running = Plan()
    drop_running.drop("r", "test")
    with pytest.raises(PlanError, match="only a pending job can be dropped"):
        core.apply(drop_running, 1.0)
    core.submit(spec("p", 8, deadline=20.0), 1.0)
    plan = Plan()
    plan.drop("p", "cannot finish before its deadline")
    core.apply(plan, 2.0)
    assert core.records["p"].state.value == "CANCELLED"
    assert [e.detail for e in core.log if e.job_id == "p"][-1] == "dropped: cannot finish before its deadline"
    s = summarize(core, policy="x", trace_jobs=3, rejected=0, wall_s=1.0)
    assert (s["deadline_jobs"], s["dropped"], s["deadline_met_ratio"]) == (2, 1, 0.0)


def test_crius_na_keeps_the_requested_gpu_count():
    """§8.6 Crius-NA ("adaptivity scaling": changing the allocated number of GPUs, after Sia): a new
    job takes only Cells of its N_G GPUs, and a running job is not downscaled for another; the type
    may still change (the move of the test above)."""
    cluster = two_types()
    plan = Crius(adaptivity=False).schedule(view(cluster, pending=[FakeJob(spec("a", 4))]), PassState())
    assert by_kind(plan, Start)["a"].num_gpus == 4  # Crius takes 8 (test_arrival_takes_...)
    big = FakeJob(spec("big", 8), allocation=on(ONE_TYPE, ("r0-n0", 8)))
    new = FakeJob(spec("new", 12, elastic=False), arrival_seq=1)  # 8 free: Crius halves "big" for it
    assert by_kind(Crius().schedule(view(ONE_TYPE, [big], [new]), PassState()), Resize)["big"].num_gpus == 4
    assert not Crius(adaptivity=False).schedule(view(ONE_TYPE, [big], [new]), PassState()).actions
    running = FakeJob(spec("mover", 8, elastic=False), allocation=on(cluster, ("r0-a40-0", 8)))
    new = FakeJob(spec("a40-only", 8, elastic=False, gpu_type="A40"), arrival_seq=1)
    moved = Crius(adaptivity=False).schedule(view(cluster, [running], [new]), PassState())
    assert [type(a) for a in moved.actions] == [Migrate, Start]


def test_crius_nh_never_moves_a_running_job_to_another_type():
    """§8.6 Crius-NH ("heterogeneity scaling": changing the allocated GPU type): the A40-only job
    that Crius starts by moving the running job to the A10s waits; downscaling on the same type stays."""
    cluster = two_types()
    running = FakeJob(spec("mover", 8, elastic=False), allocation=on(cluster, ("r0-a40-0", 8)))
    new = FakeJob(spec("a40-only", 8, elastic=False, gpu_type="A40"), arrival_seq=1)
    plan = Crius(heterogeneity=False).schedule(view(cluster, [running], [new]), PassState())
    assert not plan.actions and "a40-only" in plan.unplaced
    big = FakeJob(spec("big", 8), allocation=on(ONE_TYPE, ("r0-n0", 8), ("r0-n1", 8)))
    new = FakeJob(spec("new", 8, elastic=False), arrival_seq=1)
    plan = Crius(heterogeneity=False).schedule(view(ONE_TYPE, [big], [new]), PassState())
    assert [type(a) for a in plan.actions] == [Resize, Start]
    assert [make_policy(p).name for p in ("crius-na", "crius-nh")] == ["crius-na", "crius-nh"]


def test_cells_span_every_type_a_plan_fits_even_where_data_parallelism_does_not():
    """§4.2 / Fig. 3 (review finding): bert-2.6b's data-parallel worker does not fit an A100 (state
    plus activations), but tensor/pipeline Cells do, so its Cells include A100s, each a plan that
    fits; a model no plan of its GPUs fits gets no Cell there."""
    cluster = load_cluster("crius-1280")
    big = spec("j", 8, model="bert-2.6b")
    v = view(cluster)
    assert not PM.fits_memory(big, "A100")
    cells = job_cells(v, big)
    a100 = {g: e for (t, g), e in cells.items() if t == "A100"}
    assert set(a100) == {4, 8, 16}
    for e in a100.values():
        alloc = Allocation(cell_allocation(v, "A100", e.cell.gpus).nodes, stages=e.plan)
        assert PM.fits_plan(big, alloc, cluster)
    huge = spec("h", 2, model="moe-27b")  # 432 GB of state: 1-4 GPUs of no type hold it
    assert job_cells(v, huge) == {}
