"""Link contention wired into the drivers: the fabric, the Pacer, the simulator, replay and agents.

Cassini §4.1's rule at cluster level: jobs whose all-reduces cross the same NIC
slow each other when their Up phases overlap and not when they interleave, and
a job speeds up again when its co-runner leaves.
"""

from __future__ import annotations

import random

import pytest
from factories import job

from halyard.datamodel import Allocation, EventKind, JobState, NodeAllocation, parse_cluster
from halyard.emulator import PerformanceModel
from halyard.emulator.contention import (
    data_parallel_profile,
    mean_field_iteration_times,
    profile_from_iteration,
    shared_link_iteration_times,
)
from halyard.emulator.fabric import FLUID_MAX_JOBS, SIM_ITERATIONS, SIM_STEADY, Fabric, link_gbytes
from halyard.experiments.replay import replay
from halyard.policies import make_policy
from halyard.scheduling import Simulator, summarize
from halyard.testing.cluster import small_cluster_toml

# Three 4-GPU nodes in one rack: two 6-GPU FIFO jobs land on n0:4+n1:2 and n2:4+n1:2 and share n1's NIC.
THREE_NODES = small_cluster_toml(3, gpus_per_node=4)
# vgg11's all-reduce is about a quarter of its iteration on these links, at about 21 of the NIC's 25 GB/s.
MODEL = "vgg11"


def alloc(*parts: tuple[str, tuple[int, ...]], shift: float = 0.0) -> Allocation:
    return Allocation(tuple(NodeAllocation(node, gpus, 0, 0) for node, gpus in parts), shift)


A_PARTS = (("r0-n0", (0, 1)), ("r0-n1", (0, 1)))
B_PARTS = (("r0-n0", (2, 3)), ("r0-n1", (2, 3)))


@pytest.fixture
def fabric(small_cluster, perf):
    return Fabric(perf, small_cluster)


def test_links_a_placement_crosses(fabric):
    assert fabric.links_of(alloc(("r0-n0", (0, 1, 2, 3)))) == ()
    same_rack = fabric.links_of(alloc(*A_PARTS))
    assert [(link.kind, link.name) for link in same_rack] == [("nic", "r0-n0"), ("nic", "r0-n1")]
    across = fabric.links_of(alloc(("r0-n0", (0,)), ("r1-n0", (0,))))
    assert [(link.kind, link.name) for link in across] == [("nic", "r0-n0"), ("nic", "r1-n0"),
                                                           ("uplink", "r0"), ("uplink", "r1")]
    assert across[2].capacity_gbyte_s == 50.0  # 400 Gbit/s, no spine oversubscription


def test_link_bytes_are_the_two_level_all_reduce():
    """2 (m-1)/m x S through each node's NIC (reduce-scatter + all-gather among m nodes)."""
    assert link_gbytes(1e9, 2) == pytest.approx(1.0)
    assert link_gbytes(1e9, 4) == pytest.approx(1.5)


def test_aligned_jobs_on_a_nic_slow_each_other_as_the_fluid_model_says(fabric, perf, small_cluster):
    spec = job(4, model=MODEL, job_id="a")
    fabric.place("a", spec, alloc(*A_PARTS), 0.0)
    fabric.place("b", job(4, model=MODEL, job_id="b"), alloc(*B_PARTS), 0.0)
    changed = fabric.settle()
    dedicated = perf.iteration_time(spec, alloc(*A_PARTS), small_cluster)
    profile = profile_from_iteration(dedicated, link_gbytes(perf.profile(MODEL).gradient_bytes, 2))
    expected = shared_link_iteration_times([profile, profile], 25.0, iterations=SIM_ITERATIONS,
                                           steady=SIM_STEADY).slowdown([profile, profile])
    assert changed == pytest.approx({"a": expected[0], "b": expected[1]})
    assert changed["a"] > 1.1
    contended = fabric.contended("a", dedicated)
    assert contended.total_s == pytest.approx(dedicated.total_s * changed["a"])
    assert contended.compute_s == dedicated.compute_s  # the extra time is exposed communication
    assert contended.exposed_s - dedicated.exposed_s == pytest.approx(contended.total_s - dedicated.total_s)


