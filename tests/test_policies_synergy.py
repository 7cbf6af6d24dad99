"""Synergy (papers/synergy-multi-resource-scheduling.txt): profiling, mechanisms, the guarantee."""

from __future__ import annotations

import pytest
from factories import job
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from policy_fakes import Wrapping
from test_properties import check_ledger

from halyard.datamodel import Allocation, JobSpec, JobState, NodeAllocation, ValidationError, load_cluster
from halyard.emulator import PerformanceModel
from halyard.policies import ClusterView, PassState, Plan, Policy, WaitCode, make_policy, policy_names
from halyard.policies.ordering import ORDERINGS
from halyard.policies.synergy import MECHANISMS
from halyard.policies.synergy_profile import binary_search_points, optimistic_profile
from halyard.scheduling import SchedulingCore, Simulator
from halyard.scheduling.timing import Pacer, performance_model_for

STALLS = PerformanceModel(data_stalls=True)
ROUND = 300.0  # a round boundary of the core's default 300 s rounds (Synergy §3 decides only there)


def cpus_memory_per_gpu(allocation: Allocation) -> tuple[float, float]:
    """The smallest CPU cores and memory (MB) per GPU over an allocation's nodes."""
    return (min(p.cpus / len(p.gpus) for p in allocation.nodes if p.gpus),
            min(p.memory_mb / len(p.gpus) for p in allocation.nodes if p.gpus))


def profile(model: str):
    return optimistic_profile(lambda c: STALLS.stalled_compute_s(model, "V100", c, 500.0),
                              lambda m: STALLS.cache_fetch_s(model, m / 1000.0),
                              max_cpus=24, proportional_cpus=3, proportional_memory_mb=62_500)


@pytest.mark.parametrize(("model", "cpus", "speedup"), [
    ("alexnet", 12, 2.94), ("shufflenetv2", 12, 2.89), ("resnet18", 9, 2.4), ("mobilenetv2", 6, 1.55),
    ("resnet50", 4, 1.15), ("m5", 6, 2.5), ("deepspeech", 3, 1.0), ("gnmt", 1, 1.0), ("lstm", 1, 1.0)])
def test_demand_vector_is_the_smallest_saturating_point_s3_2(model, cpus, speedup):
    """§3.2: the demand is the minimum CPU and memory that saturate throughput
    (REFERENCE-NUMBERS: the best CPU demands and speed-ups of Synergy's matrices)."""
    p = profile(model)
    assert p.demand_cpus == cpus
    assert p.speedup(p.demand_cpus, p.demand_memory_mb) == pytest.approx(speedup, rel=0.01)
    assert p.speedup(3, 62_500) == pytest.approx(1.0)
    # No smaller point on the grid reaches the same throughput.
    assert p.speedup(cpus - 1, p.demand_memory_mb) < p.speedup(p.demand_cpus, p.demand_memory_mb) * 0.99 or cpus == 1
    smaller = [m for m in p.memory_mb if m < p.demand_memory_mb]
    assert all(p.speedup(cpus, m) < p.speedup(p.demand_cpus, p.demand_memory_mb) * 0.99 for m in smaller)


def test_binary_search_profiles_few_cpu_points_s3_1():
    """§3.1: binary search from the maximum; ResNet18 took 8 points instead of 24."""
    calls = []

    def thr(c):
        calls.append(c)
        return 1.0 / STALLS.stalled_compute_s("resnet18", "V100", c, 500.0)

    points = binary_search_points(thr, 24)
    assert calls[0] == 24 and len(points) == len(calls) <= 9
    p = profile("resnet18")
    assert set(p.measured) >= {1, 3, 24} and len(p.measured) <= 9
    # Memory is analytic (the cache model): no probe at another memory size.
    assert p.memory_mb == (20_833, 62_500, 125_000, 187_500, 250_000)


