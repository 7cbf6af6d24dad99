"""``+auction-on-release``, ``+event-leases``, ``+release-delay`` and ``+no-rounds``: when Dally's reference simulator
(aakash-sharma/cluster-sim, read and run beside Halyard in docs/reproductions/dally-public-comparison.md) ends a
lease and auctions the GPUs it releases, as options of ``+reauction`` (policies/dally.py). The first three are on in
the ``dally`` and ``dally-manual`` presets (policies/registry.py ``DALLY_READINGS``: with them Halyard is within 5% of
cluster-sim at 2 and 4 racks) and off in the paper's text (``dally-literal``); ``+no-rounds`` is off in every preset.

Not in the paper: §4.1 says the scheduler "periodically generates resource offers", not when a lease ends or when
its GPUs are offered again. In cluster-sim:

* **a lease ends at the job's own instant.** ``GPU.assignGPU`` leases a GPU for ``lease_time`` from the auction that
  gave it; ``IntraJobScheduler.endIteration`` (at the end of each of the job's iteration events) finds
  ``GPU.hasLeaseExpired`` (``now >= lease start + lease_time``), ``markLeaseEnd``\\ s the GPUs at once and enqueues a
  ``ResourceAvailableEvent``, whose ``handleEvent`` runs an auction of every unleased GPU
  (``InterJobScheduler.onResourceAvailable`` -> ``multiGPUResourceAllocator`` over ``Cluster.getGPUsInCluster``).
  A job that wins its GPUs back holds a new lease from that auction. Halyard's ``+reauction`` notices a lease end
  only in a pass, and passes run at arrivals, completions and round boundaries: a job placed between rounds (at a
  completion) keeps its GPUs until the first round boundary a lease after it, up to two leases.
  ``+auction-on-release`` asks the core for a pass at each running job's lease end (:meth:`ReleaseAuctions.wake_at`,
  the policy's ``wake_at``: ``SchedulingCore.wake_at``), so a lease ends, and its auction runs, at the lease's own
  instant, between rounds; a job that keeps its GPUs at a lease end holds a new lease from that pass;
* **the auction comes 1 s per released GPU after the release.** ``endIteration`` enqueues that event at ``now +
  CHECKPOINTING_OVERHEAD_PER_GPU x mCurrentIterationGPUs.size()`` (``CHECKPOINTING_OVERHEAD_PER_GPU = 1``,
  IntraJobScheduler.java; "6 seconds overhead" its comment says), a completion at ``now + 1 s x`` its GPUs. The GPUs
  are unleased from the release (any auction before then offers them); the released job waits from the release
  (``mTimeLastResourceAssignment`` is reset there). ``+release-delay`` (on ``+auction-on-release``) moves a lease
  end's pass to ``lease end + 1 s x`` the job's GPUs (:data:`RELEASE_DELAY_PER_GPU_S`), the auction's instant (a
  pass before it, for another job's auction or an arrival, re-offers the ended lease as cluster-sim's auctions offer
  every unleased GPU), and its next lease runs from that auction, as cluster-sim's. Not kept: the job idles in
  cluster-sim from its release to its auction (it runs on in Halyard until its auction; stopping it would charge
  Halyard's restart cost, 20 s and a checkpoint read, which cluster-sim does not have), and a completion's auction
  (Halyard's pass runs at the completion). The side-by-side measures the 1 s per GPU inside cluster-sim as well
  (``--public-variant`` ``release-at-once``, which sets it to 0).
* **a lease ends with an iteration event.** cluster-sim checks a lease only in ``endIteration``, at the end of one of
  the job's iteration events (``time_per_iteration x iteration_granularity`` of compute, over the placement's
  slowdown: 60 s in the side-by-side, :data:`EVENT_S`, longer on a slower tier), and releases early when the next
  event would not end within the lease (:func:`event_lease_s`). ``+event-leases`` (on ``+auction-on-release``) ends
  each lease there, so that jobs of different slowdowns placed by one auction release at different instants, as
  in cluster-sim; without it they all release a lease later, together.

* **no auction at Halyard's round boundaries.** cluster-sim auctions only at its events: a release (lease end or
  completion, 1 s per GPU later) or an arrival (``IntraJobScheduler``'s constructor queues one when a GPU is free), and,
  once its event queue has run dry while jobs wait, every :data:`IDLE_AUCTION_S` (``ClusterEventQueue.start``).
  Halyard's Dally asks for a pass at every round boundary too (``needs_rounds``: its timers elapse with time alone),
  in which the waiting jobs whose timers have elapsed bid for what is free. ``+no-rounds`` (on
  ``+auction-on-release``) drops those passes: passes run at arrivals, completions and lease-end auctions, and,
  when nothing runs and jobs wait, a minute apart.

All of a pass's lease ends are one auction (``+reauction``), as cluster-sim's releases of one instant are: every
``endIteration`` of the instant runs before its auctions (``ClusterEventQueue``: END_ITERATION before
RESOURCE_AVAILABLE), and each auction offers every unleased GPU. ``+staggered`` (one auction per release,
policies/dally_clustersim.py) models releases at distinct instants within a round; with these options the
releases fall at their own instants, and staggering the releases of one instant departs from cluster-sim.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable, Iterable

import numpy as np

from halyard.datamodel import JobState
from halyard.policies.event_order import EpochWatch, RunningFollower
from halyard.policies.passstate import PassState
from halyard.policies.view import ClusterView, JobInfo

# cluster-sim's IntraJobScheduler.CHECKPOINTING_OVERHEAD_PER_GPU: seconds per released GPU before the release's auction.
RELEASE_DELAY_PER_GPU_S = 1.0
# ``+event-leases``: one cluster-sim iteration event's compute seconds, ``time_per_iteration x iteration_granularity``
# of the job file. Not a constant of cluster-sim: the side-by-side's inputs (benchmarks/dally_public_perjob.py EVENT_S).
EVENT_S = 60.0
# ``+no-rounds``: cluster-sim's ClusterEventQueue.start queues an auction this many seconds later when its event queue
# has run dry while jobs remain (no job runs: none has an iteration event).
IDLE_AUCTION_S = 60.0
# Float slack when a lease end is compared with the pass's instant: a pass the policy asked for at exactly the
# lease end (wake_at) sees ``now`` equal to it up to the rounding of ``start + lease_s``.
LEASE_END_SLACK_S = 1e-9
FIRST_ROWS = 64  # jobs LeaseEnds' arrays hold at first; they double when full
OFFERED_KEY = "dally/lease-offered"  # PassState: job id -> (last assignment, this pass's instant) for ended leases


@dataclasses.dataclass
class ReleaseAuctions:
    """``+auction-on-release`` (and ``+release-delay``): each running job's lease, from the pass that last gave or
    left it its GPUs, and the pass the policy asks for when it ends (module docstring). A function of the applied
    passes (:meth:`on_applied`)."""

    lease_rounds: float
    delay: bool = False  # ``+release-delay``: the pass comes 1 s per GPU the job holds after its lease end
    events: bool = False  # ``+event-leases``: a lease ends at the end of one of the job's iteration events
    no_rounds: bool = False  # ``+no-rounds``: no pass at round boundaries; an idle cluster is auctioned every minute
    # job id -> (last assignment time, when its current lease began): the pass of a lease end that left it its GPUs
    began: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
    # Each running job's lease end and auction instant followed through the core's event log, for views that
    # offer it (a memo, not learning); a view built by hand is answered job by job.
    _table: LeaseEnds = dataclasses.field(init=False, repr=False, compare=False)
    # What on_applied last pruned ``began`` against (:meth:`_may_have_stopped`): the event log, its length then, and
    # the jobs it added then; None: prune against every job of ``began``.
    _pruned: tuple[object, int, set[str]] | None = dataclasses.field(default=None, init=False, repr=False,
                                                                      compare=False)

    def __post_init__(self) -> None:
        self._table = LeaseEnds(self)

    def lease_start(self, job_id: str, last: float) -> float:
        kept = self.began.get(job_id)
        return kept[1] if kept is not None and kept[0] == last else last

    def lease_end(self, view: ClusterView, job_id: str) -> float:
        """When the running job's current lease ends: ``lease_rounds`` rounds after it began, or with ``events``
        at the end of the iteration event in which cluster-sim releases it (:func:`event_lease_s`); inf for a job
        that holds nothing."""
        return self._lease_end(view, view.running[job_id])

    def _lease_end(self, view: ClusterView, job: JobInfo) -> float:
        """:meth:`lease_end` of the running ``job``."""
        return self._lease_end_after(job, self._lease_s(view, job))

    def _lease_s(self, view: ClusterView, job: JobInfo) -> float:
        """How long the running ``job``'s lease lasts (inf for a job that holds nothing): of the view's round, the
        options and the job's spec, iteration time and GPU count, not of when the lease began."""
        if job.last_assignment_time is None or job.allocation is None:
            return math.inf
        lease_s = self.lease_rounds * view.round_s
        if self.events:
            slowdown = job.iteration_s / view.facts.reference_compute_s(job.spec)
            lease_s = event_lease_s(lease_s, EVENT_S * slowdown, job.num_gpus)
        return lease_s

    def _lease_end_after(self, job: JobInfo, lease_s: float) -> float:
        """The running ``job``'s lease end for a lease of ``lease_s`` (:meth:`_lease_s`)."""
        last = job.last_assignment_time
        if last is None or job.allocation is None:
            return math.inf
        return self.lease_start(job.job_id, last) + lease_s

    def _auction_after(self, end: float, job: JobInfo) -> float:
        """:meth:`auction_at` of the running ``job`` whose lease ends at ``end``."""
        return end + (RELEASE_DELAY_PER_GPU_S * job.num_gpus if self.delay else 0.0)

    def ended(self, view: ClusterView, state: PassState) -> set[str]:
        """The running jobs whose lease has ended by ``view.now`` (``Dally._ended_leases`` with this option),
        recorded in the pass's state: if the job keeps its GPUs, its next lease begins now."""
        seen = state.setdefault(OFFERED_KEY, dict)
        now = view.now
        table = self._table
        if table.follows(view):
            n = table.at(view)
            jobs = table.jobs
            for i in np.flatnonzero(now >= table.ends[:n] - LEASE_END_SLACK_S).tolist():
                job = jobs[i]
                seen[job.job_id] = (job.last_assignment_time, now)
            return set(seen)
        for job_id, job in view.running.items():
            if now >= self._lease_end(view, job) - LEASE_END_SLACK_S:
                seen[job_id] = (job.last_assignment_time, now)
        return set(seen)

    def auction_at(self, view: ClusterView, job_id: str) -> float:
        """When the running job's lease-end auction runs: its lease's end (with ``delay``, 1 s per GPU it holds
        later); inf for a job that holds nothing."""
        job = view.running[job_id]
        return self._auction_after(self._lease_end(view, job), job)

    def wake_at(self, view: ClusterView) -> float:
        """The policy's ``wake_at`` (``SchedulingCore.wake_at``): the soonest lease-end auction after ``view.now``
        among the running jobs; inf when none runs."""
        if self.no_rounds and not view.running and view.pending:
            return view.now + IDLE_AUCTION_S
        now, soonest = view.now, math.inf
        table = self._table
        if table.follows(view):
            due = table.auctions[:table.at(view)]
            later = due[due > now]
            return float(later.min()) if later.size else soonest
        for job in view.running.values():
            t = self._auction_after(self._lease_end(view, job), job)
            if now < t < soonest:
                soonest = t
        return soonest

    def on_applied(self, view: ClusterView, state: PassState) -> None:
        """Keep this pass's ended leases (what is left to them starts a new lease now), for the running jobs."""
        began, running = self.began, view.running
        for job_id in self._may_have_stopped(view):
            if job_id not in running:
                began.pop(job_id, None)
        offered = state.get(OFFERED_KEY, {})
        began.update(offered)
        self._table.began(offered)
        self._pruned = None if view.events is None else (view.events, len(view.events), set(offered))

    def _may_have_stopped(self, view: ClusterView) -> Iterable[str]:
        """The jobs of :attr:`began` that may not run any more: all of them, or, given the event log :meth:`on_applied`
        last pruned against, only the jobs of the events logged since and those it added then. Exact: after every
        :meth:`on_applied` every job of ``began`` runs, save those it just added (a lease end's bid that got nothing
        is preempted in that pass), and a job stops running only with an event the core logs (at every pass on
        loaded Philly the difference of ``began`` and the running jobs was 4% of ``dally``'s CPU, issue 38)."""
        events, pruned = view.events, self._pruned
        if events is None or pruned is None or pruned[0] is not events or len(events) < pruned[1]:
            return list(self.began)
        return {event.job_id for event in events.since(pruned[1])} | pruned[2]


