"""Dally's ``+auction-on-release`` and ``+release-delay`` (policies/dally_release.py): when Dally's reference simulator
(aakash-sharma/cluster-sim) auctions the GPUs a lease end releases. Each test cites the lines of cluster-sim it holds
Halyard to; the options are on ``+reauction``, on in the ``dally`` presets and off in the paper's text."""

from __future__ import annotations

import math
import random

import pytest
from factories import job
from policy_fakes import FakeJob, on, view_of

from halyard.datamodel import EventKind, JobSpec, ValidationError, parse_cluster
from halyard.policies import make_policy
from halyard.policies.dally import LEASE_ROUNDS
from halyard.policies.dally_release import (
    EVENT_S,
    IDLE_AUCTION_S,
    LEASE_END_SLACK_S,
    RELEASE_DELAY_PER_GPU_S,
    event_lease_s,
)
from halyard.policies.event_order import EpochWatch
from halyard.policies.facts import ClusterFacts
from halyard.policies.passstate import PassState
from halyard.policies.resources import FreeResources
from halyard.policies.view import ClusterView
from halyard.scheduling import Simulator
from halyard.scheduling.timing import performance_model_for
from halyard.testing.cluster import small_cluster_toml

ROUND_S = 300.0
LEASE_S = LEASE_ROUNDS * ROUND_S
BASE = "dally-manual-literal+reauction+staggered"  # (the `dally-manual` preset before issue 35's chain)


def one_machine_sim(policy_name: str) -> Simulator:
    """One 4-GPU machine. ``x`` holds it and finishes between rounds; ``y`` (waiting since 0) is placed at that
    completion; ``z`` arrives at 200 s and, never run (Nw_sens 0, ``PerGPUBidComparator`` ranks it first), wins the
    machine at ``y``'s first lease-end auction. Returns (y's start, y's preemption)."""
    cluster = parse_cluster(small_cluster_toml(1, gpus_per_node=4))
    jobs = [JobSpec(job_id="x", submit_time=0.0, model="resnet50", num_gpus=4, iterations=300),
            JobSpec(job_id="y", submit_time=0.0, model="resnet50", num_gpus=4, iterations=200_000),
            JobSpec(job_id="z", submit_time=200.0, model="resnet50", num_gpus=4, iterations=200_000)]
    policy = make_policy(policy_name)
    sim = Simulator(cluster, policy, performance_model_for(policy), round_s=ROUND_S)
    sim.run(jobs)
    return sim


def one_machine_run(policy_name: str) -> tuple[float, float]:
    """:func:`one_machine_sim`'s (y's start, y's preemption)."""
    log = list(one_machine_sim(policy_name).core.log)
    started = next(e.time for e in log if e.job_id == "y" and e.kind is EventKind.STARTED)
    preempted = next(e.time for e in log if e.job_id == "y" and e.kind is EventKind.PREEMPTED)
    return started, preempted


def test_auction_on_release_ends_a_lease_at_its_own_instant():
    """cluster-sim: ``GPU.assignGPU`` leases from the auction that gave the GPU; ``IntraJobScheduler.endIteration``
    releases it once ``GPU.hasLeaseExpired`` (``now >= lease start + lease_time``) and enqueues a
    ``ResourceAvailableEvent``, whose ``handleEvent`` auctions every unleased GPU
    (``InterJobScheduler.onResourceAvailable``): the auction is at the lease's end, between Halyard's rounds.
    ``+reauction`` alone sees the lease end at the first round boundary after it."""
    started, preempted = one_machine_run(BASE)
    assert 0.0 < started < ROUND_S and started % ROUND_S != 0.0  # placed at x's completion, between rounds
    assert preempted == pytest.approx(2 * ROUND_S)  # the first round at or after the lease's end
    started, preempted = one_machine_run(f"{BASE}+auction-on-release")
    assert preempted == pytest.approx(started + LEASE_S)


