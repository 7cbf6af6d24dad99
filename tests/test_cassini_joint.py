"""``+cassini-joint``: Algorithm 2 over cluster-wide candidates (thesis §4.4.2 steps 1-2).

Themis' arbiter returns up to K placements of the round's whole set of winners, all with the same
finish-time fairness; Cassini scores each by the mean compatibility of its links (lines 3-23) and
keeps the top one (lines 24-25: sort decreasing, take the first, so ties keep the arbiter's order).
"""

from __future__ import annotations

import pytest
from policy_fakes import FakeJob, view_of

from halyard.datamodel import Allocation, JobSpec, NodeAllocation, ValidationError, parse_cluster
from halyard.emulator import PerformanceModel
from halyard.policies import make_policy
from halyard.policies.cassini import CassiniJointPlacement, CassiniPlacement
from halyard.policies.passstate import PassState
from halyard.policies.placement import FirstFitConsolidated
from halyard.policies.plan import Plan, Start
from halyard.scheduling import Simulator
from halyard.testing.cluster import small_cluster_toml

# Three racks of four 2-GPU nodes (r0-n0 .. r2-n3), 50 Gbit/s NICs: an all-reduce fills a NIC.
CLUSTER = small_cluster_toml(12, gpus_per_node=2).replace("nic_gbit_s = 200", "nic_gbit_s = 50")


def spec(job_id: str, model: str, gpus: int = 2) -> JobSpec:
    return JobSpec(job_id=job_id, submit_time=0.0, model=model, num_gpus=gpus, iterations=2000)


def on(*parts: tuple[str, int]) -> Allocation:
    """One GPU (the given index) on each named node."""
    return Allocation(tuple(NodeAllocation(n, (g,), 3, 62_500) for n, g in parts))


class Offered(CassiniJointPlacement):
    """The arbiter's cluster-wide candidates given, in its order (the rule under test is the choice)."""

    def __init__(self, candidates: list[dict[str, Allocation]]) -> None:
        super().__init__(FirstFitConsolidated())
        self.offered = candidates

    def cluster_candidates(self, view, new, free, state):
        return self.offered


def chosen(candidates: list[dict[str, Allocation]]) -> dict[str, Allocation]:
    """Running x (bert-large, Up 48%) on n0-n1 and y (gnmt, Up 71%) on n2-n3; winners z (bert-large)
    and w (bert-large) placed together by ``Offered(candidates)``: the starts of the plan."""
    cluster = parse_cluster(CLUSTER)
    x = FakeJob(spec("x", "bert-large"), allocation=on(("r0-n0", 0), ("r0-n1", 0)))
    y = FakeJob(spec("y", "gnmt"), allocation=on(("r0-n2", 0), ("r0-n3", 0)))
    z, w = FakeJob(spec("z", "bert-large"), arrival_seq=2), FakeJob(spec("w", "bert-large"), arrival_seq=3)
    view = view_of(cluster, 0.0, [x, y], [z, w], perf=PerformanceModel())
    plan = Plan()
    Offered(candidates).place_all(view, [z, w], [z, w], plan, view.free.copy(), PassState())
    return {a.job_id: a.allocation for a in plan.actions if isinstance(a, Start)}


def test_algorithm_2_takes_the_cluster_wide_candidate_with_the_higher_score():
    """Lines 24-25 over whole placements: candidate A puts z beside y on n3 (bert + gnmt need 48% + 71%
    of the NIC: partly compatible); B puts z beside x on n1 (two bert-large halves: compatible). w is
    alone in both. B scores higher and both winners start where B puts them, though A comes first."""
    alone = on(("r1-n0", 0), ("r1-n1", 0))
    a = {"z": on(("r0-n3", 1), ("r1-n0", 1)), "w": alone}
    b = {"z": on(("r0-n1", 1), ("r1-n0", 1)), "w": alone}
    assert chosen([a, b]) == b
    assert chosen([b, a]) == b


