"""Baseline policy rules: orderings, first-fit consolidated placement, the staged pass."""

from __future__ import annotations

import re

import pytest
from factories import job

from halyard.datamodel import Allocation, NodeAllocation, ValidationError
from halyard.policies import (
    Fifo,
    FirstFitConsolidated,
    FixedSize,
    Las,
    PassState,
    Plan,
    Srtf,
    StagedPolicy,
    Unplaced,
    make_policy,
    policy_names,
)
from halyard.policies.registry import COMMON_PRESETS
from halyard.scheduling import SchedulingCore


def core_with(cluster, perf, policy="fifo") -> SchedulingCore:
    return SchedulingCore(cluster, make_policy(policy), perf)


def occupy(core: SchedulingCore, job_id: str, node: str, gpus: tuple[int, ...]) -> None:
    """Start a job by hand on given GPUs (GPU-proportional CPU and memory)."""
    n = core.cluster.node(node)
    core.submit(job(len(gpus), job_id=job_id), 0.0)
    plan = Plan()
    plan.start(job_id, Allocation((NodeAllocation(node, gpus, n.proportional_cpus(len(gpus)),
                                                  n.proportional_memory_mb(len(gpus))),)))
    core.apply(plan, 0.0)


def place(core: SchedulingCore, gpus: int, **kw) -> Allocation | None:
    spec = job(gpus, **kw)
    rec = core.submit(spec, 0.0)
    placed = FirstFitConsolidated().place(core.view(0.0), rec, gpus, core.free.copy(), PassState())
    return None if isinstance(placed, Unplaced) else placed


def test_placement_prefers_one_node_with_room(small_cluster, perf):
    core = core_with(small_cluster, perf)
    occupy(core, "busy", "r0-n0", (0, 1))
    a = place(core, 3)
    assert a.node_names == ("r0-n1",) and a.nodes[0].gpus == (0, 1, 2)
    # GPU-proportional CPU and memory (Synergy §2): 3 of 4 GPUs -> 3/4 of 12 cores and 250 GB
    assert (a.nodes[0].cpus, a.nodes[0].memory_mb) == (9, 187_500)


def test_placement_fewest_nodes_then_one_rack(small_cluster, perf):
    core = core_with(small_cluster, perf)
    occupy(core, "x", "r0-n0", (0, 1, 2))   # r0: 1 + 4 free; r1: 4 + 4 free
    a = place(core, 8)
    assert a.node_names == ("r1-n0", "r1-n1")  # 2 nodes in one rack, not 3 across racks


def test_placement_spans_racks_when_it_must(small_cluster, perf):
    core = core_with(small_cluster, perf)
    occupy(core, "x", "r0-n0", (0, 1, 2))
    occupy(core, "y", "r1-n1", (0, 1, 2))
    a = place(core, 6)  # free: r0-n0 1, r0-n1 4, r1-n0 4, r1-n1 1
    assert a.num_gpus == 6
    assert {p.node for p in a.nodes} == {"r0-n1", "r1-n0"}


def test_placement_none_when_not_enough(small_cluster, perf):
    core = core_with(small_cluster, perf)
    occupy(core, "x", "r0-n0", (0, 1, 2, 3))
    assert place(core, 13) is None


def test_placement_needs_cpu_for_proportional_share(small_cluster, perf):
    core = core_with(small_cluster, perf)
    core.free.cpus[:] = [0, 2, 12, 12]  # r0 nodes have GPUs but no CPU to go with them
    a = place(core, 2)
    assert a.node_names == ("r1-n0",)


def test_fifo_backfills_small_jobs(small_cluster, perf):
    core = core_with(small_cluster, perf)
    core.submit(job(12, job_id="big", submit=0.0), 0.0)
    core.schedule(0.0)
    core.submit(job(8, job_id="blocked", submit=1.0), 1.0)
    core.submit(job(4, job_id="small", submit=2.0), 2.0)
    started = [a.job_id for a in core.schedule(2.0)]
    assert started == ["small"]