def test_release_delay_auctions_one_second_per_released_gpu_later():
    """cluster-sim: ``endIteration`` enqueues the release's ``ResourceAvailableEvent`` at
    ``now + CHECKPOINTING_OVERHEAD_PER_GPU x mCurrentIterationGPUs.size()`` (``CHECKPOINTING_OVERHEAD_PER_GPU = 1``,
    IntraJobScheduler.java): y's four GPUs are auctioned 4 s after its lease ends."""
    started, preempted = one_machine_run(f"{BASE}+auction-on-release+release-delay")
    assert RELEASE_DELAY_PER_GPU_S == 1.0
    assert preempted == pytest.approx(started + LEASE_S + 4 * RELEASE_DELAY_PER_GPU_S)


def test_event_lease_ends_with_the_iteration_event_that_crosses_it():
    """cluster-sim checks a lease only in ``IntraJobScheduler.endIteration``: the GPUs go at the end of the first
    event after which ``GPU.hasLeaseExpired`` (``now >= lease start + lease_time``), or earlier, when the next event
    would not finish within the lease (``now + timeForIterations > gpu.getLeaseEnd()``, ``timeForIterations`` being
    the event's seconds over the GPU count)."""
    assert event_lease_s(300.0, 60.0, 1) == 300.0  # 5 events: the fifth ends as the lease does
    assert event_lease_s(300.0, 120.0, 2) == 360.0  # 240 + 60 = 300 is within the lease: a third event runs
    assert event_lease_s(300.0, 63.8, 4) == pytest.approx(319.0)
    assert event_lease_s(300.0, 70.0, 1) == 280.0  # 280 + 70 > 300: released one event early
    assert event_lease_s(300.0, 11_820.0, 4) == 11_820.0  # a slowed placement holds its GPUs for a whole event
    sim = one_machine_sim(f"{BASE}+auction-on-release+event-leases")
    log = list(sim.core.log)
    started = next(e.time for e in log if e.job_id == "y" and e.kind is EventKind.STARTED)
    preempted = next(e.time for e in log if e.job_id == "y" and e.kind is EventKind.PREEMPTED)
    y = sim.core.records["y"]
    event_s = EVENT_S * y.iteration_s / sim.core.facts.reference_compute_s(y.spec)
    assert preempted - started == pytest.approx(event_lease_s(LEASE_S, event_s, 4))
    assert preempted - started != pytest.approx(LEASE_S)  # the event's end, not the lease's


def test_a_kept_lease_runs_from_the_auction_that_left_it(small_cluster):
    """cluster-sim: a job that wins its GPUs back gets a fresh lease from that auction (``GPU.assignGPU`` sets the
    lease start to the auction's time), so with the 1 s per GPU its next lease end is a lease after the auction,
    not after the first lease end."""
    policy = make_policy(f"{BASE}+auction-on-release+release-delay")
    running = FakeJob(job(4, job_id="a"), allocation=on(small_cluster, ("r0-n0", 4)), done=10, run_s=100,
                      last_assignment_time=0.0)
    assert policy.wake_at(view_of(small_cluster, 1.0, [running], [])) == LEASE_S + 4.0
    auction = LEASE_S + 4.0
    view = view_of(small_cluster, auction, [running], [])
    state = PassState()
    plan = policy.schedule(view, state)
    assert plan.actions == []  # nothing else bids: a keeps its machine
    policy.on_applied(view, plan, state)
    assert policy.wake_at(view_of(small_cluster, auction, [running], [])) == auction + LEASE_S + 4.0
    assert policy.wake_at(view_of(small_cluster, auction, [], [])) == math.inf


