"""Pollux (Qiao et al., OSDI'21): the goodput equations, the p = -1 fitness and the search (policies/pollux.py)."""

from __future__ import annotations

import itertools
import math
import random

import pytest
from policy_fakes import FakeJob, on, view_of

from halyard.datamodel import Allocation, JobSpec, NodeAllocation, parse_cluster
from halyard.emulator import PerformanceModel
from halyard.policies import PassState, make_policy
from halyard.policies.cassini import CassiniPlacement, CassiniShifts
from halyard.policies.plan import Plan, Preempt, Resize, Start
from halyard.policies.pollux import Pollux, allocate, counts_for
from halyard.policies.pollux_model import (
    DEFAULT_NOISE,
    FAMILY_OF,
    NOISE_SCALES,
    best_goodput,
    efficiency,
    fitness,
    noise_for,
    noise_scale,
    realloc_factor,
)
from halyard.policies.resources import FreeResources
from halyard.testing.cluster import small_cluster_toml

PM = PerformanceModel()
# 4 nodes x 4 V100 with 10 Gbit/s NICs: a job across nodes is slowed by its all-reduce.
SLOW_NICS = parse_cluster(small_cluster_toml(4, gpus_per_node=4).replace("nic_gbit_s = 200", "nic_gbit_s = 10"))


def elastic(job_id: str, model: str = "resnet50", n: int = 4) -> JobSpec:
    return JobSpec(job_id, 0.0, model, n, iterations=1000, min_gpus=1, max_gpus=16)


def test_efficiency_is_pollux_eq_phi_plus_m0_over_phi_plus_m():
    """Pollux §3: EFFICIENCY_t(M) = (phi_t + M0) / (phi_t + M), by hand."""
    assert efficiency(1000.0, 100.0, 400.0) == pytest.approx(1100.0 / 1400.0)  # 0.7857
    assert efficiency(1000.0, 100.0, 100.0) == 1.0  # the initial batch loses nothing
    assert efficiency(0.0, 100.0, 400.0) == pytest.approx(0.25)  # no noise: 4x the batch, 1/4 the progress per sample
    assert efficiency(1e12, 100.0, 400.0) == pytest.approx(1.0)  # pure noise: every sample counts
    assert efficiency(300.0, 100.0, [100.0, 300.0]) == pytest.approx([1.0, 400.0 / 600.0])
    with pytest.raises(ValueError, match="phi must be >= 0 and M0 > 0"):
        efficiency(-1.0, 100.0, 200.0)


def test_noise_scale_grows_geometrically_with_progress():
    assert noise_scale(DEFAULT_NOISE, 0.0) == DEFAULT_NOISE.phi_start == 928.0
    assert noise_scale(DEFAULT_NOISE, 1.0) == pytest.approx(14_430.0)
    assert noise_scale(DEFAULT_NOISE, 0.5) == pytest.approx(math.sqrt(928.0 * 14_430.0))  # 3,659
    assert noise_scale(DEFAULT_NOISE, 2.0) == noise_scale(DEFAULT_NOISE, 1.0)  # clipped


def test_goodput_is_throughput_times_efficiency_maximised_over_the_batch():
    """§3's goodput, by hand: 1,000 / 1,800 / 3,000 samples/s at batches 100 / 200 / 400, M0 = 100."""
    rates = {100: 1000.0, 200: 1800.0, 400: 3000.0}
    # phi = 200: 1000 x 1, 1800 x 300/400 = 1350, 3000 x 300/600 = 1500 -> the largest batch.
    assert best_goodput(rates, 200.0, 100) == (pytest.approx(1500.0), 400)
    # phi = 50 (early training): 1000, 1800 x 150/250 = 1080, 3000 x 150/450 = 1000 -> batch 200.
    assert best_goodput(rates, 50.0, 100) == (pytest.approx(1080.0), 200)
    assert best_goodput({}, 50.0, 100) == (0.0, 100)


