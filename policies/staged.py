"""A policy made of stages: admission, ordering, sizing, placement, adjusters.

One pass (:meth:`StagedPolicy.schedule`):

* non-preemptive ordering: walk the admitted pending jobs in priority order
  and start each one that can be placed in what is still free (later jobs may
  start ahead of an earlier one that does not fit: backfilling; with
  ``backfill=False`` the walk stops at the first job that does not fit, strict
  head-of-line FIFO);
* preemptive ordering, or a batch placement (Synergy's packing): rank running
  and admitted pending jobs together, keep the top jobs whose GPU demands fit in
  the schedulable GPUs (the runnable set), preempt the running jobs outside it,
  then place the pending jobs inside it -- one by one, or all at once by a batch
  placement, which may also change running jobs' CPU and memory.

Then each adjuster in turn may add migrations or time-shifts (:func:`~halyard.policies.adjusting.adjust`,
as after every policy's pass). Every job the pass
looks at and does not start gets a reason in the plan (:mod:`halyard.policies.reasons`).
The result is a :class:`Plan`; the core validates and applies it, then calls
:meth:`StagedPolicy.on_applied`, which every stage receives.
"""

from __future__ import annotations

import itertools
import math
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from halyard.datamodel import JobState
from halyard.policies.adaptive import with_runtime_plan
from halyard.policies.adjusting import act_without_pending, adjust, described, need_rounds
from halyard.policies.passstate import PassState
from halyard.policies.placement import FirstFitConsolidated
from halyard.policies.plan import Plan
from halyard.policies.reasons import Unplaced, by_policy, cannot_fit
from halyard.policies.resources import FreeResources
from halyard.policies.stages import (
    Adjuster,
    Admission,
    AdmitAll,
    BatchPlacement,
    FixedSize,
    Ordering,
    Placement,
    Preemption,
    Ranking,
    Sizing,
    Stage,
)
from halyard.policies.view import ClusterView, JobInfo, allocation_of

# From how many ranked jobs a pass looks for the running head to skip (StagedPolicy._running_head). Our
# choice, measured on loaded runs: finding it costs about ten numpy calls (~35 us on the
# 2-core development machine), repaid once it skips more than ~100 jobs; a pass on 128 GPUs at 90 % load
# ranks ~110 jobs, one on loaded Philly ~1,400.
WALK_SKIP_FROM = 400
# How many of the first ranked entries _running_head walks in Python before it turns to numpy. Our choice,
# measured on the public Synergy configuration (~65 running jobs ahead of ~1,200 waiting): the walk there
# costs ~5 us against ~17 us for numpy's calls; a head longer than this (loaded Philly under LAS, ~1,300
# running jobs) pays the walk on top of the calls, a few per cent of such a pass.
HEAD_WALK = 128


