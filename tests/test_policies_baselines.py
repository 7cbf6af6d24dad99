"""Dally's baselines: Tiresias (discretised 2D-LAS, starvation promotion, skew consolidation)
and Gandiva (network-agnostic placement, migration to tighter placements).

Small cluster: 2 racks x 2 machines x 4 GPUs (r0-n0, r0-n1 | r1-n0, r1-n1).
"""

from __future__ import annotations

import random

import pytest
from factories import job
from policy_fakes import FakeJob, on, view_of

from halyard.datamodel import JobState
from halyard.policies import (
    FreeResources,
    Migrate,
    PassState,
    Plan,
    Preempt,
    StagedPolicy,
    Start,
    Unplaced,
    WaitCode,
    make_policy,
)
from halyard.policies.gandiva import ConsolidatingMigration, NetworkAgnostic
from halyard.policies.ordering import StarvationGuard
from halyard.policies.tiresias import SkewConsolidation, TwoDimensionalLas, high_skew
from halyard.scheduling import Simulator


def fake(job_id: str, gpus: int, *, model: str = "resnet50", seq: int = 0, submit: float = 0.0, **kw) -> FakeJob:
    return FakeJob(job(gpus, job_id=job_id, model=model, submit=submit), arrival_seq=seq, **kw)


# --------------------------------------------------------------------------- Tiresias 2D-LAS


def test_demotion_at_each_threshold():
    """Tiresias §3 (2D-LAS discretised): queue k+1 once attained GPU-seconds reach thresholds[k]."""
    las = TwoDimensionalLas(thresholds=(100.0, 1000.0))
    assert las.queue_of(fake("a", 2, gpu_s=99.9), 0.0) == 0
    assert las.queue_of(fake("b", 2, gpu_s=100.0), 0.0) == 1
    assert las.queue_of(fake("c", 2, gpu_s=999.0), 0.0) == 1
    assert las.queue_of(fake("d", 2, gpu_s=5000.0), 0.0) == 2


def test_default_is_the_reference_two_queues():
    """REFERENCE-NUMBERS: two queues, the first up to 3,250 GPU-seconds."""
    las = TwoDimensionalLas()
    assert las.thresholds == (3250.0,)
    assert las.queue_of(fake("a", 8, gpu_s=3249.0), 0.0) == 0
    assert las.queue_of(fake("b", 8, gpu_s=3250.0), 0.0) == 1


def test_order_is_queue_then_fifo(small_cluster):
    las = TwoDimensionalLas(thresholds=(100.0,))
    jobs = [fake("old-demoted", 1, seq=0, submit=0.0, gpu_s=500.0),
            fake("late", 1, seq=2, submit=20.0, gpu_s=0.0),
            fake("early", 1, seq=1, submit=10.0, gpu_s=50.0)]
    key = las.key(view_of(small_cluster, 30.0, [], []), PassState())
    assert [j.job_id for j in sorted(jobs, key=key)] == ["early", "late", "old-demoted"]


def test_starvation_promotion():
    """A waiting job whose wait reaches knob x executed time returns to queue 0; its service for
    demotion then counts from the promotion (REFERENCE-NUMBERS: promotion when pending time >=
    knob x executed time)."""
    las = TwoDimensionalLas(thresholds=(100.0,), starvation_knob=2.0)
    j = fake("j", 1, gpu_s=300.0, run_s=300.0, pending_since=1000.0)
    assert applied_pass(las, j, 1000.0) == 1
    assert applied_pass(las, j, 1599.0) == 1       # waited 599 < 2 x 300
    assert applied_pass(las, j, 1600.0) == 0       # waited 600: promoted
    j.gpu_s = 399.0
    assert applied_pass(las, j, 1700.0) == 0       # 99 GPU-s since the promotion
    j.gpu_s = 400.0
    assert applied_pass(las, j, 1800.0) == 1       # 100 since the promotion: demoted again
    assert TwoDimensionalLas(thresholds=(100.0,)).queue_of(j, 1e9) == 1  # off by default


def applied_pass(las: TwoDimensionalLas, job, now: float) -> int:
    """The job's queue in a pass whose plan the core applied (the ordering keeps it then)."""
    state = PassState()
    queue = las.queue_of(job, now, state)
    las.on_applied(None, Plan(), state)
    return queue