def test_orderings(small_cluster, perf):
    core = core_with(small_cluster, perf)
    a = core.submit(job(1, job_id="a", submit=0.0, iterations=5000), 0.0)
    b = core.submit(job(1, job_id="b", submit=1.0, iterations=100), 1.0)
    c = core.submit(job(4, job_id="c", submit=2.0, iterations=100), 2.0)
    view = core.view(10.0)
    ranked = lambda ordering: [j.job_id for j in sorted([a, b, c], key=ordering.key(view, PassState()))]  # noqa: E731
    assert ranked(Fifo()) == ["a", "b", "c"]
    assert ranked(Srtf()) == ["b", "c", "a"]  # equal remaining iterations: submit time breaks the tie
    assert (Fifo().preemptive, Srtf().preemptive, Las().preemptive) == (False, True, True)
    assert (Srtf().needs_rounds, Las().needs_rounds) == (False, True)


def test_las_ranks_by_attained_gpu_seconds(small_cluster, perf):
    core = core_with(small_cluster, perf, "las")
    occupy(core, "wide", "r0-n0", (0, 1, 2, 3))   # 4 GPUs
    occupy(core, "narrow", "r0-n1", (0,))         # 1 GPU
    fresh = core.submit(job(1, job_id="fresh", submit=50.0), 50.0)
    view = core.view(100.0)
    jobs = [*core.running.values(), fresh]
    assert [j.attained_gpu_s(100.0) for j in jobs] == [400.0, 100.0, 0.0]
    assert [j.job_id for j in sorted(jobs, key=Las().key(view, PassState()))] == ["fresh", "narrow", "wide"]


def test_preemptive_pass_evicts_lowest_priority(small_cluster, perf):
    core = core_with(small_cluster, perf, "srtf")
    core.submit(job(16, job_id="long", iterations=10**6), 0.0)
    core.schedule(0.0)
    core.submit(job(4, job_id="short", submit=5.0, iterations=10), 5.0)
    actions = core.schedule(5.0)
    assert [(type(a).__name__, a.job_id) for a in actions] == [("Preempt", "long"), ("Start", "short")]


def test_unknown_policy_suggests_close_names_and_points_to_the_list():
    """Issue 33: the error listed ~2,000 characters of presets and no "did you mean"."""
    with pytest.raises(ValidationError, match=re.escape("did you mean 'tiresias'")) as misspelt:
        make_policy("tiresas")
    assert "`halyard policies`" in str(misspelt.value) and len(str(misspelt.value)) < 300
    with pytest.raises(ValidationError, match="common presets: fifo, srtf") as far:
        make_policy("round-robin")
    assert len(str(far.value)) < 400
    assert set(COMMON_PRESETS) <= set(policy_names())


def test_preset_names():
    names = policy_names()
    synergy = [f"{m}:{o}" for m in ("proportional", "proportional-every-pass", "synergy-greedy",
                                     "synergy-greedy-every-pass", "synergy-opt", "synergy-opt-every-pass",
                                     "synergy-opt-fit-running",
                                     "synergy-tune", "synergy-tune-every-pass", "synergy-tune-keep-gpus",
                                     "synergy-tune-raise")
               for o in ("fifo", "ftf", "las", "srtf")]
    cassini = ["themis+cassini", "tiresias+cassini", "synergy-tune:srtf+cassini", "pollux", "pollux+cassini"]
    assert names == sorted(["crius", "crius-ddl", "crius-na", "crius-nh", "crius-no-suspend", "elasticflow",
                            "elasticflow-ls", "fcfs",
                            "gavel", "dally", "dally-manual", "dally-literal", "dally-manual-literal",
                            "easyscale-heter", "easyscale-homo", "fifo", "gandiva",
                            "las", "srtf", "tiresias", "yarn-cs", "themis", "random", *synergy, *cassini])


class CountingSize(FixedSize):
    def __init__(self) -> None:
        self.calls = 0

    def gpus(self, view, job) -> int:
        self.calls += 1
        return super().gpus(view, job)