def test_every_mechanism_and_ordering_is_registered():
    names = policy_names()
    for m in MECHANISMS:
        for o in ORDERINGS:
            assert f"{m}:{o}" in names
            assert make_policy(f"{m}:{o}").resource_sensitive
    assert performance_model_for(make_policy("synergy-tune:srtf"))._data_stalls
    assert not performance_model_for(make_policy("fifo"))._data_stalls


def core(cluster, name: str) -> SchedulingCore:
    return SchedulingCore(cluster, make_policy(name), STALLS)


def test_tune_gives_the_demand_when_it_fits(small_cluster):
    c = core(small_cluster, "synergy-tune:fifo")
    c.submit(job(1, model="alexnet", job_id="a"), 0.0)
    c.schedule(0.0)
    alloc = c.records["a"].allocation
    assert cpus_memory_per_gpu(alloc) == (12, 125_000)


def test_proportional_mechanism_gives_the_proportional_share(small_cluster):
    c = core(small_cluster, "proportional:fifo")
    c.submit(job(2, model="alexnet", job_id="a"), 0.0)
    c.schedule(0.0)
    assert cpus_memory_per_gpu(c.records["a"].allocation) == (3, 62_500)


def test_greedy_skips_a_job_that_does_not_fit_s3_3(small_cluster):
    """§3.3: a job whose demand fits no server is skipped for the round (GPUs stay idle)."""
    c = core(small_cluster, "synergy-greedy:fifo")
    for i in range(4):  # 4 alexnet at 12 CPUs each: one per node, all CPUs taken
        c.submit(job(1, model="alexnet", job_id=f"a{i}"), 0.0)
    c.submit(job(1, model="resnet18", job_id="r"), 0.0)
    c.schedule(0.0)
    assert [r.job_id for r in c.running.values()] == ["a0", "a1", "a2", "a3"]
    assert c.records["r"].state is JobState.PENDING
    why = c.wait_of(c.records["r"])
    assert (why.code, why.stage) == (WaitCode.CANNOT_FIT_NOW, "synergy-greedy")
    assert "9 CPUs" in why.reason  # resnet18's demand vector (REFERENCE-NUMBERS: 9 CPUs)


def test_tune_runs_at_the_share_instead_of_skipping_s4_2(small_cluster):
    """§4.2 (1) and (2a): the job that does not fit at its demand runs at the proportional share
    (never skipped), a job on its server holding more than its share is switched back to the share
    (the whole vector), and nobody is raised again after packing (the paper does not)."""
    c = core(small_cluster, "synergy-tune:fifo")
    for i in range(4):
        c.submit(job(1, model="alexnet", job_id=f"a{i}"), 0.0)
    c.schedule(0.0)
    assert all(cpus_memory_per_gpu(r.allocation) == (12, 125_000) for r in c.running.values())
    c.submit(job(1, model="resnet18", job_id="r"), ROUND)
    c.schedule(ROUND)
    assert c.records["r"].state is JobState.RUNNING
    assert cpus_memory_per_gpu(c.records["r"].allocation) == (3, 62_500)
    node = c.records["r"].allocation.nodes[0].node
    others = {r.job_id: cpus_memory_per_gpu(r.allocation) for r in c.running.values() if r.job_id != "r"}
    reverted = [j for j in others if c.records[j].allocation.on(node) is not None]
    assert [others[j] for j in reverted] == [(3, 62_500)]
    assert all(v == (12, 125_000) for j, v in others.items() if j not in reverted)
    check_ledger(c.view(ROUND))