def test_queues_are_kept_only_from_applied_passes():
    """Learn only from applied plans: a promotion worked out in a rejected pass is forgotten."""
    las = TwoDimensionalLas(thresholds=(100.0,), starvation_knob=2.0)
    j = fake("j", 1, gpu_s=300.0, run_s=300.0, pending_since=1000.0)
    assert applied_pass(las, j, 1000.0) == 1
    rejected = PassState()
    assert las.queue_of(j, 1600.0, rejected) == 0     # promoted in this pass ...
    las.on_rejected(None, Plan(), rejected)
    j.gpu_s = 450.0                                   # ... which the core refused: the baseline stays 0
    assert applied_pass(las, j, 1601.0) == 0          # promoted again at 1601 (baseline 450) ...
    j.gpu_s = 549.0
    assert applied_pass(las, j, 1700.0) == 0          # ... so 99 GPU-s later it is still in queue 0


def test_running_jobs_are_not_promoted(small_cluster):
    las = TwoDimensionalLas(thresholds=(100.0,), starvation_knob=0.5)
    running = fake("r", 1, gpu_s=300.0, run_s=300.0, allocation=on(small_cluster, ("r0-n0", 1)))
    assert las.queue_of(running, 1e6) == 1


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="increasing"):
        TwoDimensionalLas(thresholds=(100.0, 50.0))
    with pytest.raises(ValueError, match="knob"):
        TwoDimensionalLas(starvation_knob=0.0)


def test_new_job_preempts_a_demoted_one(small_cluster, perf):
    """Preemptive LAS: a queue-0 arrival takes the GPUs of a running queue-1 job."""
    policy = StagedPolicy("t", TwoDimensionalLas(thresholds=(100.0,)), placement=SkewConsolidation())
    hog = fake("hog", 16, seq=0, gpu_s=1e6, run_s=1e5, done=1.0,
               allocation=on(small_cluster, ("r0-n0", 4), ("r0-n1", 4), ("r1-n0", 4), ("r1-n1", 4)))
    new = fake("new", 4, seq=1, submit=5.0)
    plan = policy.schedule(view_of(small_cluster, 10.0, [hog], [new]), PassState())
    assert [type(a) for a in plan.actions] == [Preempt, Start]


# --------------------------------------------------------------------------- Tiresias skew


def test_skew_classification():
    """Tiresias' measured skews (VGG 0.72-0.77, AlexNet 0.61 high; ResNets <= 0.11 low) and Dally
    Table 1's labels for MobileNetV3 (high), ResNet18 and BERT-large (low)."""
    assert [high_skew(m) for m in ("vgg11", "alexnet", "mobilenetv3")] == [True, True, True]
    assert [high_skew(m) for m in ("resnet18", "resnet50", "bert-large", "gnmt")] == [False] * 4


def test_high_skew_is_consolidated_strictly(small_cluster):
    """High skew: the fewest machines or nothing; low skew: any free GPUs (Dally §1, §3.2)."""
    free = FreeResources(small_cluster)
    for part in (on(small_cluster, ("r0-n0", 2)), on(small_cluster, ("r0-n1", 2)),
                 on(small_cluster, ("r1-n0", 2)), on(small_cluster, ("r1-n1", 2))):
        free.take(part)
    view = view_of(small_cluster, 0.0, [], [])
    placement = SkewConsolidation()
    held_back = placement.place(view, fake("v", 4, model="vgg11"), 4, free, PassState())
    assert isinstance(held_back, Unplaced) and held_back.code is WaitCode.WAITING_BY_POLICY
    assert held_back.reason == ("high-skew model vgg11 is consolidated strictly: needs 4 GPUs on 1 machine; "
                                "the tightest free placement spans 2")
    spread = placement.place(view, fake("r", 4, model="resnet50"), 4, free, PassState())
    assert spread is not None and spread.node_names == ("r0-n0", "r0-n1")
    # 6 GPUs of a high-skew model: two machines is the fewest, so it is placed
    free2 = FreeResources(small_cluster)
    assert len(placement.place(view, fake("v6", 6, model="vgg11"), 6, free2, PassState()).nodes) == 2


