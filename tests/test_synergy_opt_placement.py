"""Synergy-OPT's second LP (§4.1.2, policies/synergy_opt_placement.py) and OPT's use of it."""

from __future__ import annotations

import numpy as np
import pytest
from factories import job
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_properties import check_ledger

from halyard.emulator import PerformanceModel
from halyard.policies import make_policy
from halyard.policies.synergy_opt_placement import Spread, SpreadJob, renew_leases, spread
from halyard.policies.synergy_profile import job_profile
from halyard.scheduling import SchedulingCore

ROUND = 300.0  # a round boundary of the core's default 300 s rounds (Synergy §3 decides only there)

STALLS = PerformanceModel(data_stalls=True)
ALL = np.ones(2, dtype=bool)


def two_jobs(cpus_a: float, cpus_b: float) -> list[SpreadJob]:
    return [SpreadJob("a", 4, cpus_a, 0.0, ALL), SpreadJob("b", 4, cpus_b, 0.0, ALL)]


def test_worked_example_the_lp_must_split_both_jobs():
    """Two machines of 4 GPUs and 12 CPUs; a (4 GPUs, 16 CPUs) and b (4 GPUs, 8 CPUs). GPUs are
    all used, so x[1,b] = 1 - x[1,a]; machine 1's CPUs: 16 x + 8 (1 - x) <= 12 gives x <= 1/2,
    machine 2's: 16 (1 - x) + 8 x <= 12 gives x >= 1/2. The only solution is x = 1/2: both jobs
    split 2 + 2 GPUs (a needs 16 CPUs, no machine has them: the super machine's vector is not
    realisable whole, §4.1.3)."""
    got = spread(two_jobs(16, 8), np.array([4, 4]), np.array([12, 12]), np.array([1e6, 1e6]))
    assert got.status == "optimal"
    assert got.x == pytest.approx(np.full((2, 2), 0.5))
    assert set(got.split) == {"a", "b"} and got.whole == {}


def test_worked_example_a_unique_whole_placement():
    """The same jobs, machines with 16 and 8 CPUs: machine 2's CPUs 16 (1 - x) + 8 x <= 8 force
    x = 1, i.e. a whole on machine 1 and b whole on machine 2; nothing is fragmented."""
    got = spread(two_jobs(16, 8), np.array([4, 4]), np.array([16, 8]), np.array([1e6, 1e6]))
    assert got.status == "optimal"
    assert got.whole == {"a": 0, "b": 1} and got.split == ()


def test_infeasible_is_reported():
    """CPUs 16 + 16 > 12 + 12 in total: no x satisfies the machine rows; a job with no allowed
    machine and a capacity already overdrawn by fixed (running) jobs are infeasible too."""
    assert spread(two_jobs(16, 16), np.array([4, 4]), np.array([12, 12]), np.array([1e6, 1e6])).status == "infeasible"
    nowhere = [SpreadJob("a", 1, 1, 1, np.zeros(2, dtype=bool))]
    assert spread(nowhere, np.array([4, 4]), np.array([12, 12]), np.array([1e6, 1e6])).status == "infeasible"
    assert spread([], np.array([4, 4]), np.array([-1, 12]), np.array([1e6, 1e6])).status == "infeasible"


def test_capacities_of_different_lengths_are_a_clear_error():
    with pytest.raises(ValueError, match="capacities per machine differ"):
        spread(two_jobs(1, 1), np.array([4, 4]), np.array([12]), np.array([1e6, 1e6]))
    with pytest.raises(ValueError, match="job 'a' needs a machine mask of 3 entries"):
        spread(two_jobs(1, 1), np.array([4, 4, 4]), np.array([12, 12, 12]), np.array([1e6, 1e6, 1e6]))