@pytest.mark.parametrize(("policy", "at"), [("synergy-tune-every-pass:fifo", 1.0), ("synergy-tune:fifo", ROUND)])
def test_tune_repacks_running_jobs_s3_s4_2(small_cluster, policy, at):
    """§3: the whole runnable set is re-packed in §4.2's order (every pass, or at round boundaries).
    A running resnet18 (9 CPUs) is packed after the new alexnets (12 CPUs) that take every server's
    CPUs; it does not fit even its share until (2a) switches the alexnet beside it back to the share
    (no server gives it its demand, so at a round it renews its lease where it is, §4.3)."""
    c = core(small_cluster, policy)
    c.submit(job(1, model="resnet18", job_id="r"), 0.0)
    c.schedule(0.0)
    assert cpus_memory_per_gpu(c.records["r"].allocation) == (9, 62_500)
    node = c.records["r"].allocation.nodes[0].node
    for i in range(4):
        c.submit(job(1, model="alexnet", job_id=f"a{i}"), at)
    c.schedule(at)
    assert c.records["r"].allocation.nodes[0].node == node  # its GPUs are kept
    assert cpus_memory_per_gpu(c.records["r"].allocation) == (3, 62_500)
    beside = [r for r in c.running.values() if r.job_id != "r" and r.allocation.on(node) is not None]
    assert [cpus_memory_per_gpu(r.allocation) for r in beside] == [(3, 62_500)]
    assert all(cpus_memory_per_gpu(r.allocation) == (12, 125_000) for r in c.running.values()
               if r.job_id != "r" and r not in beside)
    check_ledger(c.view(at))


def test_tune_changes_nothing_between_rounds_s3(small_cluster):
    """§3: "Synergy performs round-based scheduling": a job arriving mid-round waits for the next
    round boundary (with a reason saying so); the every-pass variant starts it at once."""
    c = core(small_cluster, "synergy-tune:fifo")
    c.submit(job(1, model="alexnet", job_id="a"), 1.0)
    assert c.schedule(1.0) == []
    why = c.wait_of(c.records["a"])
    assert (why.code, why.stage) == (WaitCode.WAITING_BY_POLICY, "synergy-tune")
    assert "next round" in why.reason
    assert c.policy.needs_rounds  # so the round timer runs the pass at the boundary
    c.schedule(ROUND)
    assert c.records["a"].state is JobState.RUNNING
    eager = core(small_cluster, "synergy-tune-every-pass:fifo")
    eager.submit(job(1, model="alexnet", job_id="a"), 1.0)
    eager.schedule(1.0)
    assert eager.records["a"].state is JobState.RUNNING


def test_a_late_round_pass_counts_within_the_drivers_slack(small_cluster):
    """The wall-clock daemon runs a round's pass when its event loop reaches the timer, a little after
    the boundary: within the core's round slack (service.py: a tenth of a round outside lockstep) the
    pass is the round's; the deterministic drivers' slack is a float's (1e-6 s)."""
    late = SchedulingCore(small_cluster, make_policy("synergy-tune:fifo"), STALLS, round_slack_s=30.0)
    exact = core(small_cluster, "synergy-tune:fifo")
    for c in (late, exact):
        c.submit(job(1, model="alexnet", job_id="a"), ROUND)
        c.schedule(ROUND + 0.05)
    assert late.records["a"].state is JobState.RUNNING
    assert exact.records["a"].state is JobState.PENDING
    assert not late.view(ROUND + 31.0).at_round_boundary and late.view(2 * ROUND - 1e-9).at_round_boundary


