"""Gavel's max-throughput policy (Narayanan et al., OSDI'20), Crius' heterogeneity-aware baseline."""

from __future__ import annotations

import numpy as np
import pytest
from factories import two_type_toml
from policy_fakes import FakeJob, on, view_of

from halyard.datamodel import EventKind, JobSpec, JobState, parse_cluster
from halyard.emulator import PerformanceModel
from halyard.policies import PassState
from halyard.policies.gavel import Gavel, max_throughput_allocation, throughputs
from halyard.policies.plan import Preempt, Start
from halyard.scheduling import Simulator
from halyard.testing.cluster import small_cluster_toml

PM = PerformanceModel()


def test_the_lp_maximises_normalised_throughput_under_each_types_gpus():
    """Job 0 is 2x faster on type A, job 1 barely: A goes to job 0, B to job 1."""
    x = max_throughput_allocation(np.array([[2.0, 1.0], [1.1, 1.0]]), np.array([1.0, 1.0]), np.array([1.0, 1.0]))
    assert x == pytest.approx(np.array([[1.0, 0.0], [0.0, 1.0]]), abs=1e-6)


def test_the_lp_respects_time_and_gpus():
    rng = np.random.default_rng(0)
    thr = rng.uniform(0.5, 2.0, size=(12, 3))
    thr[0, 1] = 0.0  # job 0 cannot run on type 1
    gpus = rng.choice([1.0, 2.0, 4.0], size=12)
    cap = np.array([4.0, 8.0, 2.0])
    x = max_throughput_allocation(thr, gpus, cap)
    assert (x >= -1e-9).all() and (x.sum(axis=1) <= 1 + 1e-9).all()
    assert (gpus @ x <= cap + 1e-9).all() and x[0, 1] == pytest.approx(0.0)
    assert x.sum() > 0


def test_a_round_gives_the_gpus_to_the_job_with_the_smallest_share_of_its_allocation():
    """Gavel §5: priority = X / share received. On 16 GPUs the LP gives an 8-GPU job X = 1 and a
    16-GPU one X = 1/2; the 16-GPU job ran all its time, so the new job's priority wins the round
    and the 16-GPU job, which no longer fits, is preempted."""
    cluster = parse_cluster(small_cluster_toml(2))
    ran = FakeJob(JobSpec("ran", 0.0, "resnet50", 16, iterations=10), run_s=900.0,
                  allocation=on(cluster, ("r0-n0", 8), ("r0-n1", 8)))
    waited = FakeJob(JobSpec("waited", 0.0, "resnet50", 8, iterations=10), arrival_seq=1)
    plan = Gavel().schedule(view_of(cluster, 900.0, [ran], [waited], perf=PM), PassState())
    assert [(type(a), a.job_id) for a in plan.actions] == [(Preempt, "ran"), (Start, "waited")]


def test_between_round_boundaries_gavel_changes_nothing():
    """Gavel decides once a round (its simulator adds a mid-round arrival at the next round): the same
    view 100 s into a 300 s round gives no action, and the waiting job says why. ``fill_between_rounds``
    (ours) starts a job on idle GPUs there, but preempts nothing."""
    cluster = parse_cluster(small_cluster_toml(2))
    ran = FakeJob(JobSpec("ran", 0.0, "resnet50", 16, iterations=10), run_s=1000.0,
                  allocation=on(cluster, ("r0-n0", 8), ("r0-n1", 8)))
    waited = FakeJob(JobSpec("waited", 0.0, "resnet50", 8, iterations=10), arrival_seq=1)
    plan = Gavel().schedule(view_of(cluster, 1000.0, [ran], [waited], perf=PM), PassState())
    assert plan.actions == [] and "round boundaries" in plan.unplaced["waited"].reason
    half = FakeJob(JobSpec("half", 0.0, "resnet50", 8, iterations=10), run_s=1000.0,
                   allocation=on(cluster, ("r0-n0", 8)))
    new = FakeJob(JobSpec("new", 0.0, "resnet50", 8, iterations=10), arrival_seq=1)
    big = FakeJob(JobSpec("big", 0.0, "resnet50", 16, iterations=10), arrival_seq=2)
    view = view_of(cluster, 1000.0, [half], [new, big], perf=PM)
    assert Gavel().schedule(view, PassState()).actions == []
    plan = Gavel(fill_between_rounds=True).schedule(view, PassState())
    assert [(type(a), a.job_id) for a in plan.actions] == [(Start, "new")]


def test_a_simulated_gavel_acts_only_on_round_boundaries():
    """Through the simulator's core, with arrivals and completions between boundaries: every start,
    preemption and migration falls on a multiple of the 300 s round (before, an arrival's pass could
    preempt a job seconds into its round)."""
    cluster = parse_cluster(two_type_toml(2, 4))
    jobs = [JobSpec(f"j{i}", 37.0 + 131.0 * i, "resnet50", 1 + i % 4, iterations=2000 + 700 * i) for i in range(12)]
    sim = Simulator(cluster, Gavel(), PM)
    sim.run(jobs)
    acts = [e for e in sim.core.log if e.kind in (EventKind.STARTED, EventKind.PREEMPTED, EventKind.MIGRATED)]
    assert sum(e.kind is EventKind.PREEMPTED for e in acts) > 0  # the rounds do time-share
    assert all(e.time % 300.0 == pytest.approx(0.0, abs=1e-6) for e in acts), [e.time for e in acts]
    assert all(r.state is JobState.COMPLETED for r in sim.core.records.values())