def test_interleaved_jobs_run_at_dedicated_speed(fabric, perf, small_cluster):
    """Cassini's premise: Up phases shorter than half an iteration, half an iteration apart, never meet;
    a time-shift fixes the phase the same way a later start does."""
    spec = job(4, model=MODEL, job_id="a")
    period = perf.iteration_time(spec, alloc(*A_PARTS), small_cluster).total_s
    fabric.place("a", spec, alloc(*A_PARTS), 0.0)
    fabric.place("b", job(4, model=MODEL, job_id="b"), alloc(*B_PARTS), period / 2)
    fabric.settle()
    assert fabric.slowdown("a") == fabric.slowdown("b") == 1.0
    fabric.place("b", job(4, model=MODEL, job_id="b"), alloc(*B_PARTS, shift=period / 2), 0.0)
    fabric.settle()
    assert fabric.slowdown("b") == 1.0


def test_a_job_that_leaves_gives_its_co_runner_the_link_back(fabric):
    fabric.place("a", job(4, model=MODEL, job_id="a"), alloc(*A_PARTS), 0.0)
    fabric.place("b", job(4, model=MODEL, job_id="b"), alloc(*B_PARTS), 0.0)
    fabric.settle()
    assert fabric.slowdown("b") > 1.0
    fabric.remove("a")
    assert fabric.settle() == {"b": 1.0}
    assert fabric.slowdown("b") == 1.0
    assert fabric.settle() == {}  # nothing changed since


def test_mean_field_limit():
    """Every active flow at one level lam with sum_j B_j / T_j(lam) = C: three jobs that are Up half
    the iteration at the full capacity need 1.5 links on average, so each takes 1.5x; two fit."""
    p = data_parallel_profile(1.0, 0.5, 10.0)
    assert mean_field_iteration_times([p, p], 10.0) == (1.0, 1.0)
    assert mean_field_iteration_times([p, p, p], 10.0) == pytest.approx((1.5, 1.5, 1.5))


def test_mean_field_slows_a_little_less_than_the_fluid_model():
    """It drops the fluctuations in how many jobs are Up at once: on random links of 5-8 jobs it
    gives 7% shorter iterations than the fluid model on average (-23% .. +5% per job)."""
    rng = random.Random(7)
    gaps = []
    for _ in range(12):
        profiles = []
        for _ in range(rng.randint(5, 8)):
            period = rng.uniform(0.3, 3.0)
            profiles.append(data_parallel_profile(period, period * rng.uniform(0.1, 0.6), rng.uniform(5, 12)))
        shifts = [rng.uniform(0, p.iteration_s) for p in profiles]
        fluid = shared_link_iteration_times(profiles, 20.0, time_shifts_s=shifts).iteration_s
        field = mean_field_iteration_times(profiles, 20.0)
        gaps += [m / f - 1 for m, f in zip(field, fluid, strict=True)]
    assert -0.12 < sum(gaps) / len(gaps) < -0.02
    assert min(gaps) > -0.3 and max(gaps) < 0.1


def test_cached_link_states_are_what_a_fresh_fabric_solves(perf):
    """The cache (fluid links keyed by profiles and phases, mean-field links by their profiles alone)
    and its bound change no result: after every change -- a job preempted and restarted on the same
    links at another phase, more jobs on a NIC than the fluid simulation takes -- each slowdown is
    what a fabric that never solved anything gives for the same placements."""
    cluster = parse_cluster(small_cluster_toml(2, gpus_per_node=8))
    fabrics = [Fabric(perf, cluster), Fabric(perf, cluster, cache_entries=3)]  # remembers all; evicts all the time
    rng = random.Random(2)
    placed: dict[str, tuple] = {}
    free = list(range(8))
    contended = [0, 0]  # changes after which some job was slowed: on fluid links, on mean-field links
    restarted = 0
    for step in range(120):
        op = rng.random()
        if free and (op < 0.5 or not placed):  # a new job on one GPU of each node
            gpu = free.pop(rng.randrange(len(free)))
            job_id = f"j{step}"
            spec = job(2, model=rng.choice([MODEL, "gnmt"]), job_id=job_id)  # both slowed when crowded
            placed[job_id] = (spec, alloc(("r0-n0", (gpu,)), ("r0-n1", (gpu,))), rng.uniform(0.0, 5.0), gpu)
        elif op < 0.75:  # preempted, then restarted on the same GPUs at another phase
            job_id = rng.choice(sorted(placed))
            for fabric in fabrics:
                fabric.remove(job_id)
                fabric.settle()
            spec, allocation, _, gpu = placed[job_id]
            placed[job_id] = (spec, allocation, rng.uniform(0.0, 5.0), gpu)
            restarted += 1
        else:
            job_id = rng.choice(sorted(placed))
            free.append(placed.pop(job_id)[3])
        fresh = Fabric(perf, cluster)
        for fabric in fabrics:
            if job_id in placed:
                fabric.place(job_id, *placed[job_id][:3])
            else:
                fabric.remove(job_id)
            fabric.settle()
        for other, (spec, allocation, start, _) in placed.items():
            fresh.place(other, spec, allocation, start)
        fresh.settle()
        expected = {j: fresh.slowdown(j) for j in placed}
        for fabric in fabrics:
            assert {j: fabric.slowdown(j) for j in placed} == expected
        slowed = any(s > 1.0 for s in expected.values())
        contended[len(placed) > FLUID_MAX_JOBS] += slowed
    assert all(contended) and restarted  # slowed on fluid and on mean-field links; restarts met