def test_a_running_job_moves_at_a_round_to_where_it_gets_its_demand_s3(small_cluster):
    """§3 (placements recomputed each round) with §4.3's lease renewal: a new alexnet (12 CPUs, packed
    first) takes the CPUs of the running resnet18's server; the resnet18 cannot get its demand (9 CPUs)
    there, so it moves (Migrate) to an empty server that gives it -- both run at their demands. Keeping
    its GPUs (the every-pass variant) leaves both at the share on one server, three servers empty."""
    c = core(small_cluster, "synergy-tune:fifo")
    c.submit(job(1, model="resnet18", job_id="r"), 0.0)
    c.schedule(0.0)
    home = c.records["r"].allocation.nodes[0].node
    c.submit(job(1, model="alexnet", job_id="a"), ROUND)
    actions = c.schedule(ROUND)
    assert [type(a).__name__ for a in actions] == ["Migrate", "Start"]
    assert c.records["a"].allocation.nodes[0].node == home
    assert c.records["r"].allocation.nodes[0].node != home
    assert cpus_memory_per_gpu(c.records["a"].allocation) == (12, 125_000)
    assert cpus_memory_per_gpu(c.records["r"].allocation) == (9, 62_500)
    assert c.records["r"].restarts == 1  # a move is a checkpoint and restart (the performance model's cost)
    check_ledger(c.view(ROUND))
    kept = core(small_cluster, "synergy-tune-every-pass:fifo")
    kept.submit(job(1, model="resnet18", job_id="r"), 0.0)
    kept.schedule(0.0)
    kept.submit(job(1, model="alexnet", job_id="a"), ROUND)
    kept.schedule(ROUND)
    assert {cpus_memory_per_gpu(r.allocation) for r in kept.running.values()} == {(3, 62_500)}


def test_a_cycle_of_moves_is_ordered_by_a_preemption_and_a_restart(small_cluster):
    """Two 4-GPU jobs swapping servers cannot be written as two Migrates (each needs the other's GPUs
    first): the plan preempts the first and starts it at its new place after the other moved, and the
    core accepts it."""
    from halyard.policies.synergy import _emit
    from halyard.policies.synergy_packing import Packer

    c = core(small_cluster, "synergy-tune:fifo")
    for name in ("x", "y"):
        c.submit(job(4, model="gnmt", job_id=name), 0.0)
    c.schedule(0.0)
    view = c.view(ROUND)
    packer = Packer(view, view.free.copy())
    packer.alloc = {"x": c.records["y"].allocation, "y": c.records["x"].allocation}
    plan = Plan()
    _emit(view, plan, packer, [])
    assert [(type(a).__name__, a.job_id) for a in plan.actions] == [("Preempt", "x"), ("Migrate", "y"),
                                                                    ("Start", "x")]
    before = {j: c.records[j].allocation for j in ("x", "y")}
    c.apply(plan, ROUND)
    assert c.records["x"].allocation == before["y"] and c.records["y"].allocation == before["x"]


@pytest.mark.parametrize("policy", ["synergy-tune:fifo", "synergy-tune-keep-gpus:fifo", "synergy-opt:fifo"])
def test_a_running_job_its_servers_cannot_hold_after_the_revert_is_re_placed_or_preempted_s4_2(
        small_cluster, policy):
    """§4.2 (2a) by construction leaves room for a running job's share on its own servers (the core's
    ledger cannot break it). A view whose ledger holds its server's CPUs elsewhere (every one, its own
    included) must still not make the pass raise or leave the job out (the old code raised
    AssertionError): (2a) goes on as for a new job -- another server that can hold it, a Migrate --
    and with no CPUs anywhere the job's lease is not renewed (§4.3): it is preempted, with a reason."""
    import dataclasses

    c = core(small_cluster, policy)
    c.submit(job(1, model="resnet18", job_id="r"), 0.0)
    c.schedule(0.0)
    part = c.records["r"].allocation.nodes[0]
    c.submit(job(1, model="gnmt", job_id="g"), ROUND)  # a pass runs when a job waits
    view = c.view(ROUND)

    def held_elsewhere(indices) -> ClusterView:
        free = view.free.copy()
        for idx in indices:
            free.cpus[idx] = -part.cpus if view.cluster.nodes[idx].name == part.node else 0
        return dataclasses.replace(view, free=free)

    plan = c.policy.schedule(held_elsewhere([view.cluster.node(part.node).index]), PassState())
    moved = [a for a in plan.actions if a.job_id == "r"]
    assert [type(a).__name__ for a in moved] == ["Migrate"] and moved[0].allocation.nodes[0].node != part.node
    plan = c.policy.schedule(held_elsewhere(range(len(view.cluster.nodes))), PassState())
    assert [(type(a).__name__, a.job_id) for a in plan.actions] == [("Preempt", "r")]
    why = plan.unplaced["r"]
    assert why.code is WaitCode.CANNOT_FIT_NOW and "lease is not renewed" in why.reason and "(2a)" in why.reason