def test_a_job_goes_to_the_type_the_allocation_gives_it():
    """With both types free, each job runs on its fastest type (the LP's optimum); the type a job
    does not fit (BERT-large at 64 per GPU on 24 GB A10s) has throughput 0."""
    cluster = parse_cluster(two_type_toml(1, 8))
    job = FakeJob(JobSpec("a", 0.0, "bert-large", 8, iterations=10))
    plan = Gavel().schedule(view_of(cluster, 0.0, [], [job], perf=PM), PassState())
    (start,) = plan.actions
    assert {cluster.node(p.node).gpu_type for p in start.allocation.nodes} == {"A40"}
    v = view_of(cluster, 0.0, [], [], perf=PM)
    big = JobSpec("b", 0.0, "bert-large", 1, iterations=10, batch_size=64)
    thr = dict(zip(cluster.gpu_types, throughputs(v, big), strict=True))
    assert thr["A10"] == 0.0 and thr["A40"] > 0.0


def test_tied_jobs_share_the_gpus_only_with_spread_ties():
    """Three identical 1-GPU jobs on 2 GPUs of one type: every split of 2 units of time is optimal.
    The solver's vertex gives one job X = 0 (it waits while the others run); ``spread_ties`` keeps the
    optimum and gives each 2/3 of its time."""
    thr, gpus, cap = np.ones((3, 1)), np.ones(3), np.array([2.0])
    plain = max_throughput_allocation(thr, gpus, cap)
    spread = max_throughput_allocation(thr, gpus, cap, spread_ties=True)
    assert plain.sum() == pytest.approx(2.0) == spread.sum()
    assert plain.min() == pytest.approx(0.0, abs=1e-9)
    assert spread.ravel() == pytest.approx([2 / 3] * 3)
    # A job that runs nowhere does not hold the floor at 0; the optimum is never traded away.
    thr2 = np.array([[2.0, 1.0], [1.1, 1.0], [0.0, 0.0]])
    x = max_throughput_allocation(thr2, np.ones(3), np.array([1.0, 1.0]), spread_ties=True)
    assert x[:2] == pytest.approx(np.array([[1.0, 0.0], [0.0, 1.0]]), abs=1e-6) and x[2].sum() == 0


def test_raw_throughput_sum_gives_the_fast_type_to_the_most_steps_per_second():
    """Gavel's code (scheduler/policies/max_sum_throughput.py, ThroughputNormalizedByCostSumWithPerfSLOs,
    commit c4fa400) maximises sum(throughputs * x), unnormalised. A job of many cheap steps (28.2 vs
    21.2 steps/s on A and B) gains more steps on A than one of few costly steps (1.49 vs 0.84), so raw it
    gets A; normalised by each job's best type, the second gains more (0.44 vs 0.25 of its best) and gets A."""
    thr, one = np.array([[28.2, 21.2], [1.49, 0.84]]), np.ones(2)
    assert max_throughput_allocation(thr, one, one) == pytest.approx(np.array([[0, 1], [1, 0]]), abs=1e-6)
    assert max_throughput_allocation(thr, one, one, raw=True) == pytest.approx(np.array([[1, 0], [0, 1]]), abs=1e-6)


def test_work_conserving_gives_gpus_the_rounding_leaves_idle_to_a_job_the_lp_gave_nothing():
    """Gavel's _schedule_jobs_on_workers_helper (scheduler.py, c4fa400) goes down every job of the type's
    priority list, priority 0 included, while workers last. On 16 GPUs the raw LP gives a new 8-GPU job
    X = 1, the 16-GPU job that ran all its time X = 1/2 and a slow 8-GPU job nothing: the new job starts,
    the 16-GPU one no longer fits and 8 GPUs stay idle; work_conserving starts the slow job on them."""
    cluster = parse_cluster(small_cluster_toml(2))
    big = FakeJob(JobSpec("big", 0.0, "resnet18", 16, iterations=10), run_s=900.0,
                  allocation=on(cluster, ("r0-n0", 8), ("r0-n1", 8)))
    new = FakeJob(JobSpec("new", 0.0, "resnet18", 8, iterations=10), arrival_seq=1)
    slow = FakeJob(JobSpec("slow", 0.0, "bert-2.6b", 8, iterations=10), arrival_seq=2)
    view = view_of(cluster, 900.0, [big], [new, slow], perf=PM)
    assert 2 * throughputs(view, slow.spec)[0] < throughputs(view, big.spec)[0]  # the LP prefers big's half
    plain = Gavel(raw_throughput_sum=True).schedule(view, PassState())
    assert {(type(a), a.job_id) for a in plain.actions} == {(Preempt, "big"), (Start, "new")}
    full = Gavel(raw_throughput_sum=True, work_conserving=True).schedule(view, PassState())
    assert {(type(a), a.job_id) for a in full.actions} == {(Preempt, "big"), (Start, "new"), (Start, "slow")}