@dataclass
class StagedPolicy:
    name: str
    ordering: Ordering
    admission: Admission = field(default_factory=AdmitAll)
    sizing: Sizing = field(default_factory=FixedSize)
    placement: Placement | BatchPlacement = field(default_factory=FirstFitConsolidated)
    adjusters: tuple[Adjuster, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    # False: a non-preemptive pass stops at the first job it cannot start (strict FIFO, as
    # EasyScale §5.2's YARN-CS); the jobs behind it wait even where they would fit.
    backfill: bool = True
    # True: a runnable pass that visits every waiting job says its reasons as changes over the core's
    # (Plan.changes_from), so a round writes only the reasons that changed (issue 38: on the Synergy
    # FIFO+TUNE configuration ~1,200 jobs wait and most keep their reason). False: every reason, every
    # pass, as before (what tests/test_reason_changes.py and a benchmark compare against). Same reasons
    # either way.
    reason_changes: bool = True
    # The walk's reasons by the budget left, then the GPUs asked (_walk), kept from pass to pass: a reason
    # is a function of those two (and the ordering's name), and the same object each pass lets a change set
    # find a reason the core holds by identity, not by comparing fields (a loaded Synergy queue: ~600
    # waiting jobs a pass, a few sizes and budgets).
    _waits: dict[int, dict[int, Unplaced]] = field(default_factory=dict, init=False, repr=False, compare=False)
    # True: an arrival-order walk (FIFO) that says its reasons as changes skips the waiting jobs behind the
    # point where the GPU budget ran out that hold that point's reason already (_walk_tail; issue 38: a loaded
    # Synergy FIFO+TUNE round ranks ~1,300 jobs and ~70 fit). False: every one is looked at, as before
    # (what tests/test_staged_tail.py compares against). Same plans and reasons either way.
    skip_tail: bool = True
    # The last applied walk's tail (_walk_tail): (the core's reasons mapping it edited, the event log's length
    # when it looked, the ordering key from which every waiting job then held the out-of-budget reason for its
    # GPUs); and the pass's own, kept until its plan is applied.
    _tail: tuple[object, int, tuple[float, int]] | None = field(default=None, init=False, repr=False, compare=False)
    _tail_next: tuple[object, int, tuple[float, int]] | None = field(default=None, init=False, repr=False,
                                                                     compare=False)
    _walked: bool = field(default=False, init=False, repr=False, compare=False)  # this pass ran _walk

    def __post_init__(self) -> None:
        if not self.backfill and (self.ordering.preemptive or self.placement.batch):
            raise ValueError(f"policy {self.name!r}: backfill=False needs a non-preemptive ordering and a "
                             f"one-by-one placement (got {self.ordering.name!r}, {self.placement.name!r})")

    @property
    def needs_rounds(self) -> bool:
        """Whether the round timer must trigger passes (priorities drift with time, or an adjuster
        acts on a round clock)."""
        return (self.ordering.needs_rounds or need_rounds(self.adjusters)
                or (self.placement.batch and self.placement.rounds))

    @property
    def acts_without_pending(self) -> bool:
        """Whether a pass can do anything when no job is waiting: only an adjuster can."""
        return act_without_pending(self.adjusters)

    @property
    def resource_sensitive(self) -> bool:
        return self.placement.resource_sensitive

    @property
    def honours(self) -> frozenset[str]:
        return frozenset().union(*(stage.honours for stage in self._all()))

    @property
    def relies_on(self) -> frozenset[str]:
        return frozenset().union(*(getattr(stage, "relies_on", frozenset()) for stage in self._all()))

    def stages(self) -> list[tuple[str, str]]:
        return [("admission", self.admission.name), ("ordering", self.ordering.name),
                ("sizing", self.sizing.name), ("placement", self.placement.name),
                *(("preempt", p.name) for p in self.preemptions), *described(self.adjusters)]

    def _all(self) -> Iterator[Stage]:
        yield from (self.admission, self.ordering, self.sizing, self.placement, *self.preemptions, *self.adjusters)

    def schedule(self, view: ClusterView, state: PassState) -> Plan:
        plan = Plan()
        waits = self.placement.batch and not self.placement.acts_now(view)
        if waits and type(self.admission) is AdmitAll:  # (every pending job admitted: no list of them needed)
            admitted: list[JobInfo] | Sequence[JobInfo] = view.pending
        else:
            admitted = list(self.admission.admit(view, view.pending, plan, state))
        free = None  # the pass's ledger, copied only for a pass that places (or an adjuster)
        if admitted:
            if waits:
                # A round-based placement (Synergy §3) decides at round boundaries only: until the next
                # one the runnable set, its placements and the queue stay as they are.
                plan.otherwise = by_policy(self.placement.name, "waits for the next round ({:g} s rounds: "
                                           "the runnable set is chosen and placed at round boundaries)",
                                           view.round_s)
            elif self.ordering.preemptive or self.placement.batch:  # (admitted is the list admit made)
                free = view.free.copy()
                self._runnable(view, cast(list[JobInfo], admitted), plan, free, state)
            else:
                free = view.free.copy()
                self._in_order(view, cast(list[JobInfo], admitted), plan, free, state)
        if free is None and self.adjusters:
            free = view.free.copy()
        plan = adjust(self.adjusters, view, plan, free, state)
        if plan.settles and not self._walks_alike:
            plan.settles = False
        return plan

    @property
    def _walks_alike(self) -> bool:
        """Whether the walk finds the same runnable jobs, in the same order, and tells the waiting ones the
        same reasons, on the state a plan leaves that started or moved the runnable jobs and left none of
        them waiting, as it did on the state before (so a placement's promise, Plan.settles, holds for the
        pass): every job admitted, an order that is arrival order (a job keeps its place as it starts), and
        no stage after the placement."""
        return (type(self.admission) is AdmitAll and self.ordering.arrival_order and not self.preemptions
                and not self.adjusters)

    @property
    def round_gated(self) -> bool:
        """Whether a pass at a round boundary and one between rounds differ with nothing else changed (a
        round-based batch placement: the one places, the other says "waits for the next round"), so a
        quiet pass vouches only for passes of its own kind (:meth:`Policy.quiet_until`)."""
        return bool(self.placement.batch and self.placement.rounds)

    def quiet_until(self, view: ClusterView) -> float:
        """:meth:`Policy.quiet_until`: the ordering's :meth:`~Ordering.same_until` when every other
        stage is time-invariant (so only the order can change with the clock), else ``-inf``."""
        if all(stage.time_invariant for stage in self._all() if stage is not self.ordering):
            return self.ordering.same_until(view)
        return -math.inf

    def on_applied(self, view: ClusterView, plan: Plan, state: PassState) -> None:
        if self._walked or plan.unplaced or plan.since is not None:  # a pass that looked at waiting jobs:
            self._tail = self._tail_next  # its own tail, if any, is the one the core's reasons now hold
        self._walked, self._tail_next = False, None
        for stage in self._all():
            stage.on_applied(view, plan, state)

    def on_rejected(self, view: ClusterView, plan: Plan, state: PassState) -> None:
        self._tail = self._tail_next = None
        self._walked = False
        for stage in self._all():
            stage.on_rejected(view, plan, state)

    def _place(self, view: ClusterView, job: JobInfo, gpus: int, plan: Plan, free: FreeResources,
               state: PassState) -> bool:
        placed = self._per_job().place(view, job, gpus, free, state)
        if isinstance(placed, Unplaced):
            for preemption in self.preemptions:
                if self._preempt_for(view, job, gpus, preemption, plan, free, state):
                    return True
            plan.wait(job.job_id, placed)
            return False
        placed = with_runtime_plan(view, job.spec, placed)
        free.take(placed)
        plan.start(job.job_id, placed)
        return True

    def _per_job(self) -> Placement:
        """The placement as the one-by-one path calls it (the path a batch placement never takes)."""
        placement = self.placement
        if placement.batch:
            raise TypeError(f"{placement.name!r} places whole runnable sets, not one job at a time")
        return placement

    def _preempt_for(self, view: ClusterView, job: JobInfo, gpus: int, preemption: Preemption, plan: Plan,
                     free: FreeResources, state: PassState) -> bool:
        """Preempt the fewest of ``preemption``'s victims (in its order) that let ``job`` be placed."""
        gone = plan.stops()
        trial = free.copy()
        taken: list[JobInfo] = []
        for victim in preemption.victims(view, job, plan, state):
            if victim.job_id in gone or victim.allocation is None:
                continue
            trial.give(victim.allocation)
            taken.append(victim)
            placed = self._per_job().place(view, job, gpus, trial, state)
            if isinstance(placed, Unplaced):
                continue
            for v in taken:
                plan.preempt(v.job_id)
                free.give(allocation_of(v))
            placed = with_runtime_plan(view, job.spec, placed)
            free.take(placed)
            plan.start(job.job_id, placed)
            return True
        return False

    def _in_order(self, view: ClusterView, jobs: list[JobInfo], plan: Plan, free: FreeResources,
                  state: PassState) -> None:
        if not self.ordering.arrival_order:  # view.pending is already in arrival order
            jobs.sort(key=self.ordering.key(view, state))
        left = free.usable_free_gpus  # GPUs on drained or agent-less nodes cannot be handed out
        # With every pending job admitted at its requested size, the pass can stop
        # as soon as no job still to be visited asks for <= `left` GPUs: on a long
        # queue that is the difference between O(started) and O(queue) per pass.
        waiting = Counter(view.pending_demand) if self._bounded(jobs, view) else None
        smallest = min(waiting) if waiting else 0
        for job in jobs:
            if (left < smallest or left == 0) and not self.preemptions:
                plan.otherwise = cannot_fit(self.ordering.name, "{:#usable GPU} free; every job still waiting "
                                            "needs more", left)
                break
            if waiting is not None:
                n = job.spec.num_gpus
                waiting[n] -= 1
                if not waiting[n]:
                    del waiting[n]
                    if n == smallest and waiting:
                        smallest = min(waiting)
            gpus = self.sizing.gpus(view, job)
            if gpus > left and not self.preemptions:
                plan.wait(job.job_id, cannot_fit(self.placement.name, "needs {:#GPU}; {} usable free", gpus, left))
            elif self._place(view, job, gpus, plan, free, state):
                left = free.usable_free_gpus if self.preemptions else left - gpus
                continue
            if not self.backfill:
                plan.otherwise = by_policy(self.ordering.name, "behind {}, which cannot start (no backfilling)",
                                           job.job_id)
                break

    def _bounded(self, jobs: list[JobInfo], view: ClusterView) -> bool:
        """Whether the pass may stop at the first job no free GPUs can hold: not when a preemption
        stage could free GPUs for it."""
        return isinstance(self.sizing, FixedSize) and len(jobs) == len(view.pending) and not self.preemptions

    def _runnable(self, view: ClusterView, pending: list[JobInfo], plan: Plan, free: FreeResources,
                  state: PassState) -> None:
        fixed = type(self.sizing) is FixedSize
        schedulable = view.schedulable_gpus
        if (self.reason_changes and view.reasons is not None and len(pending) == len(view.pending)
                and not plan.unplaced and plan.otherwise is None):
            # Both paths below give every admitted job a reason or a start, and every pending job is
            # admitted: the pass looks at every job the core holds a reason for (Plan.changes_from's promise).
            plan.changes_from(view.reasons)
        if not (self.placement.batch or self.ordering.remembers):
            # When every running and pending job fits the schedulable GPUs, nothing is preempted
            # and the runnable set is everything: placing the pending jobs in their own order is
            # the same pass without ranking (and keying) every running job.
            held = view.cluster.total_gpus - view.free.total_gpus
            if fixed and len(pending) == len(view.pending):  # every pending job, at its requested size
                asked = sum(gpus * count for gpus, count in view.pending_demand.items())
                sizes = None if held + asked > schedulable else [(j, j.spec.num_gpus) for j in pending]
            else:
                sizes = [(job, self.sizing.gpus(view, job)) for job in pending]
                if held + sum(g for _, g in sizes) > schedulable:
                    sizes = None
            if sizes is not None:
                key = self.ordering.key(view, state)
                sizes.sort(key=lambda pair: key(pair[0]))
                for job, gpus in sizes:
                    self._place(view, job, gpus, plan, free, state)
                return
        self._walk(view, self.ordering.ranking(view, state, pending), fixed, schedulable, plan, free, state)

    def _walk(self, view: ClusterView, ranking: Ranking, fixed: bool, budget: int, plan: Plan, free: FreeResources,
              state: PassState) -> None:
        """Keep the ranked jobs whose GPUs fit in ``budget`` in order (the runnable set), preempt the
        running jobs outside it and start the pending ones inside it."""
        head, kept = self._running_head(ranking, budget) if len(ranking.jobs) >= WALK_SKIP_FROM else (0, 0)
        budget -= kept
        rest: Iterable[JobInfo]
        if ranking.order is None:  # in order already: no copy of the ranking (a walk may stop at the cut)
            runnable = list(ranking.jobs[:head]) if self.placement.batch else []
            rest = itertools.islice(ranking.jobs, head, None)
        elif self.placement.batch:  # the batch placement is given the whole runnable set
            ranked = ranking.ranked_from(0)
            runnable, rest = list(ranked[:head]), ranked[head:]
        else:
            runnable, rest = [], ranking.ranked_from(head)
        starts: list[tuple[JobInfo, int]] = []
        # Jobs that wait for the same GPUs with the same budget left share one (immutable) reason: a
        # loaded queue has hundreds of waiting jobs per pass and only a few sizes.
        # Keyed by the budget, then the GPUs: the budget changes at a few jobs only, so most jobs look up
        # their reason by GPUs alone in the budget's table (no key tuple to build per job).
        waits = self._waits
        at_budget: dict[int, Unplaced] | None = None  # waits[budget], looked up when a job needs it
        unplaced = plan.unplaced  # plan.wait, inlined: this loop visits every running and pending job
        # A change set (_runnable): a reason the core holds already is not told again.
        held_of = plan.since.get if plan.since is not None else None
        # Where the budget runs out, a walk by an ordering with a tail key (FIFO's arrival, SRTF's remaining
        # time: Ordering.tail_key) hands the rest to _walk_tail (position in ``rest``).
        tail_key = (self.ordering.tail_key(view, state) if self.skip_tail and held_of is not None
                    and ranking.order is None and fixed and view.events is not None else None)
        self._tail_next, self._walked = None, True
        if tail_key is not None and not budget:  # the running head holds the whole budget: all behind is tail
            rest = ()  # (a loaded round that starts no job: ~1,300 jobs looked at one by one before)
            self._walk_tail(view, ranking, head, waits.setdefault(budget, {}), plan, free, tail_key)
        for at, job in enumerate(rest):
            allocation = job.allocation
            if allocation is not None:
                gpus = job.num_gpus
                if gpus <= budget:
                    budget -= gpus
                    at_budget = None  # (most jobs here run and fit: no lookup for them)
                    runnable.append(job)
                    if not budget and tail_key is not None:
                        self._walk_tail(view, ranking, head + at + 1, waits.setdefault(budget, {}), plan, free,
                                        tail_key)
                        break
                else:
                    plan.preempt(job.job_id)
                    free.give(allocation)
                continue
            gpus = job.spec.num_gpus if fixed else self.sizing.gpus(view, job)
            if gpus <= budget:
                budget -= gpus
                at_budget = None
                runnable.append(job)
                starts.append((job, gpus))
                if not budget and tail_key is not None:
                    self._walk_tail(view, ranking, head + at + 1, waits.setdefault(budget, {}), plan, free,
                                    tail_key)
                    break
                continue
            if at_budget is None:
                at_budget = waits.setdefault(budget, {})
            why = at_budget.get(gpus)
            if why is None:
                why = at_budget[gpus] = self._out_of_budget(gpus, budget)
            if held_of is None or ((held := held_of(job.job_id)) is not why and held != why):  # (visited once)
                unplaced[job.job_id] = why
        if self.placement.batch:
            self.placement.place_all(view, runnable, [job for job, _ in starts], plan, free, state)
            return
        for job, gpus in starts:
            self._place(view, job, gpus, plan, free, state)

    def _out_of_budget(self, gpus: int, budget: int) -> Unplaced:
        """Why a job of ``gpus`` GPUs is outside the runnable set, ``budget`` GPUs left at its turn."""
        return cannot_fit(self.ordering.name, "needs {:#GPU}; jobs ahead of it in {} order hold or take the "
                          "schedulable GPUs ({} left)", gpus, self.ordering.name, budget)

    def _walk_tail(self, view: ClusterView, ranking: Ranking, start: int, out: dict[int, Unplaced], plan: Plan,
                   free: FreeResources, key: Callable[[JobInfo], Any]) -> int:
        """The rest of :meth:`_walk` from ranked position ``start`` on, once no GPU of the budget is left (the
        walk of an ordering with a tail key, ``key``, telling its reasons as changes: Ordering.tail_key): every
        running job there is preempted (in order) and every waiting one waits with ``out``'s reason for its
        GPUs, as the walk would have done job by job. A waiting job need not be told what the core holds for it
        already, and one that holds it can be known without looking at it: at the last applied walk every job
        waiting from that walk's key on was told (or held) that reason; a job waiting now from that key on
        either waited then too, untouched since, with a key then no lower than now (a waiting job's never
        grows), so from that key on then too, and holds it still, or has an event since (it arrived, or was
        preempted), so is looked at. Jobs between this pass's cut and that key are looked at one by one.
        Valid while the core edits the same reasons (the views' mapping; a pass between rounds leaves them as
        they are), so a chain of such walks with no other pass telling reasons between them. Returns how many
        waiting jobs it looked at (a benchmark's count)."""
        jobs, events, since = ranking.jobs, view.events, plan.since
        assert events is not None and since is not None
        for i in np.flatnonzero(ranking.held[start:]).tolist():  # running jobs past the budget: preempted
            job = jobs[start + i]
            plan.preempt(job.job_id)
            free.give(allocation_of(job))
        last = self._tail
        end = len(jobs)
        touched: list[JobInfo] = []
        # (A cut at the very end leaves no tail: then no job is past it, however its key compares.)
        if last is not None and last[0] is since and last[1] <= len(events) and start < end:
            end = bisect_left(jobs, last[2], lo=start, key=key)
            records = view.jobs
            assert records is not None
            past = max(last[2], key(jobs[start]))
            for job_id in dict.fromkeys(event.job_id for event in events.since(last[1])):
                record = records.get(job_id)  # waiting now, at or after ``end`` (before it: looked at anyway)
                if (record is not None and record.state is JobState.PENDING and record.allocation is None
                        and key(record) >= past):
                    touched.append(record)
        unplaced, held_of = plan.unplaced, since.get
        looked = 0
        for job in itertools.chain(itertools.islice(jobs, start, end), touched):
            if job.allocation is not None:
                continue
            looked += 1
            why = out.get(job.spec.num_gpus)
            if why is None:
                why = out[job.spec.num_gpus] = self._out_of_budget(job.spec.num_gpus, 0)
            held = held_of(job.job_id)
            if held is not why and held != why:
                unplaced[job.job_id] = why
        if start < len(jobs):
            self._tail_next = (since, len(events), key(jobs[start]))
        return looked

    @staticmethod
    def _running_head(ranking: Ranking, budget: int) -> tuple[int, int]:
        """How many of the first ranked jobs are running jobs whose GPUs fit in ``budget`` one after
        another, and the GPUs they hold: the walk keeps them all and changes nothing for them, so it
        starts after them (on 20,000 Philly jobs compressed 8x a LAS pass ranks ~1,400 jobs,
        ~1,300 of them running, and most come before the first job that does not fit; stepping through
        them was the largest part of its pass)."""
        held = ranking.held_ranked()
        fits = 0
        for head, gpus in enumerate(held[:HEAD_WALK].tolist()):  # (a short head: Python's walk is cheaper)
            if not gpus or fits + gpus > budget:
                return head, fits
            fits += gpus
        if len(held) <= HEAD_WALK:
            return len(held), fits
        waiting = np.flatnonzero(held == 0)
        running = int(waiting[0]) if waiting.size else len(held)
        summed = np.cumsum(held[:running])
        head = int(np.searchsorted(summed, budget, side="right"))
        return head, int(summed[head - 1]) if head else 0