def test_tune_raise_is_halyards_rule_raising_jobs_back_after_packing(small_cluster):
    """synergy-tune-raise (not in the paper): after packing the new jobs, runnable jobs below their
    demand are raised back to it in priority order; here the resnet18 takes what a reverted
    alexnet left."""
    c = core(small_cluster, "synergy-tune-raise:fifo")
    for i in range(4):
        c.submit(job(1, model="alexnet", job_id=f"a{i}"), 0.0)
    c.schedule(0.0)
    c.submit(job(1, model="resnet18", job_id="r"), 1.0)
    c.schedule(1.0)
    assert cpus_memory_per_gpu(c.records["r"].allocation) == (9, 62_500)
    node = c.records["r"].allocation.nodes[0].node
    reverted = [r for r in c.running.values() if r.job_id != "r" and r.allocation.on(node) is not None]
    assert [cpus_memory_per_gpu(r.allocation) for r in reverted] == [(3, 62_500)]
    check_ledger(c.view(1.0))


def test_multi_gpu_split_keeps_cpu_and_memory_proportional_to_gpus_s4_2(small_cluster):
    """§4.2: a job split across servers gets CPU and memory proportional to its GPUs on each."""
    c = core(small_cluster, "synergy-tune:fifo")
    c.submit(job(2, model="alexnet", job_id="big"), 0.0)  # 24 CPUs: two servers of 12
    c.schedule(0.0)
    parts = c.records["big"].allocation.nodes
    assert len(parts) == 2
    assert all(p.cpus == 12 * len(p.gpus) and p.memory_mb == 125_000 * len(p.gpus) for p in parts)


def test_data_stalls_only_for_resource_sensitive_policies(small_cluster):
    """The existing policies keep their iteration times: the default model has no stalls."""
    spec = job(1, model="alexnet")
    alloc = Allocation((NodeAllocation("r0-n0", (0,), 3, 62_500),))
    plain = PerformanceModel().iteration_time(spec, alloc, small_cluster).total_s
    assert Simulator(small_cluster, make_policy("fifo")).perf.iteration_time(spec, alloc, small_cluster).total_s \
        == plain
    stalled = Simulator(small_cluster, make_policy("synergy-tune:fifo")).perf
    assert stalled.iteration_time(spec, alloc, small_cluster).total_s == pytest.approx(2.94 * plain, rel=0.01)


# ----------------------------------------------------------------------------- the guarantee

MODELS = ("alexnet", "shufflenetv2", "resnet18", "mobilenetv2", "resnet50", "m5", "deepspeech", "gnmt", "lstm")


@st.composite
def traces(draw):
    n = draw(st.integers(1, 30))
    gaps = draw(st.lists(st.floats(0, 1500, allow_nan=False), min_size=n, max_size=n))
    jobs, t = [], 0.0
    for i, gap in enumerate(gaps):
        t += gap
        jobs.append(JobSpec(job_id=f"s{i}", submit_time=t, model=draw(st.sampled_from(MODELS)),
                            num_gpus=draw(st.sampled_from([1, 1, 1, 2, 4, 8])),
                            iterations=draw(st.integers(1, 3000))))
    return jobs