def test_fitness_is_the_generalised_mean_with_p_minus_one():
    """§4, PolluxSched: FITNESS_-1 is the harmonic mean of the speedups (floored by 1e-3 as the reference simulator)."""
    assert fitness([1.0, 2.0, 4.0], floor=0.0) == pytest.approx(3.0 / (1.0 + 0.5 + 0.25))  # 1.714
    assert fitness([1.0, 2.0, 4.0]) == pytest.approx(3.0 / (1 / 1.001 + 1 / 2.001 + 1 / 4.001))
    assert fitness([2.0, 2.0], floor=0.0) == pytest.approx(2.0)
    # A job left with nothing pulls the mean to almost nothing: p = -1 is fair, not utilitarian.
    assert fitness([0.0, 10.0]) < 0.002 < fitness([1.0, 1.0], floor=0.0) == 1.0
    assert fitness([3.0, 1.0], p=1.0, floor=0.0) == pytest.approx(2.0)  # p = 1: the arithmetic mean
    with pytest.raises(ValueError, match="fitness of no jobs"):
        fitness([])
    with pytest.raises(ValueError, match="p = 0"):
        fitness([1.0], p=0.0)


def test_realloc_factor_is_age_less_restarts_over_age_plus_delay():
    """§4, PolluxSched: REALLOC_FACTOR(delta) = (T - R delta) / (T + delta), delta = 30 s."""
    assert realloc_factor(300.0, 2) == pytest.approx(240.0 / 330.0)  # 0.727
    assert realloc_factor(300.0, 0) == pytest.approx(300.0 / 330.0)
    assert realloc_factor(50.0, 2) == 0.0  # floored: a young, often moved job is not moved again
    with pytest.raises(ValueError, match="must be >= 0"):
        realloc_factor(-1.0, 0)


def test_the_knapsack_finds_the_exhaustive_optimum():
    """Step 3 is exact: on random instances the DP's total cost is the brute-force minimum, and the
    GPUs it uses fit the budget."""
    rng = random.Random(7)
    for _ in range(200):
        n, gpus = rng.randint(1, 4), rng.randint(0, 8)
        sizes = [[0, *sorted(rng.sample(range(1, 7), rng.randint(1, 3)))] for _ in range(n)]
        costs = [[1000.0, *(rng.uniform(0.1, 5.0) for _ in s[1:])] for s in sizes]
        picks = allocate(costs, sizes, gpus, [0] * n)
        assert sum(sizes[j][i] for j, i in enumerate(picks)) <= gpus
        best = min(sum(costs[j][i] for j, i in enumerate(c)) for c in itertools.product(*(range(len(s)) for s in sizes))
                   if sum(sizes[j][i] for j, i in enumerate(c)) <= gpus)
        assert sum(costs[j][i] for j, i in enumerate(picks)) == pytest.approx(best)
    with pytest.raises(ValueError, match="no option of 0 GPUs"):
        allocate([[1.0]], [[2]], 1, [0])


def test_counts_are_every_size_of_a_small_range_and_powers_of_two_of_a_large_one():
    assert counts_for(2, 4, 16) == [0, 2, 3, 4]
    assert counts_for(1, 64, 40) == [0, 1, 2, 4, 8, 16, 32, 40]
    assert counts_for(8, 8, 4) == [0]  # larger than the cluster: never runs
    # a running job is always offered the count it holds: off the powers of two, or above what is schedulable
    assert counts_for(1, 64, 40, current=12) == [0, 1, 2, 4, 8, 12, 16, 32, 40]
    assert counts_for(8, 8, 4, current=8) == [0, 8]
    assert counts_for(2, 4, 16, current=3) == [0, 2, 3, 4]


def test_a_running_job_keeps_its_count_when_nodes_stop_taking_work():
    """Drained or silent nodes keep their jobs (FreeResources.schedulable). A fixed 8-GPU job on r0-n0 and
    r0-n1 with r0-n1..3 unschedulable (4 schedulable GPUs): it keeps running where it is. The old search
    offered it only 0 GPUs (its count was above the 4 schedulable) and preempted it."""
    job = FakeJob(JobSpec("big", 0.0, "resnet50", 8, iterations=1000), allocation=on(SLOW_NICS, ("r0-n0", 4),
                                                                                    ("r0-n1", 4)), done=10)
    view = view_of(SLOW_NICS, 3600.0, [job], [], perf=PM)
    view.free.schedulable[1:] = False
    assert view.schedulable_gpus == 4
    assert Pollux().schedule(view, PassState()).actions == []