def test_a_remembered_refusal_is_what_placing_again_answers(small_cluster):
    """SkewConsolidation remembers refusals per usable-resource state (issue 19): over a random walk
    of takes, gives and CPU/memory changes, one long-lived instance answers every placement exactly
    as a fresh one does, and a refusal asked again in the same state is the remembered object."""
    rng = random.Random(7)
    free = FreeResources(small_cluster)
    view = view_of(small_cluster, 0.0, [], [])
    kept = SkewConsolidation()
    held: list = []
    cpus_held: list[tuple[int, int]] = []  # CPUs taken without GPUs: free GPUs that are not usable
    repeats = 0
    for step in range(600):
        op = rng.random()
        if op < 0.35 and held:
            free.give(held.pop(rng.randrange(len(held))))
        elif op < 0.4 and cpus_held:
            node, cpus = cpus_held.pop()
            free.adjust(node, -cpus, 0)
        elif op < 0.45:
            node = rng.randrange(len(small_cluster.nodes))
            cpus = rng.randint(0, int(free.cpus[node]))
            free.adjust(node, cpus, 0)
            cpus_held.append((node, cpus))
        job = fake(f"j{step}", rng.choice((2, 4, 6, 8)), model=rng.choice(("vgg11", "alexnet", "resnet50")))
        fresh = SkewConsolidation().place(view, job, job.spec.num_gpus, free, PassState())
        first = kept.place(view, job, job.spec.num_gpus, free, PassState())
        assert first == fresh
        if isinstance(first, Unplaced):
            again = kept.place(view, job, job.spec.num_gpus, free, PassState())
            assert again is first
            repeats += 1
        elif op >= 0.45:
            free.take(first)
            held.append(first)
    assert repeats > 50  # the walk refuses often enough to exercise the memory


# --------------------------------------------------------------------------- Gandiva


def test_network_agnostic_placement_takes_the_first_free_gpus(small_cluster):
    """Gandiva is network-agnostic (Dally §5.1.3): 2 free on r0-n0 and 4 on r0-n1 -> a 4-GPU job
    takes 2 + 2, though r0-n1 alone would hold it."""
    free = FreeResources(small_cluster)
    free.take(on(small_cluster, ("r0-n0", 2)))
    a = NetworkAgnostic().place(view_of(small_cluster, 0.0, [], []), fake("g", 4), 4, free, PassState())
    assert [(p.node, len(p.gpus)) for p in a.nodes] == [("r0-n0", 2), ("r0-n1", 2)]


def test_migrates_to_a_tighter_placement_when_gpus_free_up(small_cluster):
    """'migrating jobs to more favorable GPU consolidation whenever resources become available'."""
    spread = fake("spread", 4, seq=0, allocation=on(small_cluster, ("r0-n0", 2), ("r1-n0", 2)))
    tight = fake("tight", 2, seq=1, allocation=on(small_cluster, ("r0-n1", 2)))
    policy = StagedPolicy("g", make_policy("fifo").ordering, placement=NetworkAgnostic(),
                          adjusters=(ConsolidatingMigration(),))
    assert policy.acts_without_pending
    plan = policy.schedule(view_of(small_cluster, 0.0, [spread, tight], []), PassState())
    (move,) = plan.actions
    assert isinstance(move, Migrate) and move.job_id == "spread"
    assert move.allocation.node_names == ("r0-n0",)  # its own 2 GPUs there plus the 2 free ones


def test_no_migration_without_improvement(small_cluster):
    tight = fake("tight", 4, allocation=on(small_cluster, ("r0-n0", 4)))
    rack = fake("rack", 8, allocation=on(small_cluster, ("r1-n0", 4), ("r1-n1", 4)))
    policy = make_policy("gandiva")
    assert not policy.schedule(view_of(small_cluster, 0.0, [tight, rack], []), PassState())


def test_pending_jobs_are_placed_before_migrations(small_cluster):
    spread = fake("spread", 4, seq=0, allocation=on(small_cluster, ("r0-n0", 2), ("r1-n0", 2)))
    waiting = fake("w", 4, seq=1)
    plan = make_policy("gandiva").schedule(view_of(small_cluster, 0.0, [spread], [waiting]), PassState())
    assert isinstance(plan.actions[0], Start) and plan.actions[0].job_id == "w"
    # w took the first free GPUs (2 on r0-n0, 2 on r0-n1); spread then moves onto one machine
    assert plan.actions[1] == Migrate("spread", on(small_cluster, ("r1-n0", 4)))


# --------------------------------------------------------------------------- end to end


@pytest.mark.parametrize("name", ["tiresias", "gandiva"])
def test_every_job_finishes(small_cluster, perf, name):
    jobs = [job(g, submit=10.0 * i, iterations=200 + 50 * i, model=m)
            for i, (g, m) in enumerate([(4, "vgg11"), (2, "alexnet"), (6, "resnet18"), (1, "resnet50"),
                                        (8, "mobilenetv3"), (3, "bert-large"), (4, "vgg11"), (2, "resnet18")])]
    run = Simulator(small_cluster, make_policy(name), perf, round_s=60.0).run(jobs)
    assert all(r.state is JobState.COMPLETED for r in run.core.records.values())