class Guarded(Wrapping):
    """Checks, at every pass, the ledger and that no running job is slower than it would be
    at the GPU-proportional share of its GPUs (Synergy §4.2's guarantee). ``checks`` counts the
    passes it checked and ``jobs_checked`` the running jobs, so a test can assert both ran."""

    def __init__(self, policy: Policy) -> None:
        super().__init__(policy)
        self.checks = self.jobs_checked = 0

    def schedule(self, view: ClusterView, state: PassState) -> Plan:
        check_ledger(view)
        for info in view.running.values():
            prop = Allocation(tuple(
                NodeAllocation(p.node, p.gpus, view.cluster.node(p.node).proportional_cpus(len(p.gpus)),
                               view.cluster.node(p.node).proportional_memory_mb(len(p.gpus)))
                for p in info.allocation.nodes))
            got = STALLS.iteration_time(info.spec, info.allocation, view.cluster).total_s
            fair = STALLS.iteration_time(info.spec, prop, view.cluster).total_s
            assert got <= fair * (1 + 1e-9), f"{info.job_id} ({info.spec.model}) slower than proportional"
            self.jobs_checked += 1
        self.checks += 1
        return self.inner.schedule(view, state)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(jobs=traces(), ordering=st.sampled_from(sorted(ORDERINGS)))
def test_tune_never_slower_than_proportional_nor_over_allocated(small_cluster, jobs, ordering):
    guarded = Guarded(make_policy(f"synergy-tune:{ordering}"))
    sim = Simulator(small_cluster, guarded, STALLS)
    run = sim.run(jobs)
    assert guarded.checks == sim.core.passes > 0
    check_ledger(sim.core.view(float("inf")))
    assert run.rejected == []
    assert all(r.state is JobState.COMPLETED for r in sim.core.records.values())


def test_the_guarantee_is_checked_against_running_jobs(small_cluster):
    """The property tests above check the guarantee only on running jobs: make sure it is exercised."""
    jobs = [JobSpec(job_id=f"g{i}", submit_time=60.0 * i, model=MODELS[i], num_gpus=1, iterations=2000)
            for i in range(6)]
    guarded = Guarded(make_policy("synergy-tune:fifo"))
    Simulator(small_cluster, guarded, STALLS).run(jobs)
    assert guarded.jobs_checked >= 5 and guarded.checks >= 6


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(jobs=traces(), mechanism=st.sampled_from(["proportional", "synergy-greedy"]))
def test_other_mechanisms_never_over_allocate(small_cluster, jobs, mechanism):
    guarded = Guarded(make_policy(f"{mechanism}:las"))
    sim = Simulator(small_cluster, guarded, STALLS)
    sim.run(jobs)
    assert guarded.checks == sim.core.passes > 0
    check_ledger(sim.core.view(float("inf")))
    assert all(r.state is JobState.COMPLETED for r in sim.core.records.values())


def test_expect_uses_the_allocations_cpus_and_memory(small_cluster):
    """Enforcement: a SetResources changes the job's rate through the drivers' Pacer."""
    c = core(small_cluster, "synergy-tune:fifo")
    c.submit(job(1, model="alexnet", job_id="a"), 0.0)
    actions = c.schedule(0.0)
    fast = Pacer(c, STALLS).update(actions, 0.0)[0].iteration_s
    c.submit(job(1, model="alexnet", job_id="b"), 0.0)
    c2 = core(small_cluster, "proportional:fifo")
    c2.submit(job(1, model="alexnet", job_id="a"), 0.0)
    slow = Pacer(c2, STALLS).update(c2.schedule(0.0), 0.0)[0].iteration_s
    assert slow / fast == pytest.approx(2.94, rel=0.01)


@pytest.mark.parametrize(("name", "servers"), [("synergy-32", 4), ("synergy-128", 16), ("synergy-512", 64)])
def test_synergy_clusters_are_built_in(name, servers):
    """§5.1's 128-GPU cluster and §5.3.1's 512 GPUs "across 64 servers" (Table 6a), Synergy's server."""
    cluster = load_cluster(name)
    assert cluster.total_gpus == 8 * servers and len(cluster.nodes) == servers
    assert {(n.cpus, n.memory_mb, n.gpu_type, n.gpus) for n in cluster.nodes} == {(24, 500_000, "V100", 8)}


