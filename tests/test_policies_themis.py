"""The Cassini thesis' baselines (§4.4.2, §4.5.1): Themis with leases, and Random placement."""

from __future__ import annotations

from policy_fakes import FakeJob, on, view_of

from halyard.datamodel import JobSpec, parse_cluster
from halyard.policies import make_policy
from halyard.policies.passstate import PassState
from halyard.policies.plan import Preempt, Start
from halyard.policies.themis import LEASE_S, RandomPlacement
from halyard.testing.cluster import small_cluster_toml

ONE = parse_cluster(small_cluster_toml(1))


def spec(job_id: str, gpus: int = 8, submit: float = 0.0) -> JobSpec:
    return JobSpec(job_id=job_id, submit_time=submit, model="resnet50", num_gpus=gpus, iterations=1000)


def test_a_lease_protects_a_running_job_until_it_expires():
    """§4.4.2/§4.5.1: a job holds its GPUs for its lease (10 min) even when a waiting job is worse off
    in finish-time fairness; once the lease expires its GPUs go to the auction, which the waiting
    job (higher rho) wins: the holder is preempted and the other starts."""
    policy = make_policy("themis")
    for now, preempted in ((LEASE_S - 1.0, False), (LEASE_S + 1.0, True)):
        holder = FakeJob(spec("h"), allocation=on(ONE, ("r0-n0", 8)), last_assignment_time=0.0, done=500,
                         run_s=now)
        waiting = FakeJob(spec("w"), arrival_seq=1)
        plan = policy.schedule(view_of(ONE, now, [holder], [waiting]), PassState())
        assert (Preempt("h") in plan.actions) is preempted
        assert any(isinstance(a, Start) and a.job_id == "w" for a in plan.actions) is preempted
        if not preempted:
            assert "w" in plan.unplaced  # it waits, and says why


def test_an_expired_lease_that_wins_the_auction_keeps_its_gpus():
    """A job whose lease expired but is the worst off (highest rho) wins again: no preemption."""
    policy = make_policy("themis")
    holder = FakeJob(spec("h"), allocation=on(ONE, ("r0-n0", 8)), last_assignment_time=0.0, done=10,
                     run_s=5000.0)
    late = FakeJob(spec("w", submit=4990.0), arrival_seq=1, pending_since=4990.0)
    plan = policy.schedule(view_of(ONE, 5000.0, [holder], [late]), PassState())
    assert not plan.actions


def test_random_placement_is_random_and_reproducible():
    """§4.5.1 Random: workers on random usable GPUs -- reproducible for the same job and pass, spread
    over nodes (unlike a consolidated placement), and its candidates are distinct draws."""
    cluster = parse_cluster(small_cluster_toml(8))
    view = view_of(cluster, 10.0, [], [FakeJob(spec("r", gpus=4))])
    placement = RandomPlacement(seed=1)
    job = view.pending[0]
    a = placement.place(view, job, 4, view.free.copy(), PassState())
    b = placement.place(view, job, 4, view.free.copy(), PassState())
    assert a == b and a.num_gpus == 4 and len(a.nodes) > 1
    other = RandomPlacement(seed=2).place(view, job, 4, view.free.copy(), PassState())
    assert other != a
    candidates = placement.candidates(view, job, 4, view.free.copy(), PassState(), 5)
    assert candidates[0] == a and len({c for c in candidates}) == len(candidates) > 1
