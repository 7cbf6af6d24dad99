"""``+cassini-lock`` (our option): jobs with near-equal iterations paced on one period keep Cassini's plan.

The unified circle (§4.3.2) rounds near-equal iteration times to one, so Table 4.1's shifts assume the
jobs repeat together; at their own periods they do not, and the fabric puts them anywhere. Paced on a
common period (the agents' grid, §4.4.2 step 3) they keep the planned interleaving.
"""

from __future__ import annotations

import math

import pytest

from halyard.datamodel import Allocation, EventKind, JobSpec, NodeAllocation, parse_cluster
from halyard.emulator import PerformanceModel
from halyard.emulator.contention import DemandProfile, Phase
from halyard.emulator.fabric import Fabric
from halyard.policies import make_policy
from halyard.policies.cassini import LOCK_HEADROOM, LOCK_TOLERANCE, CassiniShifts, lock_periods
from halyard.policies.cassini_math import TIME_QUANTUM_S, AffinityGraph
from halyard.scheduling import Simulator
from halyard.testing.cluster import small_cluster_toml

# Three 2-GPU nodes, 50 Gbit/s NICs: two 3-GPU vgg11 jobs share the middle node's NIC.
TOML = small_cluster_toml(3, gpus_per_node=2).replace("nic_gbit_s = 200", "nic_gbit_s = 50")


def vgg(job_id: str, batch: int, submit: float = 0.0) -> JobSpec:
    return JobSpec(job_id=job_id, submit_time=submit, model="vgg11", batch_size=batch, num_gpus=3, iterations=2000)


def on(*parts: tuple[str, tuple[int, ...]]) -> Allocation:
    return Allocation(tuple(NodeAllocation(n, g, 12, 250_000) for n, g in parts))


def test_paced_jobs_on_one_period_keep_their_phases_in_the_fabric():
    """Two jobs whose iterations differ by 3%, shifted half a period apart on one grid: paced on that
    period the fabric charges them nothing at any epoch; at their own periods (period 0) the phases it
    takes from the grid are each job's own, so the planned half-period gap is lost and they collide."""
    cluster, pm = parse_cluster(TOML), PerformanceModel()
    a, b = on(("r0-n0", (0, 1)), ("r0-n1", (0,))), on(("r0-n2", (0, 1)), ("r0-n1", (1,)))
    sa, sb = vgg("a", 256), vgg("b", 248)
    period = 0.787  # above both dedicated iterations (778 ms and 754 ms)
    assert pm.iteration_time(sb, b, cluster).total_s < pm.iteration_time(sa, a, cluster).total_s < period

    def slowdowns(epoch: float, grid: float) -> tuple[float, float]:
        fabric = Fabric(pm, cluster)
        fabric.place("a", sa, a.with_time_shift(0.0, grid, epoch), 0.0)
        fabric.place("b", sb, b.with_time_shift(period / 2, grid, epoch), 0.0)
        fabric.settle()
        return fabric.slowdown("a"), fabric.slowdown("b")

    for epoch in (100.0, 250.0, 1000.0):
        assert slowdowns(epoch, period) == (1.0, 1.0)
        assert max(slowdowns(epoch, 0.0)) > 1.01


def test_a_paced_profile_is_padded_to_its_cycle():
    """The fabric charges a paced job its wait for the grid as a quiet phase: its profile on every link
    lasts the period, and a shift of a whole period more is the same phase."""
    cluster, pm = parse_cluster(TOML), PerformanceModel()
    a, b = on(("r0-n0", (0, 1)), ("r0-n1", (0,))), on(("r0-n2", (0, 1)), ("r0-n1", (1,)))
    period = 0.8
    fabric = Fabric(pm, cluster)
    fabric.place("a", vgg("a", 256), a.with_time_shift(0.1, period, 5.0), 0.0)
    fabric.place("b", vgg("b", 256), b.with_time_shift(0.1 + 0.4 + period, period, 5.0), 0.0)
    fabric.settle()
    [(_, jobs, profiles, _, phases)] = [row for row in fabric.link_census() if len(row[1]) == 2]
    assert jobs == ("a", "b")
    assert all(p.iteration_s == pytest.approx(period) for p in profiles)
    assert (phases[1] - phases[0]) % period == pytest.approx(0.4)


def profile(iteration_s: float, up_s: float, demand: float = 6.0) -> DemandProfile:
    return DemandProfile((Phase(iteration_s - up_s), Phase(up_s, demand)))