def test_2d_las_without_promotion_keys_by_attained_service_alone(small_cluster):
    """Tiresias §3 (2D-LAS discretised): queue k+1 once attained GPU-seconds reach thresholds[k];
    without starvation promotion the key is that count (bisect), agreeing with queue_of at and
    around each threshold, and nothing is kept between passes."""
    from halyard.policies import PassState

    las = TwoDimensionalLas(thresholds=(100.0, 1000.0))
    key = las.key(view_of(small_cluster, 0.0, [], []), PassState())
    for service, queue in ((0.0, 0), (99.9, 0), (100.0, 1), (999.0, 1), (1000.0, 2), (5000.0, 2)):
        j = FakeJob(job(2, job_id=f"s{service}"), gpu_s=service)
        assert key(j)[0] == queue == las.queue_of(j, 0.0)
    assert not las.remembers and TwoDimensionalLas(starvation_knob=2.0).remembers


def test_starvation_guard_promotes_in_its_own_step_and_keeps_only_applied_promotions(small_cluster):
    """+starvation-guard (policies/ordering.py): a job pending longer than the threshold ranks first, for
    good (sticky, as the public simulator's job_priority), but the promotion is learned like every other
    stage state, from applied plans only: a refused pass promotes nobody, and ended jobs are forgotten."""
    hour = 3600.0
    policy = make_policy("srtf+starvation-guard")
    guard = policy.ordering.guard
    starved = FakeJob(job(16, job_id="starved", iterations=10_000), arrival_seq=0, pending_since=0.0)
    short = FakeJob(job(16, job_id="short", iterations=10), arrival_seq=1, pending_since=999 * hour)
    view = view_of(small_cluster, 1000.5 * hour, [], [starved, short])

    state = PassState()
    plan = policy.schedule(view, state)
    assert [a.job_id for a in plan.actions] == ["starved"]  # ahead of the far shorter job
    policy.on_rejected(view, plan, state)
    assert guard.promoted == frozenset()  # the refused pass taught nothing (the old key promoted as it sorted)

    state = PassState()
    plan = policy.schedule(view, state)
    policy.on_applied(view, plan, state)
    assert guard.promoted == {"starved"}
    # Preempted later, it has waited only a moment, yet it still goes first (sticky) ...
    again = FakeJob(starved.spec, arrival_seq=0, pending_since=1001 * hour)
    later = view_of(small_cluster, 1001 * hour, [], [again, short])
    assert [a.job_id for a in policy.schedule(later, PassState()).actions] == ["starved"]
    # ... until it ends: an applied pass without it forgets it
    state = PassState()
    gone = view_of(small_cluster, 1002 * hour, [], [short])
    policy.on_applied(gone, policy.schedule(gone, state), state)
    assert guard.promoted == frozenset()


def test_starvation_guard_scans_the_queue_only_once_its_earliest_job_may_have_starved(small_cluster):
    """The guard keeps, per queue object, the earliest time a job of it waits from (issue 38: a loaded
    Synergy queue holds ~1,300 jobs, the guard's 1,000 h are rarely reached): before that job has waited
    the threshold nobody is promoted without a scan; a job that joins the same queue later cannot have
    waited longer; at the threshold the scan runs and promotes it, as a fresh scan of the queue does."""
    hour = 3600.0
    guard = StarvationGuard(1000 * hour)
    old = FakeJob(job(4, job_id="old"), arrival_seq=0, pending_since=10 * hour)
    queue = [old]
    assert guard.promote(view_of(small_cluster, 500 * hour, [], queue), PassState()) == frozenset()
    assert guard._earliest == 10 * hour
    queue.append(FakeJob(job(4, job_id="new"), arrival_seq=1, pending_since=600 * hour))
    assert guard.promote(view_of(small_cluster, 1009 * hour, [], queue), PassState()) == frozenset()
    assert guard.promote(view_of(small_cluster, 1010.5 * hour, [], queue), PassState()) == {"old"}
    fresh = StarvationGuard(1000 * hour)
    assert fresh.promote(view_of(small_cluster, 1010.5 * hour, [], list(queue)), PassState()) == {"old"}
