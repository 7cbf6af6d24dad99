"""Tiresias (Gu et al., NSDI'19), the baseline Dally is measured against (Dally §3.2, §3.4, §5.1.3).

* **Discretised 2D-LAS** (:class:`TwoDimensionalLas`, an ordering stage). A job's
  attained service is GPU-seconds (executed time x GPUs). Queues are cut at
  ``thresholds`` (GPU-seconds): a job starts in queue 0 and is demoted to queue
  k+1 once its service reaches ``thresholds[k]``. Lower queues go first; inside
  a queue, jobs go in arrival order (FIFO). Preemptive: running jobs of a later
  queue make way for earlier-queue jobs at each pass. The default is
  REFERENCE-NUMBERS' reading of the reference simulator, two queues cut at 3,250
  GPU-seconds; its code (``jobs.py`` ``num_queue = 3``, ``queue_limit = [3250,
  7200, 18000]``) demotes at 3,250 and 7,200: ``thresholds=(3250, 7200)``
  (docs/reproductions/tiresias-public-comparison.md measures the difference, step ``three-queues``).
* **Starvation promotion** (optional, off by default as in the reference): a
  waiting job whose current wait has reached ``starvation_knob`` x its executed
  time goes back to queue 0, and its service for demotion counts from then.
* **The reference simulator's lists** (``reference_lists``, and with them ``late_demotion``; optional,
  off by default; not in the paper): SymbioticLab/Tiresias ``run_sim.py`` orders each queue as a list
  in which running jobs go before waiting ones, and demotes at its own events
  (:class:`ReferenceLists`; docs/reproductions/tiresias-public-comparison.md measures both).
* **Skew-based consolidation** (:class:`SkewConsolidation`, a placement stage).
  Models whose largest tensor is a large share of the model (high skew) are
  consolidated strictly: on the fewest machines that can hold them, or not at
  all (the job waits). Other jobs take any free GPUs, network-agnostically
  (first fit in node order): "jobs with high skew are consolidated into as few
  machines as possible, while others are left unconsolidated" (Dally §1).

Without starvation promotion a job's queue is the number of thresholds its attained
service has reached, so a pass computes it from the job alone. With promotion, queue
membership is policy state, kept per job id in the ordering instance. A pass
works out each job's queue on a copy in its :class:`PassState` and the ordering
keeps it only once the core has applied the pass's plan (``on_applied``), so it
is a function of the views of applied passes.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from halyard.datamodel import Allocation, JobState
from halyard.policies.event_order import EventOrder, OrderedColumns
from halyard.policies.passstate import PassState
from halyard.policies.placement import FirstFitConsolidated, build_allocation, choose_nodes, no_fit, usable_gpus
from halyard.policies.plan import Plan, Preempt, Start
from halyard.policies.reasons import Unplaced, by_policy
from halyard.policies.resources import FreeResources
from halyard.policies.stages import DEFAULT_CANDIDATES, Ordering, Placement, Ranking, held_gpus
from halyard.policies.topology import first_fit
from halyard.policies.view import ClusterView, JobInfo

# REFERENCE-NUMBERS, Tiresias baseline parameters: "the reference simulator effectively uses 2 queues with
# a first threshold of 3,250 GPU-seconds". Its run_sim.py dlas_sim_jobs in fact uses three queues, cut at
# 3,250 and 7,200 (jobs.py num_queue = 3); kept as the default so that schedules do not change.
TIRESIAS_THRESHOLDS_GPU_S: tuple[float, ...] = (3250.0,)

# Largest tensor / model size. REFERENCE-NUMBERS "Tensor skew" [code SymbioticLab/Tiresias models.py].
TENSOR_SKEW: Mapping[str, float] = {
    "vgg19": 0.72, "vgg16": 0.74, "vgg11": 0.77, "alexnet": 0.61, "resnet50": 0.11,
    "resnet101": 0.08, "resnet152": 0.06, "inception3": 0.14, "inception4": 0.04,
}
# Dally Table 1's Skew column for its models that Tiresias' table lacks (High / Low).
TABLE1_HIGH_SKEW: Mapping[str, bool] = {"mobilenetv3": True, "resnet18": False, "bert-large": False}
# Estimate: every measured skew is <= 0.14 or >= 0.61; any cut between them classifies the same.
SKEW_THRESHOLD = 0.5


def high_skew(model: str, skew: Mapping[str, float] = TENSOR_SKEW,
              labels: Mapping[str, bool] = TABLE1_HIGH_SKEW, threshold: float = SKEW_THRESHOLD) -> bool:
    """Whether Tiresias consolidates ``model`` strictly; unknown models are treated as low skew."""
    if model in skew:
        return skew[model] >= threshold
    return labels.get(model, False)


QUEUES_KEY = "tiresias/queues"  # PassState: job id -> (queue, service baseline) changed this pass
_QUEUE_0 = (0, 0.0)  # a job the ordering has kept nothing for: queue 0, service counted from 0
# How long before a running job's computed threshold crossing TwoDimensionalLas.same_until stops
# promising an unchanged order (ours): far above the rounding of times of up to 10^8 s (about 1e-8 s),
# far below a round (300 s), so it only ever costs a pass that would have been skipped.
QUIET_MARGIN_S = 1e-3


class TwoDimensionalLas(Ordering):
    """Discretised 2D-LAS with optional starvation promotion (an :class:`~halyard.policies.stages.Ordering`)."""

    name = "tiresias-2das"
    preemptive = True
    needs_rounds = True  # service accrues with time alone
    arrival_order = False
    remembers = True  # with starvation promotion, queue changes are kept from applied passes (__init__)

    def __init__(self, thresholds: tuple[float, ...] = TIRESIAS_THRESHOLDS_GPU_S,
                 starvation_knob: float | None = None, reference_lists: bool = False,
                 late_demotion: bool = False) -> None:
        if any(b <= a for a, b in itertools.pairwise(thresholds)) or any(t <= 0 for t in thresholds):
            raise ValueError(f"thresholds must be positive and increasing, got {thresholds}")
        if starvation_knob is not None and starvation_knob <= 0:
            raise ValueError(f"starvation_knob must be positive, got {starvation_knob}")
        if reference_lists and starvation_knob is not None:
            raise ValueError("reference_lists keeps its own order: not with starvation_knob")
        self.thresholds = thresholds
        self.starvation_knob = starvation_knob
        # Without starvation promotion the baseline stays 0 and a job's queue is the number of
        # thresholds its attained service has reached (bisect), whatever was kept: nothing need be
        # remembered between passes. Promotion moves a waiting job with time and needs the queue
        # kept from applied passes.
        self.remembers = starvation_knob is not None or reference_lists
        if late_demotion and not reference_lists:
            raise ValueError("late_demotion is the reference simulator's, with reference_lists")
        self._lists = ReferenceLists(thresholds, late_demotion) if reference_lists else None
        # Per job, as of the last applied pass: its queue and its attained service when last
        # promoted; a job not here is in queue 0 with baseline 0.
        self._kept: dict[str, tuple[int, float]] = {}
        self._order = KeptOrder(thresholds)

    def queue_of(self, job: JobInfo, now: float, state: PassState | None = None) -> int:
        """The job's queue at ``now`` after any promotion and demotion.

        With a pass ``state`` the result is remembered there, and kept by the ordering
        once the plan is applied (:meth:`on_applied`); without one it is only computed.
        """
        return self._queue_in(job, now, state.setdefault(QUEUES_KEY, dict) if state is not None else {})

    def _queue_in(self, job: JobInfo, now: float, tentative: dict[str, tuple[int, float]]) -> int:
        """:meth:`queue_of` with the pass's tentative queues at hand (a pass keys every job). Only a
        change is written there: an unchanged job reads the same from what the ordering kept, and
        on a loaded trace most waiting jobs are unchanged on most passes."""
        job_id = job.job_id
        kept = tentative.get(job_id) or self._kept.get(job_id, _QUEUE_0)
        queue, baseline = kept
        attained = job.attained_gpu_s(now)
        if self.starvation_knob is not None and queue > 0 and job.allocation is None:
            executed = job.run_time_s(now)
            if now - job.pending_since >= self.starvation_knob * executed:
                queue, baseline = 0, attained
        service = attained - baseline
        thresholds = self.thresholds
        while queue < len(thresholds) and service >= thresholds[queue]:
            queue += 1
        if queue != kept[0] or baseline != kept[1]:
            tentative[job_id] = (queue, baseline)
        return queue

    def key(self, view: ClusterView, state: PassState) -> Callable[[JobInfo], tuple[float, ...]]:
        if self._lists is not None:
            return self._lists.key(view, state)
        return self._key_in_arrival_order(view, state)

    def _key_in_arrival_order(self, view: ClusterView,
                              state: PassState) -> Callable[[JobInfo], tuple[int, float, int]]:
        now = view.now
        if self.starvation_knob is None:  # the queue is a function of attained service alone
            thresholds = self.thresholds
            return lambda job: (bisect.bisect_right(thresholds, job.attained_gpu_s(now)), job.spec.submit_time,
                                job.arrival_seq)
        tentative: dict[str, tuple[int, float]] = state.setdefault(QUEUES_KEY, dict)
        queue_in = self._queue_in
        return lambda job: (queue_in(job, now, tentative), job.spec.submit_time, job.arrival_seq)

    def ranking(self, view: ClusterView, state: PassState, pending: Sequence[JobInfo]) -> Ranking:
        """:meth:`Ordering.ranking` from the order kept between passes (:class:`KeptOrder`) when it can
        be: no starvation promotion, every pending job admitted, and a view that offers the core's event
        log; with the reference simulator's lists, from the lists when every pending job is admitted;
        otherwise sorted afresh."""
        if self._lists is not None and len(pending) == len(view.pending):
            return self._lists.ranking(view, state)
        if (self.remembers or view.events is None or view.jobs is None
                or len(pending) != len(view.pending)):
            return super().ranking(view, state, pending)
        return self._order.ranking(view)

    def same_until(self, view: ClusterView) -> float:
        """Without starvation promotion a job's queue is the number of thresholds its attained service
        has reached: a waiting job's service is fixed and a running job's grows by its GPU count per
        second, so the order holds until the first running job reaches its next threshold (less
        ``QUIET_MARGIN_S``, so that float rounding never hides a crossing). With promotion a waiting
        job moves with the clock: ``-inf``; so with the reference simulator's lists (which a pass reorders),
        but with its late demotion, until its next queue jump (arrivals and completions are events)."""
        if self._lists is not None and self._lists.late_demotion:
            return self._lists.next_jump
        if self.remembers:
            return -math.inf
        if view.events is not None and view.jobs is not None:  # the kept order holds every running job's time
            return self._order.next_crossing(view)
        now, thresholds = view.now, self.thresholds
        until = math.inf
        for job in view.running.values():
            attained = job.attained_gpu_s(now)
            queue = bisect.bisect_right(thresholds, attained)
            if queue < len(thresholds):
                until = min(until, now + (thresholds[queue] - attained) / job.num_gpus)
        return until - QUIET_MARGIN_S

    def on_applied(self, view: ClusterView, plan: Plan, state: PassState) -> None:
        if self._lists is not None:
            self._lists.on_applied(view, plan, state)
            return
        kept = self._kept
        for job_id, (queue, baseline) in state.get(QUEUES_KEY, {}).items():
            # A promotion's baseline is the service then (> 0: only a demoted job is promoted).
            kept[job_id] = (queue, baseline or kept.get(job_id, _QUEUE_0)[1])


_LIVE = (JobState.RUNNING, JobState.PENDING)
LISTS_KEY = "tiresias/lists"  # PassState: job id -> (queue, place) for this pass, and the next place


class ReferenceLists:
    """The reference simulator's queues as lists (``TwoDimensionalLas(reference_lists=True)``, off by default).

    SymbioticLab/Tiresias ``simulator/run_sim.py`` ``dlas_sim_jobs`` keeps each queue as a list: an
    arriving job is appended to queue 0, a job whose attained GPU time reaches its queue's threshold is
    appended to the next queue (jobs of one event in arrival order), a pass offers GPUs down the lists in
    order, and after the pass each queue's waiting jobs are moved behind its running ones, in the order
    they had. Here each queue is a list of job ids: a pass's order is the lists with the jobs that left or
    changed queue taken out and the appended ones at the ends, and an applied pass moves each queue's
    running jobs first. (Its key, :meth:`key`, is (queue, place): the place a job's position in the lists,
    an append after every kept job.)

    ``late_demotion`` (off by default) also takes the reference's demotion times: it demotes only at its
    events (an arrival, a completion, or its next "queue jump"), and computes a running job's jump as
    ``now + ceil((threshold - executed seconds) / GPUs)``, seconds where GPU-seconds are meant, so a
    multi-GPU job is demoted at the first arrival or completion after it crosses, or later. Here a pass
    with an arrival or a completion, or at or after the earliest jump, is such an event.

    With the core's event log in the view (``ClusterView.events``, ``jobs``) a pass reads again only the
    jobs that can have moved (issue 38: on 2,000 Philly jobs with 1-s rounds a pass holds ~485 live jobs, of
    which ~120 run): the running ones, the jobs of the events logged since the last pass, and the waiting
    ones not read at an event pass since they last ran (``_unsettled``); a waiting job's attained service
    is fixed, so its queue, once read at an event pass, stays what a full read would find.
    ``incremental = False`` reads every live job at every pass (tests/test_tiresias_public_cost.py holds the
    two to the reference's plain lists).
    """

    def __init__(self, thresholds: tuple[float, ...], late_demotion: bool = False) -> None:
        self.thresholds = thresholds
        self.late_demotion = late_demotion
        self.incremental = True
        # As of the last applied pass: each live job's queue, each queue's jobs in order (running first).
        self._queue: dict[str, int] = {}
        self._lists: list[list[str]] = [[] for _ in range(len(thresholds) + 1)]
        # Live jobs that may be waiting with a kept queue a read would change (they ran or moved since the
        # last event pass read them); the others wait with the queue their fixed service gives.
        self._unsettled: set[str] = set()
        self._running: set[str] = set()  # the jobs running once the last applied pass's plan was
        self._events: object = None  # the log followed, and how much of it the last pass had read
        self._seen = 0
        self._jump = math.inf  # the reference's next queue jump, from its last event

    @property
    def next_jump(self) -> float:
        """With ``late_demotion``, the reference's next queue jump: no demotion before it without an event."""
        return self._jump

    def key(self, view: ClusterView, state: PassState) -> Callable[[JobInfo], tuple[float, ...]]:
        lists = self._tentative(view, state).lists
        places = {job_id: (queue, place) for queue, ids in enumerate(lists)
                  for place, job_id in enumerate(ids, start=sum(map(len, lists[:queue])))}
        return lambda job: places[job.job_id]

    def ranking(self, view: ClusterView, state: PassState) -> Ranking:
        """Every live job in this pass's order (:meth:`Ordering.ranked` over the running and every pending job
        by :meth:`key`), read from the lists."""
        found = self._tentative(view, state)
        jobs = found.jobs
        ranked = [jobs[job_id] for ids in found.lists for job_id in ids]
        return Ranking(ranked, None, held_gpus(ranked))

    def _tentative(self, view: ClusterView, state: PassState) -> _ListsPass:
        """This pass's lists (arrivals and demotions appended), and whether it is one of the reference's events."""
        found = state.get(LISTS_KEY)
        if found is not None:
            return found
        now, thresholds, kept = view.now, self.thresholds, self._queue
        jobs = view.jobs
        events = view.events
        touched: set[str] | None = None
        if (self.incremental and events is not None and jobs is not None and events is self._events
                and len(events) >= self._seen):
            touched = {event.job_id for event in events.since(self._seen)}
            arrived = [j for j in touched if j not in kept and jobs[j].state in _LIVE]
            departed = [j for j in touched if j in kept and jobs[j].state not in _LIVE]
            if len(kept) + len(arrived) - len(departed) != len(view.running) + len(view.pending):
                touched = None  # a change seen by no event: read everything
        if touched is None:
            jobs = {job.job_id: job for job in (*view.running.values(), *view.pending)}
            arrived = [j for j in jobs if j not in kept]
            departed = [j for j in kept if j not in jobs]
            recheck: Iterable[JobInfo] = jobs.values()
        assert jobs is not None  # (the view's, when its events were read)
        event = not self.late_demotion or bool(arrived or departed) or now >= self._jump
        if touched is not None:
            if event:
                waiting = (self._unsettled | touched).difference(view.running)
                recheck = (*view.running.values(), *(jobs[j] for j in waiting if jobs[j].state in _LIVE))
            else:  # no arrival, no completion: every job keeps its queue
                recheck = ()
        appended = []
        for job in recheck:
            had = kept.get(job.job_id)
            if had is not None and not event:
                continue
            attained = job.attained_gpu_s(now)
            queue = bisect.bisect_right(thresholds, attained)
            if had is None or had != queue:
                # When the job arrived, or (running) crossed the threshold it is demoted at; with
                # late_demotion, now (the reference's event). Appends go in that order, then arrival order.
                when = (job.spec.submit_time if had is None or job.allocation is None
                        else now if self.late_demotion else now - (attained - thresholds[queue - 1]) / job.num_gpus)
                appended.append((when, job.spec.submit_time, job.arrival_seq, job.job_id, queue))
        appended.sort()
        gone = {*departed, *(job_id for *_, job_id, _ in appended if job_id in kept)}
        # The kept lists themselves where nothing leaves or joins them (on_applied replaces, never edits, them).
        lists = [[j for j in ids if j not in gone] for ids in self._lists] if gone else list(self._lists)
        if appended:
            joined: list[list[str]] = [[] for _ in lists]
            for *_, job_id, queue in appended:
                joined[queue].append(job_id)
            lists = [ids + more if more else ids for ids, more in zip(lists, joined, strict=True)]
        found = _ListsPass(lists, {job_id: queue for *_, job_id, queue in appended}, departed, event, jobs,
                           touched, len(events) if events is not None else 0)
        state.put(LISTS_KEY, found)
        return found

    def on_applied(self, view: ClusterView, plan: Plan, state: PassState) -> None:
        """Keep the pass's lists, each queue's running jobs (after the plan) moved before its waiting ones;
        with ``late_demotion``, at one of the reference's events, its next queue jump."""
        found = self._tentative(view, state)
        running = running_after(view, plan)
        if (plan.actions or running != self._running.difference(found.departed)
                or any(j in running for j in found.moved)):
            self._lists = [[j for j in ids if j in running] + [j for j in ids if j not in running]
                           for ids in found.lists]
        else:  # the same jobs run (but for those that ended) and none joined a list: each is running-first still
            self._lists = found.lists
        self._running = running
        kept = self._queue
        for job_id in found.departed:
            del kept[job_id]
        kept.update(found.moved)
        if found.touched is None or found.event:
            self._unsettled = set()
        else:
            self._unsettled.update(found.touched)
        self._unsettled.difference_update(found.departed)
        self._events, self._seen = view.events, found.seen
        if self.late_demotion and found.event:
            now, jump, jobs, thresholds = view.now, math.inf, found.jobs, self.thresholds
            for job_id in running:
                queue = kept[job_id]
                if queue < len(thresholds):
                    job = jobs[job_id]
                    jump = min(jump, now + math.ceil((thresholds[queue] - job.run_time_s(now)) / job.num_gpus))
            self._jump = jump


def running_after(view: ClusterView, plan: Plan) -> set[str]:
    """The ids of the jobs running once ``plan`` (a pass at ``view``) is applied."""
    running = set(view.running)
    for action in plan.actions:
        if isinstance(action, Preempt):
            running.discard(action.job_id)
        elif isinstance(action, Start):
            running.add(action.job_id)
    return running


@dataclasses.dataclass(slots=True)
class _ListsPass:
    """What :meth:`ReferenceLists._tentative` works out once per pass (in its :class:`PassState`)."""

    lists: list[list[str]]  # each queue's job ids in this pass's order
    moved: dict[str, int]  # appended jobs: job id -> queue
    departed: list[str]  # kept jobs no longer live
    event: bool  # one of the reference's events (always, without late_demotion)
    jobs: Mapping[str, JobInfo]  # the live jobs (or every job) by id
    touched: set[str] | None  # the jobs of the events read, None: every live job was read
    seen: int  # the log's length when read


class KeptOrder(EventOrder):
    """2D-LAS's order of the running and pending jobs (without starvation promotion), kept from pass
    to pass (keying and sorting about 110 jobs was a quarter of a loaded Tiresias pass, and
    between two passes a handful of keys change).

    A job's key is (queue, submit time, arrival number), its queue the number of thresholds its
    attained service has reached. Service is fixed while a job waits, grows while it runs and carries
    over a start or a stop unchanged, so a key changes only (a) when the core logs an event for the
    job (it arrived, started, stopped, moved or ended) or (b) when a running job reaches its next
    threshold, at a time known when it starts. Each pass re-keys the jobs of the events logged since
    the last one and the running jobs whose threshold time (less ``QUIET_MARGIN_S``) has come
    (:class:`~halyard.policies.event_order.EventOrder`). It equals sorting every job by the key
    (``tests/test_quiet_passes.py``)."""

    def __init__(self, thresholds: tuple[float, ...]) -> None:
        self.thresholds = thresholds
        super().__init__()

    def _start(self, events: object) -> None:
        super()._start(events)
        # Heap: when a running job may reach its next threshold, and the job; an entry holds while it is
        # the job's entry in _crossing_of (a job re-keyed since has a new one, or none while it waits).
        self._crossings: list[tuple[float, str]] = []
        self._crossing_of: dict[str, float] = {}
        # In the order of _jobs: the GPUs a running job holds, 0 for a waiting one (kept up job by job:
        # reading ~1,500 jobs' GPUs afresh each pass cost more).
        self._gpus = OrderedColumns(1, np.int64)

    def ranking(self, view: ClusterView) -> Ranking:
        self._follow(view)
        n = len(self._jobs)
        return Ranking(list(self._jobs), None, self._gpus.data[0, :n])

    def next_crossing(self, view: ClusterView) -> float:
        """The earliest time (less ``QUIET_MARGIN_S``) a running job may reach its next threshold, or
        inf: no job's key changes before it unless an event is logged."""
        self._follow(view)
        crossings, current = self._crossings, self._crossing_of
        while crossings and current.get(crossings[0][1]) != crossings[0][0]:
            heapq.heappop(crossings)  # the job has stopped, moved or ended since: that run's time no longer applies
        return crossings[0][0] if crossings else math.inf

    def _due(self, view: ClusterView) -> set[str]:
        """The running jobs whose threshold time has come."""
        due, crossings, now = set(), self._crossings, view.now
        while crossings and crossings[0][0] <= now:
            when, job_id = heapq.heappop(crossings)
            if self._crossing_of.get(job_id) == when:  # not replaced by a later re-key
                due.add(job_id)
        return due

    def _holds(self, job: JobInfo) -> bool:
        return job.state in _LIVE

    def _count(self, view: ClusterView) -> int:
        return len(view.running) + len(view.pending)

    def _members(self, view: ClusterView) -> Iterable[JobInfo]:
        return (*view.running.values(), *view.pending)

    def _forget(self, job_id: str) -> int | None:
        self._crossing_of.pop(job_id, None)
        i = super()._forget(job_id)
        if i is not None:
            self._gpus.delete(i, len(self._jobs))
        return i

    def _learn(self, job: JobInfo, view: ClusterView) -> None:
        thresholds, now = self.thresholds, view.now
        attained = job.attained_gpu_s(now)
        queue = bisect.bisect_right(thresholds, attained)
        i = self._insert(job, (queue, job.spec.submit_time, job.arrival_seq))
        self._gpus.insert(i, len(self._jobs), 0 if job.allocation is None else job.num_gpus)
        if job.allocation is not None and queue < len(thresholds):
            when = now + (thresholds[queue] - attained) / job.num_gpus - QUIET_MARGIN_S
            heapq.heappush(self._crossings, (when, job.job_id))
            self._crossing_of[job.job_id] = when


# How many refused placements SkewConsolidation remembers before it forgets them all (our choice: a
# cache bound, it changes no decision). A loaded trace needs a handful: the same few high-skew jobs
# are refused pass after pass while the free resources stay the same.
REFUSALS_KEPT = 4096


class SkewConsolidation(Placement):
    """Strict consolidation for high-skew models, any free GPUs for the others (a placement stage).

    A refusal is remembered: :meth:`place` is a pure function of the usable resources
    (:meth:`FreeResources.availability_key`), the cluster's shape, the job's GPU types, model and
    GPU count, and on a loaded trace a strictly consolidated job is refused again on every round
    pass while nothing frees up (32,464 of Tiresias' 62,816 placements on the synthetic
    90% trace, each a failed search over racks). Placements that succeed are not remembered: they
    change the free resources, so the same state rarely comes back.
    """

    name = "tiresias-skew"
    time_invariant = True  # a function of the free resources and the job's spec (the refusals a memo of it)

    def __init__(self, is_high_skew: Callable[[str], bool] = high_skew) -> None:
        self.is_high_skew = is_high_skew
        self._refused: dict[tuple[object, ...], Unplaced] = {}

    def place(self, view: ClusterView, job: JobInfo, gpus: int, free: FreeResources,
              state: PassState) -> Allocation | Unplaced:
        types = view.gpu_types_for(job.spec)
        key = (free.availability_key(), view.shape, types, job.spec.model, gpus)
        refused = self._refused.get(key)
        if refused is not None:
            return refused
        placed = self._place(view, job, gpus, free, types)
        if isinstance(placed, Unplaced):
            if len(self._refused) >= REFUSALS_KEPT:
                self._refused.clear()
            self._refused[key] = placed
        return placed

    def _place(self, view: ClusterView, job: JobInfo, gpus: int, free: FreeResources,
               types: frozenset[str] | None) -> Allocation | Unplaced:
        shape = view.shape
        avail = usable_gpus(free, shape, types)
        if self.is_high_skew(job.spec.model):
            picked = choose_nodes(avail, shape, gpus)
            fewest = math.ceil(gpus / max(shape.max_gpus_per_node(types), 1))
            if picked is None:
                return no_fit(self.name, view, job, gpus, avail)
            if len(picked) > fewest:
                return by_policy(self.name, "high-skew model {} is consolidated strictly: needs {:#GPU} on {:#machine}"
                                 "; the tightest free placement spans {}", job.spec.model, gpus, fewest,
                                 len(picked))
        else:
            picked = first_fit(avail, gpus)
            if picked is None:
                return no_fit(self.name, view, job, gpus, avail)
        return build_allocation(free, picked)

    def candidates(self, view: ClusterView, job: JobInfo, gpus: int, free: FreeResources, state: PassState,
                   limit: int = DEFAULT_CANDIDATES) -> list[Allocation]:
        """:meth:`place`'s choice, then the consolidated placement's candidates this rule allows: for a
        high-skew model those on the fewest machines, for the others any (Tiresias places them on any
        free GPUs). For a stage that scores them (Cassini)."""
        placed = self.place(view, job, gpus, free, state)
        if isinstance(placed, Unplaced):
            return []
        others = FirstFitConsolidated().candidates(view, job, gpus, free, state, limit + 1)
        if self.is_high_skew(job.spec.model):
            others = [a for a in others if len(a.nodes) <= len(placed.nodes)]
        return [placed, *(a for a in others if a != placed)][:limit]