def test_a_job_on_a_node_that_takes_no_work_is_not_resized_into_gpus_that_do_not_exist():
    """4 nodes x 4 GPUs, r0-n1 unschedulable; elastic job a (1..16) runs with its 4 GPUs there, fixed 8-GPU
    job b pends. a's held GPUs count in the budget (gpu_budget) only at its current count: a can keep 4
    or stop, not grow. The old search offered a every count, sized it 8 (GPUs no node can give) and b
    waited forever with 12 schedulable GPUs."""
    cluster = parse_cluster(small_cluster_toml(4, gpus_per_node=4))
    a = FakeJob(JobSpec("a", 0.0, "resnet50", 4, iterations=10**7, min_gpus=1, max_gpus=16),
                allocation=on(cluster, ("r0-n1", 4)), done=10, arrival_seq=0)
    b = FakeJob(JobSpec("b", 0.0, "resnet50", 8, iterations=10**7), arrival_seq=1)
    view = view_of(cluster, 36000.0, [a], [b], perf=PM)
    view.free.schedulable[1] = False
    assert Pollux()._sizes(view, [a, b]) == {"a": 4, "b": 8}
    plan = Pollux().schedule(view, PassState())
    assert [(type(x), x.job_id) for x in plan.actions] == [(Start, "b")]
    assert plan.actions[0].allocation.num_gpus == 8


def test_a_young_job_off_the_power_of_two_counts_keeps_them():
    """A range of more than MAX_DENSE_COUNTS is offered powers of two (our rule), but a running job's own
    count is always among its options, so the restart penalty can keep it: 10 s old (REALLOC_FACTOR
    0.25), 12 GPUs of a 1..32 range stay 12. The old options (1, 2, 4, 8, 16, 32) forced a resize."""
    cluster = parse_cluster(small_cluster_toml(8, gpus_per_node=4).replace("nic_gbit_s = 200", "nic_gbit_s = 10"))
    spec = JobSpec("a", 0.0, "resnet50", 4, iterations=1000, min_gpus=1, max_gpus=32)
    job = FakeJob(spec, allocation=on(cluster, ("r0-n0", 4), ("r0-n1", 4), ("r0-n2", 4)), done=500)
    plan = Pollux().schedule(view_of(cluster, 10.0, [job], [], perf=PM), PassState())
    assert plan.actions == []


def test_pollux_gives_more_gpus_to_the_job_whose_goodput_scales():
    """ResNet-50 (compute-bound) and VGG11 (an all-reduce that a 10 Gbit/s NIC cannot hide), both
    elastic 1..16 on 16 GPUs: Pollux keeps VGG11 inside one 4-GPU node and gives ResNet-50 the rest."""
    jobs = [FakeJob(elastic("resnet"), arrival_seq=0, done=500), FakeJob(elastic("vgg", "vgg11"), arrival_seq=1,
                                                                          done=500)]
    policy = Pollux()
    view = view_of(SLOW_NICS, 0.0, [], jobs, perf=PM)
    plan = policy.schedule(view, PassState())
    sizes = {a.job_id: a.allocation.num_gpus for a in plan.actions if isinstance(a, Start)}
    assert sizes["vgg"] <= 4 < sizes["resnet"] and sum(sizes.values()) <= 16
    assert len(next(a for a in plan.actions if a.job_id == "vgg").allocation.nodes) == 1
    # Why: VGG11's goodput across nodes falls below its goodput on one node; ResNet-50's keeps rising.
    vgg, resnet = jobs[1], jobs[0]
    assert policy.goodput(view, vgg, 8)[0] < policy.goodput(view, vgg, 4)[0]
    assert policy.goodput(view, resnet, 12)[0] > 1.5 * policy.goodput(view, resnet, 4)[0]


def test_batch_grows_with_the_allocation_late_in_training_only():
    """A larger allocation trains a larger batch once phi_t has grown (§3); at the start it keeps M0.
    With ``adapt_batch`` off (our option) the batch is always M0."""
    cluster = parse_cluster(small_cluster_toml(2))  # 16 V100, NVSwitch-class nodes
    early, late = FakeJob(elastic("e"), done=0), FakeJob(elastic("l"), done=990)
    view = view_of(cluster, 0.0, [], [early, late], perf=PM)
    m0 = 4 * 64  # 4 GPUs x ResNet-50's reference batch
    assert Pollux().goodput(view, early, 16)[1] == m0
    assert Pollux().goodput(view, late, 16)[1] > m0
    assert Pollux(adapt_batch=False).goodput(view, late, 16)[1] == m0
    assert Pollux().goodput(view, late, 16)[0] > Pollux(adapt_batch=False).goodput(view, late, 16)[0]