def test_lock_periods_groups_near_equal_jobs_on_compatible_links():
    """Jobs a and b (100 and 101 ms) interleave on link L (shifted half an iteration): one period, the
    longer iteration plus LOCK_HEADROOM rounded up to TIME_QUANTUM_S. c (130 ms, beyond LOCK_TOLERANCE)
    shares L too and is left on its own period, as is everyone when the shifts make L collide."""
    graph = AffinityGraph.of({"a": ("L",), "b": ("L",), "c": ("L",)})
    iters = {"a": 0.100, "b": 0.101, "c": 0.130}
    profiles = {"L": [profile(0.100, 0.02), profile(0.101, 0.02), profile(0.130, 0.01, 1.0)]}
    assert abs(iters["a"] - iters["b"]) <= LOCK_TOLERANCE * 0.101 < abs(iters["a"] - iters["c"])
    expected = math.ceil(0.101 * (1 + LOCK_HEADROOM) / TIME_QUANTUM_S - 1e-9) * TIME_QUANTUM_S
    locked = lock_periods(graph, iters, {"a": 0.0, "b": 0.05, "c": 0.0}, profiles, lambda link: 10.0)
    assert locked == {"a": pytest.approx(expected), "b": pytest.approx(expected)}
    # Up phases on top of each other: 12 GB/s on a 10 GB/s link, nothing is locked
    assert lock_periods(graph, iters, {"a": 0.0, "b": 0.0, "c": 0.0}, profiles, lambda link: 10.0) == {}


def test_cassini_lock_paces_both_jobs_on_one_period():
    """End to end: fifo+cassini-lock shifts both jobs onto one period (the longer dedicated iteration
    plus the headroom, in whole ms) and each then runs one iteration per period until a finishes,
    when b is released to its own iteration; +cassini sends no period. The suffix composes by name
    like +cassini."""
    cluster, pm = parse_cluster(TOML), PerformanceModel()
    jobs = [vgg("a", 256), vgg("b", 252, submit=100.37)]
    policy = make_policy("fifo+cassini-lock")
    assert policy.name == "fifo+cassini-lock" and isinstance(policy.adjusters[-1], CassiniShifts)
    sim = Simulator(cluster, policy, pm)
    sim.run(jobs)
    records = sim.core.records
    dedicated = {j: pm.iteration_time(records[j].spec, records[j].allocation, cluster).total_s for j in "ab"}
    period = math.ceil(max(dedicated.values()) * (1 + LOCK_HEADROOM) / TIME_QUANTUM_S - 1e-9) * TIME_QUANTUM_S
    a, b = records["a"], records["b"]
    # a finished paced; b, left alone on the link, was unpaced at that instant
    assert a.allocation.time_shift_period_s == pytest.approx(period) and b.allocation.time_shift_period_s == 0.0
    shifts = [(e.job_id, e.time) for e in sim.core.log if e.kind is EventKind.TIME_SHIFT]
    assert shifts == [("a", b.spec.submit_time), ("b", b.spec.submit_time), ("b", a.end_time)]
    # b runs every iteration on the grid from its start until a ends, then at its own speed
    paced = (a.end_time - b.spec.submit_time) / period
    assert b.end_time == pytest.approx(a.end_time + (b.spec.iterations - paced) * dedicated["b"], abs=period)
    plain = Simulator(cluster, make_policy("fifo+cassini"), pm)
    plain.run(jobs)
    assert {plain.core.records[j].allocation.time_shift_period_s for j in "ab"} == {0.0}


def test_a_lock_is_released_when_the_partner_finishes():
    """A lock is for a partner: when the short job b finishes with nothing waiting, a (left alone on the
    shared NIC) is unpaced and runs its remaining iterations at its own dedicated iteration, not the
    padded period chosen for b (the old adjuster returned early without a start, so a stayed paced)."""
    cluster, pm = parse_cluster(TOML), PerformanceModel()
    sim = Simulator(cluster, make_policy("fifo+cassini-lock"), pm)
    sim.run([vgg("a", 256), JobSpec(job_id="b", submit_time=100.37, model="vgg11", batch_size=252, num_gpus=3,
                                    iterations=300)])
    a, b = sim.core.records["a"], sim.core.records["b"]
    own = pm.iteration_time(a.spec, a.allocation, cluster).total_s
    period = math.ceil(own * (1 + LOCK_HEADROOM) / TIME_QUANTUM_S - 1e-9) * TIME_QUANTUM_S  # a is the longer
    assert a.allocation.time_shift_period_s == 0.0
    assert [(e.job_id, e.time) for e in sim.core.log if e.kind is EventKind.TIME_SHIFT][-1] == ("a", b.end_time)
    # alone at its own speed, paced while b ran, then alone again (the old code: paced to the end)
    left = a.spec.iterations - b.spec.submit_time / own - (b.end_time - b.spec.submit_time) / period
    assert a.end_time == pytest.approx(b.end_time + left * own, abs=period)