def test_fifo_pass_stops_when_nothing_left_fits(small_cluster, perf):
    sizing = CountingSize()
    core = SchedulingCore(small_cluster, StagedPolicy("fifo", Fifo(), sizing=sizing), perf)
    core.submit(job(14, job_id="wide"), 0.0)
    core.schedule(0.0)  # 2 GPUs stay free
    for i in range(30):
        core.submit(job(4, job_id=f"four{i}", submit=1.0), 1.0)
    sizing.calls = 0
    assert core.schedule(1.0) == []
    assert sizing.calls == 0  # every waiting job asks for 4 > 2 free: no job is visited
    core.submit(job(2, job_id="two", submit=2.0), 2.0)
    started = [a.job_id for a in core.schedule(2.0)]
    assert started == ["two"]  # the bound never skips a job that fits at the back of the queue
    assert sizing.calls == 31


def test_fifo_pass_ignores_free_gpus_on_unschedulable_nodes(small_cluster, perf):
    sizing = CountingSize()
    core = SchedulingCore(small_cluster, StagedPolicy("fifo", Fifo(), sizing=sizing), perf)
    core.free.schedulable[:] = False  # e.g. no agent connected yet
    for i in range(20):
        core.submit(job(1, job_id=f"one{i}"), 0.0)
    assert core.schedule(1.0) == []
    assert sizing.calls == 0  # nothing can be handed out, so no job is even looked at
    core.free.schedulable[3] = True
    assert len(core.schedule(2.0)) == 4  # the one node that takes work fills up


def test_placement_candidates_are_ranked_and_distinct(small_cluster, perf):
    """Generate, then score (Kubernetes PlacementGenerate/Score; Cassini ranks these by compatibility):
    place()'s choice first, then other tight placements, never the same node set twice."""
    core = core_with(small_cluster, perf)
    occupy(core, "busy", "r0-n0", (0, 1))              # r0-n0 has 2 free, the other three nodes 4
    spec = job(2, job_id="two")
    rec = core.submit(spec, 0.0)
    view = core.view(0.0)
    placement = FirstFitConsolidated()
    got = placement.candidates(view, rec, 2, core.free.copy(), PassState())
    assert got[0] == placement.place(view, rec, 2, core.free.copy(), PassState())
    assert [a.node_names for a in got[:4]] == [("r0-n0",), ("r0-n1",), ("r1-n0",), ("r1-n1",)]
    assert len({tuple((p.node, p.gpus) for p in a.nodes) for a in got}) == len(got)
    assert len(placement.candidates(view, rec, 2, core.free.copy(), PassState(), limit=2)) == 2
    eight = core.submit(job(8, job_id="eight"), 0.0)
    wide = placement.candidates(view, eight, 8, core.free.copy(), PassState())
    assert [len(a.nodes) for a in wide] == sorted(len(a.nodes) for a in wide)
    assert wide[0].node_names == ("r1-n0", "r1-n1")  # one whole rack beats the half-busy one


def test_a_policy_reads_the_links_of_a_candidate_through_the_view(small_cluster, perf):
    """The estimator gives a stage the links a candidate crosses and the job's demand on each
    (what Cassini scores): none on one node, both NICs on two nodes, the uplinks across racks."""
    core = core_with(small_cluster, perf)
    rec = core.submit(job(8, job_id="eight", model="resnet50"), 0.0)
    view = core.view(0.0)

    def links(*parts):
        allocation = Allocation(tuple(NodeAllocation(n, tuple(range(k)), 3 * k, 62_500 * k) for n, k in parts))
        return {(link.kind, link.name) for link in view.perf.job_timing(rec.spec, allocation, view.cluster).links}

    assert links(("r0-n0", 4), ("r0-n1", 4)) == {("nic", "r0-n0"), ("nic", "r0-n1")}
    across = links(("r0-n0", 4), ("r1-n0", 4))
    assert {("uplink", "r0"), ("uplink", "r1")} <= across and ("nic", "r1-n0") in across
    one = Allocation((NodeAllocation("r0-n0", (0, 1), 6, 125_000),))
    assert view.perf.job_timing(job(2, model="resnet50"), one, view.cluster).links == ()