# --- the drivers ----------------------------------------------------------------------------------

def contended_trace(iterations_a: int = 3000, iterations_b: int = 6000):
    return [job(6, model=MODEL, job_id="a", iterations=iterations_a),
            job(6, model=MODEL, job_id="b", iterations=iterations_b)]


def test_the_simulator_slows_co_runners_and_speeds_the_survivor_up():
    """a and b start together on a shared NIC; after a ends, b finishes its remaining iterations at
    its dedicated rate: finish_b = t_a + (N_b - t_a / (T_b s)) x T_b."""
    cluster = parse_cluster(THREE_NODES)
    sim = Simulator(cluster, make_policy("fifo"), PerformanceModel())
    sim.run(contended_trace())
    a, b = sim.core.records["a"], sim.core.records["b"]
    assert set(a.allocation.node_names) & set(b.allocation.node_names) == {"r0-n1"}
    pm = PerformanceModel()
    t_a_dedicated = pm.iteration_time(a.spec, a.allocation, cluster).total_s
    t_b = pm.iteration_time(b.spec, b.allocation, cluster).total_s
    slowdown = a.end_time / (3000 * t_a_dedicated)
    assert slowdown > 1.1
    done_b = a.end_time / (t_b * slowdown)
    assert b.end_time == pytest.approx(a.end_time + (6000 - done_b) * t_b, rel=1e-9)
    off = Simulator(cluster, make_policy("fifo"), PerformanceModel(contention="off"))
    off.run(contended_trace())
    assert off.core.records["a"].end_time == pytest.approx(3000 * t_a_dedicated)
    assert b.exposed_comm_s(b.end_time) > off.core.records["b"].exposed_comm_s(b.end_time)


async def test_replay_makes_the_simulators_contended_schedule():
    """DESIGN.md's invariant with contention on: the control plane re-rates co-runners the way the
    simulator does, and the JCTs agree."""
    cluster = parse_cluster(THREE_NODES)
    jobs = [*contended_trace(2000, 4000), job(4, model="resnet50", job_id="c", iterations=500, submit=30.0)]
    sim = Simulator(cluster, make_policy("fifo"), PerformanceModel())
    sim.run(jobs)
    expected = summarize(sim.core, policy="fifo", trace_jobs=len(jobs), rejected=0, wall_s=1.0)
    run = await replay(jobs, cluster, THREE_NODES, policy="fifo", speedup=2000.0)
    assert run.summary["completed"] == len(jobs)
    for job_id in ("a", "b", "c"):
        assert run.core.records[job_id].end_time - run.core.records[job_id].spec.submit_time == pytest.approx(
            sim.core.records[job_id].end_time - sim.core.records[job_id].spec.submit_time, rel=0.02)
    assert run.summary["avg_jct_s"] == pytest.approx(expected["avg_jct_s"], rel=0.02)


async def test_emulated_agents_run_at_the_contended_rate_and_speed_up_when_told():
    """Without lockstep the agents decide when jobs finish: Launch carries each job's link slowdown,
    and when a co-runner leaves, a Reconfigure tells the survivor's agents its new rate."""
    from halyard.testing import TestCluster
    from halyard.v1 import job_service_pb2 as jpb
    from halyard.v1 import job_service_pb2_grpc as jgrpc
    from halyard.v1 import types_pb2 as tpb

    async with TestCluster(cluster_toml=THREE_NODES, heartbeat_s=0.05, heartbeat_timeout_s=5.0) as tc:
        stub = jgrpc.JobServiceStub(tc.channel)
        for job_id, iterations in (("a", 300), ("b", 600)):
            await stub.SubmitJob(jpb.SubmitJobRequest(spec=tpb.JobSpec(job_id=job_id, model=MODEL, num_gpus=6,
                                                                      iterations=iterations)))
        await tc.wait_for(lambda: all(tc.job(j).state is JobState.RUNNING for j in "ab"))
        await tc.wait_for(lambda: all("b" in tc.agents[n].jobs for n in tc.job("b").allocation.node_names))
        b = tc.job("b")
        dedicated = tc.perf.iteration_time(b.spec, b.allocation, tc.cluster).total_s
        assert b.iteration_s > 1.1 * dedicated
        leader = tc.agents[b.allocation.node_names[0]]
        assert leader.jobs["b"].iteration_s == pytest.approx(b.iteration_s)
        await tc.advance(tc.job("a").finish_time() - tc.now() + 1e-6)
        await tc.wait_for(lambda: tc.job("a").state is JobState.COMPLETED)
        await tc.wait_for(lambda: leader.jobs["b"].iteration_s == pytest.approx(dedicated))
        assert tc.job("b").iteration_s == pytest.approx(dedicated)
        await tc.advance(tc.job("b").finish_time() - tc.now() + 1e-6)
        await tc.wait_for(lambda: tc.job("b").state is JobState.COMPLETED)
        assert tc.job("b").end_time == pytest.approx(sim_finish_b(THREE_NODES, 300, 600), rel=1e-6)
        kinds = [e.kind for e in tc.control_plane.core.log if e.job_id == "b"]
        assert kinds == [EventKind.SUBMITTED, EventKind.STARTED, EventKind.COMPLETED]