async def test_a_released_lock_replays_its_simulation():
    """The release is the core's decision, so `replay` (real control plane, gRPC, emulated agents) makes it
    at the same instant with the same seconds as `simulate`, and a's JCT agrees."""
    from halyard.experiments.replay import replay

    cluster, pm = parse_cluster(TOML), PerformanceModel()
    jobs = [vgg("a", 256), JobSpec(job_id="b", submit_time=100.37, model="vgg11", batch_size=252, num_gpus=3,
                                   iterations=300)]
    sim = Simulator(cluster, make_policy("fifo+cassini-lock"), pm)
    sim.run(jobs)

    def shifts(core) -> list[tuple[float, str, str]]:
        return [(e.time, e.job_id, e.detail) for e in core.log if e.kind is EventKind.TIME_SHIFT]

    run = await replay(jobs, cluster, TOML, policy="fifo+cassini-lock", speedup=1000.0)
    assert shifts(run.core) == shifts(sim.core) and len(shifts(sim.core)) == 3
    assert run.core.records["a"].end_time == pytest.approx(sim.core.records["a"].end_time, rel=0.02)


def test_a_group_that_loses_its_longest_member_is_paced_on_its_own_longest():
    """Three vgg11 jobs (778, 766 and 790 ms) share r0-n1's NIC and are locked on one period, the longest
    iteration + LOCK_HEADROOM (799 ms). When c, the longest, finishes (a pass with nothing placed and
    nothing waiting), a and b are re-paced on a's 778 ms + 1% (787 ms); the next pass changes nothing.
    The old adjuster returned at once without a placement change and kept them on c's period."""
    from policy_fakes import FakeJob, view_of

    from halyard.policies import PassState, Plan
    from halyard.policies.plan import SetTimeShift

    cluster = parse_cluster(small_cluster_toml(4, gpus_per_node=4).replace("nic_gbit_s = 200", "nic_gbit_s = 50"))
    pm = PerformanceModel()

    def across(outer: str, gpu: int) -> Allocation:
        return Allocation((NodeAllocation(outer, (0, 1, 2), 12, 250_000), NodeAllocation("r0-n1", (gpu,), 4, 80_000)))

    specs = {j: JobSpec(j, 0.0, "vgg11", 4, batch_size=b, iterations=2000) for j, b in (("a", 256), ("b", 252),
                                                                                      ("c", 260))}
    placed = {"a": across("r0-n0", 0), "b": across("r0-n2", 1), "c": across("r0-n3", 2)}
    own = {j: pm.iteration_time(specs[j], placed[j], cluster).total_s for j in specs}
    assert own["b"] < own["a"] < own["c"] <= own["b"] * (1 + LOCK_TOLERANCE) ** 2

    def pass_at(now: float, running: dict[str, Allocation]) -> dict[str, SetTimeShift]:
        view = view_of(cluster, now, [FakeJob(specs[j], allocation=a) for j, a in running.items()], [], perf=pm)
        plan = Plan()
        CassiniShifts(lock=True).adjust(view, plan, view.free.copy(), PassState())
        return {a.job_id: a for a in plan.actions if isinstance(a, SetTimeShift)}

    def period_for(longest: float) -> float:
        return math.ceil(longest * (1 + LOCK_HEADROOM) / TIME_QUANTUM_S - 1e-9) * TIME_QUANTUM_S

    locked = {j: placed[j].with_time_shift(shift, period_for(own["c"]), 10.0)
              for j, shift in (("a", 0.0), ("b", 0.111), ("c", 0.178))}
    after = pass_at(500.0, {j: locked[j] for j in "ab"})  # c has finished
    assert {j: a.period_s for j, a in after.items()} == {"a": pytest.approx(period_for(own["a"])),
                                                        "b": pytest.approx(period_for(own["a"]))}
    repaced = {j: locked[j].with_time_shift(a.seconds, a.period_s, 500.0) for j, a in after.items()}
    assert pass_at(600.0, repaced) == {}  # settled: no shift is sent again