def test_the_restart_penalty_keeps_a_young_running_job_where_it_is():
    """Alone on 16 GPUs (its fair share), a job on 4 has speedup about 4/11.8 = 0.34 and on 16 GPUs 1.
    Submitted 10 s ago its REALLOC_FACTOR is 10/40 = 0.25, so 16 GPUs are worth 0.25 < 0.34 and it
    stays; an hour old (3600/3630 = 0.99) it is grown."""
    for age, grows in ((10.0, False), (3600.0, True)):
        job = FakeJob(elastic("a"), allocation=on(SLOW_NICS, ("r0-n0", 4)), done=500)
        plan = Pollux().schedule(view_of(SLOW_NICS, age, [job], [], perf=PM), PassState())
        assert any(isinstance(a, Resize) for a in plan.actions) == grows, age


def test_a_fixed_size_job_runs_at_its_size_and_the_search_runs_as_many_jobs_as_fit():
    """Fixed-size jobs have speedup 1 at their size and 0 off it: p = -1 runs the most jobs (two 2-GPU
    jobs rather than one 4-GPU job that arrived first on 4 free GPUs); the one left out is told why."""
    cluster = parse_cluster(small_cluster_toml(1, gpus_per_node=4))
    big = FakeJob(JobSpec("big", 0.0, "resnet50", 4, iterations=100), arrival_seq=0)
    small = [FakeJob(JobSpec(f"s{i}", 0.0, "resnet50", 2, iterations=100), arrival_seq=1 + i) for i in range(2)]
    plan = Pollux().schedule(view_of(cluster, 0.0, [], [big, *small], perf=PM), PassState())
    assert {a.job_id: a.allocation.num_gpus for a in plan.actions} == {"s0": 2, "s1": 2}
    assert "goodput search gives it no GPUs" in plan.unplaced["big"].reason


def test_pollux_presets_compose_with_cassini_and_every_model_family_is_sourced():
    plain, shifted = make_policy("pollux"), make_policy("pollux+cassini")
    assert isinstance(plain, Pollux) and isinstance(shifted, Pollux)
    assert isinstance(shifted.placement, CassiniPlacement) and isinstance(shifted.adjusters[-1], CassiniShifts)
    assert shifted.name == "pollux+cassini"
    assert set(FAMILY_OF.values()) <= NOISE_SCALES.keys()
    assert set(FAMILY_OF) <= set(PM.models()), set(FAMILY_OF) - set(PM.models())
    assert all("adaptdl simulator/traces" in n.source for n in NOISE_SCALES.values())
    assert noise_for("no-such-model") is DEFAULT_NOISE


def test_penalize_starts_applies_the_restart_penalty_to_a_first_start():
    """Our option (off by default): with it, a job arriving now (age 0: REALLOC_FACTOR 0) is not
    started at its arrival pass; 60 s later (60/90) it is. Without it, it starts at once."""
    cluster = parse_cluster(small_cluster_toml(1, gpus_per_node=4))
    job = FakeJob(JobSpec("a", 0.0, "resnet50", 2, iterations=100), arrival_seq=0)
    assert not Pollux(penalize_starts=True).schedule(view_of(cluster, 0.0, [], [job], perf=PM), PassState()).actions
    assert Pollux(penalize_starts=True).schedule(view_of(cluster, 60.0, [], [job], perf=PM), PassState()).actions
    assert Pollux().schedule(view_of(cluster, 0.0, [], [job], perf=PM), PassState()).actions


def test_explore_doubling_caps_a_job_at_twice_the_largest_count_it_ran_on():
    """Our option (off by default), the reference simulator's cap on a job it has not profiled (adaptdl
    osdi21-artifact simulator/simulator.py get_pollux_job_info: max_replicas = min(max(2 *
    max_profiled_replicas, 1), ...)): alone on 16 GPUs, a new job starts on 1 GPU, and once it has run on
    1 it may grow to 2, not more. Without it, the job gets more than 2 at once."""
    cluster = parse_cluster(small_cluster_toml(4, gpus_per_node=4))
    policy = Pollux(explore_doubling=True)
    view = view_of(cluster, 0.0, [], [FakeJob(elastic("a"), arrival_seq=0)], perf=PM)
    plan = policy.schedule(view, PassState())
    assert [a.allocation.num_gpus for a in plan.actions if isinstance(a, Start)] == [1]
    policy.on_applied(view, plan, PassState())
    running = FakeJob(elastic("a"), arrival_seq=0, allocation=on(cluster, ("r0-n0", 1)), done=10)
    plan = policy.schedule(view_of(cluster, 3600.0, [running], [], perf=PM), PassState())
    assert [a.allocation.num_gpus for a in plan.actions if isinstance(a, Resize)] == [2]
    plan = Pollux().schedule(view, PassState())
    assert next(a.allocation.num_gpus for a in plan.actions if isinstance(a, Start)) > 2