def test_no_rounds_passes_only_at_cluster_sims_auctions(small_cluster):
    """cluster-sim auctions at its events only (``ResourceAvailableEvent``: an arrival, a release), and when its event
    queue has run dry while jobs remain, ``ClusterEventQueue.start`` queues one 60 s later: no auction at Halyard's
    round boundaries. With ``+no-rounds`` the policy needs no round timer, asks for a pass a minute on when nothing
    runs and a job waits, and the one-machine run passes less often, with every job done."""
    name = f"{BASE}+auction-on-release+event-leases+release-delay"
    policy = make_policy(f"{name}+no-rounds")
    assert not policy.needs_rounds and make_policy(name).needs_rounds
    waiting = FakeJob(job(4, job_id="w"), pending_since=0.0)
    assert policy.wake_at(view_of(small_cluster, 10.0, [], [waiting])) == 10.0 + IDLE_AUCTION_S
    assert policy.wake_at(view_of(small_cluster, 10.0, [], [])) == math.inf
    with_rounds, without = one_machine_sim(name), one_machine_sim(f"{name}+no-rounds")
    assert without.core.passes < with_rounds.core.passes
    assert all(r.end_time is not None for r in without.core.records.values())


def test_off_by_default_and_need_their_base():
    """The paper's text asks for no pass between rounds, nor the previous preset's reading; the presets do (they
    have +auction-on-release); each option needs the one it refines."""
    for name in ("dally-literal", "dally-manual-literal", "dally-literal+reauction+staggered", f"{BASE}"):
        assert getattr(make_policy(name), "wake_at", None) is None
    for name in ("dally", "dally-manual"):
        assert make_policy(name).wake_at is not None
    with pytest.raises(ValidationError, match="needs \\+reauction"):
        make_policy("dally-literal+auction-on-release")
    for option in ("release-delay", "event-leases", "no-rounds"):
        with pytest.raises(ValidationError, match="needs \\+auction-on-release"):
            make_policy(f"dally-literal+reauction+{option}")


@pytest.mark.parametrize("name", ["dally", "dally-manual-literal+reauction+auction-on-release"])
@pytest.mark.parametrize("seed", range(6))
def test_lease_ends_of_hand_built_views_equal_the_plain_computation_on_drawn_views(small_cluster, perf, name, seed):
    """Views built by hand (no event log to follow: ``LeaseEnds`` does not apply) are answered job by job. On drawn
    views, sharing one set of facts as the core's do, with jobs that start, stop, move, are re-rated, keep their
    GPUs at a lease end (a new :attr:`began` entry) or get a new spec, ``wake_at`` and ``ended`` must answer what
    ``lease_end`` and ``auction_at`` give for each job."""
    rng = random.Random(seed)
    policy = make_policy(name)
    release = policy.release
    facts = ClusterFacts(small_cluster, perf)
    nodes = [n.name for n in small_cluster.nodes]
    jobs: dict[str, FakeJob] = {}
    now = 0.0
    for _ in range(120):
        now += rng.choice((0.0, 1.0, 30.0, 150.0, 299.0, 300.0, 700.0))
        for _change in range(rng.randint(0, 3)):
            job_id = f"j{rng.randint(0, 9)}"
            kind = rng.random()
            if job_id not in jobs or kind < 0.2:  # starts (again), on some node
                spec = job(rng.choice((1, 2, 4)), job_id=job_id, model=rng.choice(("resnet50", "vgg11")))
                jobs[job_id] = FakeJob(spec, allocation=on(small_cluster, (rng.choice(nodes), rng.choice((1, 2, 4)))),
                                       last_assignment_time=now, ideal_iteration_s=rng.choice((0.1, 0.25, 1.0)))
            elif kind < 0.4:
                jobs[job_id].ideal_iteration_s = rng.choice((0.1, 0.25, 0.5, 1.0, 3.0))  # re-rated, no event
            elif kind < 0.5:  # moved or resized (a resize without a checkpoint keeps its last assignment)
                jobs[job_id].allocation = on(small_cluster, (rng.choice(nodes), rng.choice((1, 2, 4))))
                if rng.random() < 0.5:
                    jobs[job_id].last_assignment_time = now
            elif kind < 0.55:
                jobs[job_id].allocation = None  # (a view built by hand: it holds nothing, so no lease ends)
            elif kind < 0.6:
                jobs[job_id].spec = job(rng.choice((1, 2, 4)), job_id=job_id, model="resnet50")
            elif kind < 0.7:
                jobs[job_id].last_assignment_time = now  # (a view built by hand may change it alone)
            elif kind < 0.8:
                del jobs[job_id]
        running = {j.job_id: j for j in jobs.values()}
        view = ClusterView(now=now, cluster=small_cluster, free=FreeResources(small_cluster), running=running,
                           pending=[], perf=perf, round_s=300.0, pending_demand={}, facts=facts)
        due = [release.auction_at(view, job_id) for job_id in running]
        assert release.wake_at(view) == min((t for t in due if t > now), default=math.inf)
        state = PassState()
        ended = release.ended(view, state)
        assert ended == {job_id for job_id in running
                         if now >= release.lease_end(view, job_id) - LEASE_END_SLACK_S}
        if rng.random() < 0.7:  # the pass was applied: the ended leases that kept their GPUs start anew
            release.on_applied(view, state)