@settings(max_examples=40, deadline=None)
@given(s=st.integers(1, 5), data=st.data())
def test_basic_solution_fragments_at_most_3s_jobs(s, data):
    """§4.1.2: "the total number of jobs that get fragmented is at most 3s" (a basic solution of
    n + 3s rows); every job placed once, no machine over its GPUs, CPUs or memory."""
    n = data.draw(st.integers(1, 4 * s))
    g = np.array(data.draw(st.lists(st.sampled_from([1, 2, 4]), min_size=n, max_size=n)), dtype=float)
    c = np.array(data.draw(st.lists(st.integers(1, 12), min_size=n, max_size=n)), dtype=float) * g
    m = np.array(data.draw(st.lists(st.integers(10, 250), min_size=n, max_size=n)), dtype=float) * g
    jobs = [SpreadJob(f"j{i}", int(g[i]), c[i], m[i], np.ones(s, dtype=bool)) for i in range(n)]
    caps = np.full(s, 8.0), np.full(s, 24.0 * 4), np.full(s, 500.0 * 4)
    got = spread(jobs, *caps)
    if got.status == "infeasible":  # then the super machine (the sums) or a job's machine rows do not fit
        return
    assert got.status == "optimal"
    x = got.x
    assert x.sum(axis=1) == pytest.approx(np.ones(n))
    for need, cap in zip((g, c, m), caps, strict=True):
        assert (need @ x <= cap + 1e-6).all()
    assert len(got.split) <= 3 * s


def tune_throughput(c: SchedulingCore) -> float:
    """Sum over running jobs of W_j at the CPUs and memory per GPU they hold (the ILP's (1))."""
    view = c.view(0.0)
    total = 0.0
    for info in view.running.values():
        parts = info.allocation.nodes
        k = sum(len(part.gpus) for part in parts)
        total += job_profile(view, info).speedup(sum(part.cpus for part in parts) / k,
                                                 sum(part.memory_mb for part in parts) / k)
    return total


MODELS = ["alexnet", "resnet18", "mobilenetv2", "m5", "resnet50", "gnmt", "lstm", "deepspeech"]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(jobs=st.lists(st.tuples(st.sampled_from(MODELS), st.sampled_from([1, 1, 2, 4])), min_size=1, max_size=12))
def test_opt_bound_is_never_below_tune_s4_1(small_cluster, jobs):
    """Theorem 4.1: the ILP's objective bounds any allocation that keeps the guarantee, TUNE's
    included (same runnable set: both rank FIFO and fit GPUs the same way). Tolerance: HiGHS'
    relative MIP gap, 1e-4."""
    tune = SchedulingCore(small_cluster, make_policy("synergy-tune:fifo"), STALLS)
    policy = make_policy("synergy-opt:fifo")
    opt = SchedulingCore(small_cluster, policy, STALLS)
    for i, (model, gpus) in enumerate(jobs):
        for c in (tune, opt):
            c.submit(job(gpus, model=model, job_id=f"r{i}"), 0.0)
    tune.schedule(0.0)
    opt.schedule(0.0)
    assert set(tune.running) == set(opt.running)
    assert policy.placement.unsolved == 0 and policy.placement.last_bound is not None
    assert policy.placement.last_bound >= tune_throughput(tune) * (1 - 1e-4)


def test_opt_places_whole_jobs_where_the_second_lp_puts_them(small_cluster):
    """Four alexnet on 16 GPUs and 48 CPUs: the ILP gives each its demand (12 CPUs per GPU), the
    second LP must put one per 12-CPU server (two on one server would need 24): no split, and the
    held allocation is the ILP's vector."""
    policy = make_policy("synergy-opt:fifo")
    c = SchedulingCore(small_cluster, policy, STALLS)
    for i in range(4):
        c.submit(job(1, model="alexnet", job_id=f"a{i}"), 0.0)
    c.schedule(0.0)
    nodes = [r.allocation.nodes[0] for r in c.running.values()]
    assert len({p.node for p in nodes}) == 4
    assert all(p.cpus == 12 for p in nodes)
    assert policy.placement.split_jobs == 0 and policy.placement.spread_failed == 0


def _two_alexnet_left_on_one_server(small_cluster, policy) -> tuple[SchedulingCore, list[str]]:
    """Eight alexnet placed two a server, then all but one server's pair completed at t=10 s."""
    c = SchedulingCore(small_cluster, policy, STALLS)
    for i in range(8):
        c.submit(job(1, model="alexnet", job_id=f"a{i}"), 0.0)
    c.schedule(0.0)
    by_node: dict[str, list[str]] = {}
    for r in c.running.values():
        by_node.setdefault(r.allocation.nodes[0].node, []).append(r.spec.job_id)
    pair = next(ids for ids in by_node.values() if len(ids) == 2)
    for job_id in list(c.running):
        if job_id not in pair:
            c.complete(job_id, 10.0)
    return c, pair