class LeaseEnds(RunningFollower):
    """Each running job's lease end and auction instant (:meth:`ReleaseAuctions.lease_end`, :meth:`~ReleaseAuctions.
    auction_at`) in arrays, so that :meth:`ReleaseAuctions.ended` and :meth:`~ReleaseAuctions.wake_at` are one vector
    comparison each instead of working both out for every running job, twice a pass (most of ``dally``'s CPU on
    loaded Philly, issue 38). A job's figures are those of its last assignment, allocation, GPU count, spec and
    iteration time, and of its :attr:`ReleaseAuctions.began` entry: the first four change only with an event the
    core logs for the job (it starts, stops or moves: the running jobs are followed through the event log, as
    :class:`~halyard.policies.running_sens.RunningNwSens` follows them), the iteration time also with its ``epoch``
    (a driver's new rate logs no event: the jobs whose epoch moved are read from the core's journal of epoch moves,
    :class:`~halyard.policies.event_order.EpochWatch`, or, for a view without it, every pass compares every job's
    epoch at once: ~1,300 running jobs twice a pass on loaded Philly, issue 38), and the :attr:`began` entries
    only in :meth:`ReleaseAuctions.on_applied`, which names the jobs whose entries it wrote (:meth:`began`). A job
    is worked out again, with the plain computation, whenever one of these says it may have changed, so every
    answer equals it (``tests/test_dally_release.py`` holds both to it on a loaded run, pass by pass). Only for
    views that offer the event log (:meth:`follows`); a view built by hand is answered job by job."""

    def __init__(self, release: ReleaseAuctions) -> None:
        self._release = release
        self._basis: tuple[object, ...] | None = None  # the view's and the options' figures every entry depends on
        self._stale: set[str] = set()  # jobs whose ``began`` entry changed since they were read
        self.watch = EpochWatch()  # which jobs' epochs moved since the last at() (the core's journal)
        super().__init__()

    def _start(self, events: object) -> None:
        super()._start(events)
        self.jobs: list[JobInfo] = []  # the followed running jobs; job i's figures are ends[i], auctions[i]
        self._epochs: list[Hashable] = []
        self._lease_s: list[float] = []  # job i's lease length (ReleaseAuctions._lease_s) when last read
        self._index: dict[str, int] = {}
        self.ends = np.zeros(FIRST_ROWS)
        self.auctions = np.zeros(FIRST_ROWS)

    def follows(self, view: ClusterView) -> bool:
        """Whether ``view`` offers what following needs (the core's event log and its jobs)."""
        return view.events is not None and view.jobs is not None

    def began(self, job_ids: Iterable[str]) -> None:
        """These jobs' :attr:`ReleaseAuctions.began` entries changed: read them again at the next :meth:`at`."""
        self._stale.update(job_ids)

    def at(self, view: ClusterView) -> int:
        """Bring every followed job's figures up to ``view``; how many jobs are followed (the first that many
        of :attr:`jobs`, :attr:`ends` and :attr:`auctions`)."""
        release = self._release
        basis = (view.round_s, release.lease_rounds, release.events, release.delay, view.facts)
        if self._basis is None or basis[:4] != self._basis[:4] or basis[4] is not self._basis[4]:
            self._basis = basis
            self._start(None)  # (the next _follow reads every running job)
        self._follow(view)
        jobs = self.jobs
        if self._stale:  # (a job the events named was read afresh already: a second read gives the same)
            index = self._index
            for job_id in self._stale:
                i = index.get(job_id)
                if i is not None:
                    self._restarted(i, jobs[i])
            self._stale = set()
        for i in self.watch.stale(view, jobs, self._epochs, self._index):  # (a rate change logs no event)
            self._read(i, jobs[i], view)
        return len(jobs)

    def _read(self, i: int, job: JobInfo, view: ClusterView) -> None:
        release = self._release
        self._lease_s[i] = lease_s = release._lease_s(view, job)
        end = release._lease_end_after(job, lease_s)
        self.ends[i], self.auctions[i] = end, release._auction_after(end, job)

    def _restarted(self, i: int, job: JobInfo) -> None:
        """Job ``i``'s :attr:`ReleaseAuctions.began` entry changed: its lease begins anew, as long as before (the
        length changes only with what :meth:`_read` is called for: an event, the epoch, the view's basis), so
        only the end and the auction are worked out again (a lease end's kept jobs, at every pass)."""
        release = self._release
        end = release._lease_end_after(job, self._lease_s[i])
        self.ends[i], self.auctions[i] = end, release._auction_after(end, job)

    def _holds(self, job: JobInfo) -> bool:
        return job.state is JobState.RUNNING

    def _held(self) -> int:
        return len(self.jobs)

    def _learn(self, job: JobInfo, view: ClusterView) -> None:
        i = len(self.jobs)
        if i == len(self.ends):
            self.ends = np.concatenate([self.ends, np.zeros_like(self.ends)])
            self.auctions = np.concatenate([self.auctions, np.zeros_like(self.auctions)])
        self.jobs.append(job)
        self._epochs.append(job.epoch)
        self._lease_s.append(math.inf)
        self._index[job.job_id] = i
        self._read(i, job, view)

    def _forget(self, job_id: str) -> int | None:
        i = self._index.pop(job_id, None)
        if i is None:
            return None
        last = len(self.jobs) - 1
        if i != last:  # the last job takes its place
            moved = self.jobs[last]
            self.jobs[i], self._epochs[i], self._lease_s[i] = moved, self._epochs[last], self._lease_s[last]
            self.ends[i], self.auctions[i] = self.ends[last], self.auctions[last]
            self._index[moved.job_id] = i
        self.jobs.pop()
        self._epochs.pop()
        self._lease_s.pop()
        return None


def event_lease_s(lease_s: float, event_s: float, gpus: int) -> float:
    """How long cluster-sim's lease of ``lease_s`` lasts for a job whose iteration events take ``event_s`` on ``gpus``
    GPUs. ``IntraJobScheduler.endIteration`` releases the GPUs at the end of an event once ``GPU.hasLeaseExpired``
    (``now >= lease start + lease_s``), or earlier, when the next event would not "finish within the least lease end
    time": ``now + event_s / gpus > lease end`` (its ``timeForIterations`` divides by the GPU count). So the release
    is at the end of the first event ``k`` with ``k x event_s + event_s / gpus > lease_s``."""
    return max(1, math.floor((lease_s - event_s / gpus) / event_s) + 1) * event_s