def test_srtf_by_speedup_divides_the_remaining_time_by_the_demand_speedup(small_cluster):
    """The public simulator's SRTF key under TUNE (not the paper's, only when named): an alexnet with
    more remaining work than a gnmt job ranks first once its remaining time is divided by its speed-up
    at its demand vector (2.94x); plain SRTF ranks the gnmt first."""
    from halyard.policies.synergy import SrtfBySpeedup

    c = core(small_cluster, "synergy-tune:srtf")
    c.submit(job(1, model="alexnet", job_id="a"), 0.0)
    c.submit(job(1, model="gnmt", job_id="g", iterations=2500), 0.0)  # half alexnet's work at the share
    view = c.view(0.0)
    a, g = c.records["a"], c.records["g"]
    plain = make_policy("synergy-tune:srtf").ordering.key(view, PassState())
    keyed = make_policy("synergy-tune:srtf+srtf-by-speedup").ordering
    assert isinstance(keyed, SrtfBySpeedup)
    by_speedup = keyed.key(view, PassState())
    work_a = a.remaining_iterations(0.0) * a.ideal_iteration_s
    work_g = g.remaining_iterations(0.0) * g.ideal_iteration_s
    ratio = work_a / work_g
    assert 1.0 < ratio < 2.9  # a has more work, less than its speed-up more
    assert plain(g) < plain(a) and by_speedup(a) < by_speedup(g)
    assert by_speedup(a)[0] == pytest.approx(work_a / 2.94, rel=0.01)
    with pytest.raises(ValidationError, match="srtf-by-speedup"):
        make_policy("synergy-tune:las+srtf-by-speedup")


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(jobs=traces())
def test_opt_keeps_the_guarantee_and_the_ledger(small_cluster, jobs):
    """§4.1 constraint (5): OPT's points are never below the proportional throughput."""
    guarded = Guarded(make_policy("synergy-opt:srtf"))
    sim = Simulator(small_cluster, guarded, STALLS)
    sim.run(jobs)
    assert guarded.checks == sim.core.passes > 0
    assert all(r.state is JobState.COMPLETED for r in sim.core.records.values())


def test_an_ilp_stopped_by_its_node_limit_is_reported_and_the_pass_still_places(small_cluster):
    """The ILP's work is bounded by a deterministic node count (synergy_opt.ILP_NODE_LIMIT), not by
    time; a pass that reaches it is counted unsolved and TUNE places the jobs at their demands."""
    from halyard.policies import StagedPolicy
    from halyard.policies.ordering import Fifo
    from halyard.policies.synergy import Opt

    for limit, unsolved in ((0, 1), (None, 0)):  # 0 nodes: HiGHS stops before any answer
        policy = StagedPolicy("synergy-opt:fifo", Fifo(), placement=Opt(node_limit=limit))
        c = SchedulingCore(small_cluster, policy, STALLS)
        for i in range(8):
            c.submit(job(1, model="alexnet", job_id=f"a{i}"), 0.0)
        c.schedule(0.0)
        assert policy.placement.unsolved == unsolved
        assert len(c.running) == 8  # placed either way: never a silent drop


def test_opt_ilp_respects_the_super_machine_s4_1(small_cluster):
    """§4.1 (2)-(4): one point per job, total CPUs and memory within the cluster's; CPUs are
    scarce here (8 alexnet want 96 cores of 48), so the ILP shares them out."""
    policy = make_policy("synergy-opt:fifo")
    c = SchedulingCore(small_cluster, policy, STALLS)
    for i in range(8):
        c.submit(job(1, model="alexnet", job_id=f"a{i}"), 0.0)
    c.schedule(0.0)
    assert len(c.running) == 8
    held = sum(p.cpus for r in c.running.values() for p in r.allocation.nodes)
    assert held <= 48
    assert policy.placement.last_bound >= 8.0  # every job at least at its proportional throughput (W = 1)
    assert all(cpus_memory_per_gpu(r.allocation)[0] >= 3 for r in c.running.values())