def test_opt_re_places_running_jobs_at_a_round_s3_s4_1(small_cluster):
    """§3 with §4.1: at a round boundary both LPs run over the whole runnable set, running jobs
    included. Eight alexnet share 48 CPUs (6 each, two per server); when only the two on one server
    remain, the ILP gives each 12 CPUs, which one 12-CPU server cannot hold twice: the second LP
    moves one of them (one Migrate) and keeps the other where it runs (§4.3's lease renewal as the
    LP's preference), and the new lstm job gets a server of its own."""
    policy = make_policy("synergy-opt:fifo")
    c, pair = _two_alexnet_left_on_one_server(small_cluster, policy)
    home = c.records[pair[0]].allocation.nodes[0].node
    c.submit(job(1, model="lstm", job_id="l"), 10.0)
    assert c.schedule(10.0) == []  # between rounds nothing changes
    actions = c.schedule(ROUND)
    assert policy.placement.spread_failed == 0 and policy.placement.split_jobs <= 3 * 4  # §4.1.2: <= 3s
    assert sorted(type(a).__name__ for a in actions) == ["Migrate", "SetResources", "Start"]
    assert set(c.running) == {*pair, "l"}
    assert sorted(c.running[j].allocation.nodes[0].cpus for j in pair) == [12, 12]
    assert sum(c.running[j].allocation.nodes[0].node == home for j in pair) == 1
    assert len({r.allocation.nodes[0].node for r in c.running.values()}) == 3
    check_ledger(c.view(ROUND))


def test_renew_leases_permutes_identical_servers_to_keep_running_jobs_s4_3():
    """§4.3's lease renewal on the second LP's answer: the LP put the running job (home: server 0)
    whole on server 1 and a new job on server 0; the two servers are alike, so they are swapped and
    the running job stays. A server that is not alike (another class) is never swapped."""
    jobs = [SpreadJob("run", 2, 6.0, 1000.0, np.ones(3, bool)), SpreadJob("new", 2, 6.0, 1000.0, np.ones(3, bool))]
    x = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    home = np.array([[2.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    answer = Spread("optimal", x, ("run", "new"))
    renewed = renew_leases(answer, jobs, home, ["a", "a", "b"])
    assert renewed.whole == {"run": 0, "new": 1}
    kept = renew_leases(answer, jobs, np.array([[0.0, 0.0, 2.0], [0.0, 0.0, 0.0]]), ["a", "a", "b"])
    assert kept.whole == answer.whole  # its home is in another class: nothing to gain by a swap
    assert renew_leases(Spread("infeasible", None, ("run", "new")), jobs, home, ["a", "a", "b"]).x is None


def test_every_pass_opt_reports_running_jobs_that_cannot_take_their_ilp_vector(small_cluster):
    """``synergy-opt-every-pass`` (Halyard's earlier reading): running jobs keep their GPUs. With the
    pair of alexnet above, the ILP gives each 12 CPUs, which their server (12) cannot
    hold (a new lstm job arrives and triggers the pass): the second LP is infeasible, the pass is
    counted (``spread_failed``) and TUNE's placement of the ILP vectors runs them (never a silent drop)."""
    policy = make_policy("synergy-opt-every-pass:fifo")
    c, pair = _two_alexnet_left_on_one_server(small_cluster, policy)
    c.submit(job(1, model="lstm", job_id="l"), 10.0)  # a pass runs when there is something to place
    c.schedule(10.0)
    assert policy.placement.spread_failed == 1
    assert set(c.running) == {*pair, "l"}
    assert sum(p.cpus for r in c.running.values() for p in r.allocation.nodes) <= 12


def test_fit_running_option_keeps_the_second_lp_for_new_jobs(small_cluster):
    """``synergy-opt-fit-running`` (Halyard's option): the same pair of alexnet on one 12-CPU server
    is re-packed by TUNE's rule first (each at its share after §4.2's revert), and the second LP places
    the new lstm job on what is left: the LP is solved, not counted as failed."""
    policy = make_policy("synergy-opt-fit-running:fifo")
    c, pair = _two_alexnet_left_on_one_server(small_cluster, policy)
    c.submit(job(1, model="lstm", job_id="l"), 10.0)
    c.schedule(10.0)
    assert policy.placement.spread_failed == 0
    assert set(c.running) == {*pair, "l"}
    # §4.2 on their server: the first takes its vector (12), the second does not fit and reverts
    # the first to the share, then takes the share: 3 CPUs each.
    assert [c.running[j].allocation.nodes[0].cpus for j in pair] == [3, 3]