class CountedWatch(EpochWatch):
    """An :class:`EpochWatch` that counts the calls it answered from the core's journal."""

    __slots__ = ("answered",)

    def __init__(self, use: bool) -> None:
        super().__init__()
        self.use, self.answered = use, 0

    def moved(self, view):
        moved = super().moved(view)
        self.answered += moved is not None
        return moved


@pytest.mark.parametrize("journal", [True, False])
@pytest.mark.parametrize("contention", ["off", "fair"])
def test_followed_lease_ends_answer_the_plain_computation_at_every_pass(contention, journal):
    """``LeaseEnds`` (issue 38) follows each running job's lease end and auction instant through the core's event
    log, its epochs (with links ``fair`` a co-runner's start re-rates a job without an event for it: the jobs
    whose epoch moved are read from the core's journal of epoch moves, or with ``journal`` off every job's epoch is
    compared) and the ``began`` entries each pass writes. In a loaded run of the ``dally`` preset, every ``ended``
    and ``wake_at`` must answer what ``lease_end`` and ``auction_at`` give worked out afresh over the view's running
    jobs."""
    rng = random.Random(7)
    cluster = parse_cluster(small_cluster_toml(8, gpus_per_node=4))
    jobs = [JobSpec(job_id=f"j{i}", submit_time=rng.uniform(0.0, 3000.0), model=rng.choice(("resnet50", "vgg11")),
                    num_gpus=rng.choice((1, 2, 4, 4, 6, 8)), iterations=rng.randint(2_000, 60_000)) for i in range(60)]
    jobs.sort(key=lambda spec: spec.submit_time)
    policy = make_policy("dally")
    release = policy.release
    release._table.watch = watch = CountedWatch(journal)
    ended, wake_at = release.ended, release.wake_at
    asked = {"ended": 0, "wake_at": 0, "events": 0}

    def plain_ended(view, state):
        got = ended(view, state)
        asked["ended"] += 1
        asked["events"] += release._table.follows(view)
        assert got == {j for j in view.running if view.now >= release.lease_end(view, j) - LEASE_END_SLACK_S}
        return got

    def plain_wake_at(view):
        got = wake_at(view)
        asked["wake_at"] += 1
        due = [release.auction_at(view, j) for j in view.running]
        assert got == min((t for t in due if t > view.now), default=math.inf)
        return got

    release.ended, release.wake_at = plain_ended, plain_wake_at
    policy.wake_at = plain_wake_at
    sim = Simulator(cluster, policy, performance_model_for(policy, contention=contention), round_s=ROUND_S)
    sim.run(jobs)
    assert asked["ended"] > 100 and asked["wake_at"] > 100 and asked["events"] == asked["ended"]
    assert all(r.end_time is not None for r in sim.core.records.values())
    assert (watch.answered > asked["ended"]) if journal else watch.answered == 0