def _apply(free: FreeResources, plan, jobs: dict[str, FakeJob]) -> None:
    """The plan's actions one after another on ``free``, as the core applies them (each job's GPUs given
    back before its new ones are taken); OverAllocation if one does not apply in that order."""
    for action in plan.actions:
        held = jobs[action.job_id].allocation
        if held is not None:
            free.give(held)
        if not isinstance(action, Preempt):
            free.take(action.allocation)


def test_counts_on_fragmented_nodes_are_placed_in_the_order_they_apply():
    """The pass of docs/reproductions/pollux-public-comparison.md (jobs-30-59, t = 6180 s) that repeated for
    ten minutes: 4 nodes x 4 GPUs, one GPU free (r0-n1); the search shrinks s (4 on r0-n0) to 3, grows g
    (1 on r0-n2) to 2 and gives pending p 1. The old placement gave back every changed job's GPUs at once
    and placed p, then g on r0-n0 and s across r0-n0..2: s needs g's GPU on r0-n2 and g needs s's on r0-n0,
    a cycle of moves the core cannot order, so all three were left out, p waited, and the next pass chose
    the same (Pollux §4 searches node replica counts, so what it picks is placeable). Placed in the order
    they apply (s shrinks first), all three are emitted, and they apply on the cluster as it is."""
    cluster = parse_cluster(small_cluster_toml(4, gpus_per_node=4))
    n2 = cluster.node("r0-n2")

    def job(job_id: str, n: int, alloc: Allocation | None, seq: int, elastic_: bool = True) -> FakeJob:
        spec = JobSpec(job_id, 0.0, "resnet50", n, iterations=10**6, min_gpus=1 if elastic_ else None,
                       max_gpus=4 if elastic_ else None)
        return FakeJob(spec, allocation=alloc, done=10, arrival_seq=seq)

    running = [job("s", 4, on(cluster, ("r0-n0", 4)), 0), job("f1", 3, on(cluster, ("r0-n1", 3)), 1, False),
               job("f2", 3, on(cluster, ("r0-n2", 3)), 2, False), job("f3", 4, on(cluster, ("r0-n3", 4)), 3, False),
               job("g", 1, Allocation((NodeAllocation("r0-n2", (3,), n2.proportional_cpus(1),
                                                      n2.proportional_memory_mb(1)),)), 4)]
    p = job("p", 1, None, 5, False)
    view = view_of(cluster, 3600.0, running, [p], perf=PM)
    assert list(view.free.gpus) == [0, 1, 0, 0]
    jobs = [*running, p]
    sizes = {"s": 3, "f1": 3, "f2": 3, "f3": 4, "g": 2, "p": 1}
    plan = Plan()
    Pollux()._finalize(view, plan, jobs, sizes, PassState())
    assert {a.job_id: (type(a), a.allocation.num_gpus) for a in plan.actions} == {
        "s": (Resize, 3), "g": (Resize, 2), "p": (Start, 1)}
    assert not plan.unplaced
    _apply(view.free.copy(), plan, {j.job_id: j for j in jobs})


def test_a_count_that_cannot_be_placed_is_searched_again_without_it():
    """Docs/pollux.md "Placeable counts": 2 nodes x 4 GPUs, r0-n1's CPUs all held (a node whose GPUs are
    free but cannot be taken with their proportional CPUs). Alone, elastic job a (1..8) is worth most on 8
    GPUs, and the knapsack gives it 8 (the budget counts GPUs); only 4 can be placed. The old pass left it
    waiting at every pass; the search is solved again with a's options limited to what placement can take
    (here at most 4), and a starts on r0-n0's 4 GPUs."""
    cluster = parse_cluster(small_cluster_toml(2, gpus_per_node=4))
    a = FakeJob(JobSpec("a", 0.0, "resnet50", 4, iterations=10**6, min_gpus=1, max_gpus=8), arrival_seq=0)
    view = view_of(cluster, 0.0, [], [a], perf=PM)
    view.free.adjust(1, int(view.free.cpus[1]), 0)
    assert Pollux()._sizes(view, [a]) == {"a": 8}  # the search alone
    plan = Pollux().schedule(view, PassState())
    assert [(type(x), x.job_id, x.allocation.num_gpus) for x in plan.actions] == [(Start, "a", 4)]
    assert [n.node for n in plan.actions[0].allocation.nodes] == ["r0-n0"]
    _apply(view.free.copy(), plan, {"a": a})