def test_algorithm_2_ties_keep_the_arbiters_first_candidate():
    """Line 24 sorts by score, decreasing, and line 25 takes Candidate[0]: between equal scores (here
    no shared link in either: 1.0) the arbiter's first stays."""
    first = {"z": on(("r1-n0", 0), ("r1-n1", 0)), "w": on(("r2-n0", 0), ("r2-n1", 0))}
    second = {"z": on(("r2-n0", 0), ("r2-n1", 0)), "w": on(("r1-n0", 0), ("r1-n1", 0))}
    assert chosen([first, second]) == first
    assert chosen([second, first]) == second


def test_cluster_wide_candidates_start_the_same_winners_greedy_first():
    """Step 1: every candidate realises the auction's outcome (the same winners start); the first is the
    greedy placement of plain Themis; the others are distinct."""
    cluster = parse_cluster(CLUSTER)
    x = FakeJob(spec("x", "bert-large"), allocation=on(("r0-n0", 0), ("r0-n1", 0)))
    new = [FakeJob(spec(f"n{i}", "bert-large", 3), arrival_seq=i + 2) for i in range(3)]
    view = view_of(cluster, 0.0, [x], new, perf=PerformanceModel())
    joint = CassiniJointPlacement(FirstFitConsolidated())
    cands = joint.cluster_candidates(view, new, view.free.copy(), PassState())
    greedy = FirstFitConsolidated()
    free = view.free.copy()
    for job in new:
        placed = greedy.place(view, job, 3, free, PassState())
        free.take(placed)
        assert cands[0][job.job_id].nodes == placed.nodes
    assert len(cands) > 1
    assert all(set(c) == {j.job_id for j in new} for c in cands)
    assert len({tuple(sorted((j, a.nodes) for j, a in c.items())) for c in cands}) == len(cands)


def test_joint_is_a_named_option_that_runs():
    """``+cassini-joint`` is an augmentation of its own; ``+cassini`` keeps the per-job placement; a batch
    placement is refused with its name."""
    policy = make_policy("themis+cassini-joint")
    assert isinstance(policy.placement, CassiniJointPlacement)
    assert isinstance(make_policy("themis+cassini").placement, CassiniPlacement)
    with pytest.raises(ValidationError, match="cassini-joint"):
        make_policy("synergy-tune:srtf+cassini-joint")
    jobs = [JobSpec(job_id=f"j{i}", submit_time=10.0 * (i // 3), model="bert-large", num_gpus=3, iterations=300)
            for i in range(6)]
    sim = Simulator(parse_cluster(CLUSTER), policy, PerformanceModel())
    sim.run(jobs)
    assert all(r.end_time is not None for r in sim.core.records.values())


class Offering(FirstFitConsolidated):
    """A base placement that offers fixed candidates for a job, in its own order."""

    name = "offering"

    def __init__(self, options: list[Allocation]) -> None:
        self.options = options

    def candidates(self, view, job, gpus, free, state, limit=8):
        return self.options[:limit]


def test_one_winner_gets_the_base_candidates_for_its_workers():
    """§4.4.2 step 1: "selecting which workers ... should be reassigned creates another set of candidate
    placements": a round with one winner offers the base's candidates for it, and Algorithm 2 picks
    the compatible one (z beside x on n1), not the base's first (beside y on n3)."""
    bad, good = on(("r0-n3", 1), ("r1-n0", 1)), on(("r0-n1", 1), ("r1-n0", 1))
    cluster = parse_cluster(CLUSTER)
    x = FakeJob(spec("x", "bert-large"), allocation=on(("r0-n0", 0), ("r0-n1", 0)))
    y = FakeJob(spec("y", "gnmt"), allocation=on(("r0-n2", 0), ("r0-n3", 0)))
    z = FakeJob(spec("z", "bert-large"), arrival_seq=2)
    view = view_of(cluster, 0.0, [x, y], [z], perf=PerformanceModel())
    joint = CassiniJointPlacement(Offering([bad, good]))
    assert [c["z"].nodes for c in joint.cluster_candidates(view, [z], view.free.copy(), PassState())] == [
        bad.nodes, good.nodes]
    plan = Plan()
    joint.place_all(view, [z], [z], plan, view.free.copy(), PassState())
    assert [a.allocation.nodes for a in plan.actions if isinstance(a, Start)] == [good.nodes]