def sim_finish_b(toml: str, iterations_a: int, iterations_b: int) -> float:
    sim = Simulator(parse_cluster(toml), make_policy("fifo"), PerformanceModel())
    sim.run(contended_trace(iterations_a, iterations_b))
    return sim.core.records["b"].end_time


def test_phases_are_taken_from_the_runs_time_origin(small_cluster, perf):
    """Two partly overlapping jobs slow each other the same whether the clock reads trace time or
    trace time plus an offset (replay used to start its trace whole rounds later), once the fabric is
    told the origin; without it the phases land in other 1/PHASE_BINS bins and the slowdown moves."""
    a = alloc(("r0-n0", (0, 1)), ("r0-n1", (0, 1)))
    b = alloc(("r0-n0", (2, 3)), ("r0-n1", (2, 3)))
    spec_a, spec_b = job(4, model="vgg11", job_id="a"), job(4, model="vgg11", job_id="b")
    iteration = perf.job_timing(spec_a, a, small_cluster).iteration.total_s
    lag = iteration * (0.2 + 1 / 128)  # b's all-reduce starts a fifth of an iteration after a's

    def slowdowns(offset: float, origin: float) -> tuple[float, float]:
        f = Fabric(perf, small_cluster)
        f.place("a", spec_a, a, 10.0 + offset, origin_s=origin)
        f.place("b", spec_b, b, 10.0 + lag + offset, origin_s=origin)
        f.settle()
        return f.slowdown("a"), f.slowdown("b")

    base = slowdowns(0.0, 0.0)
    assert base[0] > 1.01  # they do collide
    offsets = (6900.0, 19800.0, 24300.0)  # whole rounds of 300 s
    assert all(slowdowns(off, off) == base for off in offsets)
    assert any(slowdowns(off, 0.0) != base for off in offsets)


def test_one_settle_over_many_links_is_a_settle_after_every_placement(perf):
    """A settle solves every dirty link together (fluid NICs and mean-field uplinks in one compiled call
    each, equal states once); each job's slowdown is what settling after every single placement gives."""
    cluster = parse_cluster(small_cluster_toml(8, gpus_per_node=8, nodes_per_rack=2))
    rng = random.Random(4)
    placements = []
    for k in range(14):  # one GPU on each of 2-3 random nodes, often across racks
        nodes = rng.sample([n.name for n in cluster.nodes], rng.randint(2, 3))
        spec = job(len(nodes), model=rng.choice([MODEL, "gnmt"]), job_id=f"j{k}")
        placements.append((spec.job_id, spec, alloc(*((node, (k % 8,)) for node in nodes)), rng.uniform(0.0, 5.0)))
    together, one_by_one = Fabric(perf, cluster), Fabric(perf, cluster)
    for job_id, spec, allocation, start in placements:
        together.place(job_id, spec, allocation, start)
        one_by_one.place(job_id, spec, allocation, start)
        one_by_one.settle()
    together.settle()
    slowdowns = {job_id: together.slowdown(job_id) for job_id, *_ in placements}
    assert slowdowns == {job_id: one_by_one.slowdown(job_id) for job_id, *_ in placements}
    census = together.link_census()
    assert any(len(ids) > FLUID_MAX_JOBS and max(s) > 1.0 for _, ids, _, s, _ in census)  # mean-field, slowed
    assert any(2 <= len(ids) <= FLUID_MAX_JOBS and max(s) > 1.0 for _, ids, _, s, _ in census)  # fluid, slowed
