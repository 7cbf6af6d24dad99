"""Baseline orderings: FIFO, SRTF, LAS and Themis' finish-time fairness.

Ties break by arrival order, so every ordering is a total order and passes are
deterministic.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from halyard.datamodel import JobState, ValidationError
from halyard.policies.event_order import EventOrder, OrderedColumns, RunningFollower, WaitingFollower
from halyard.policies.passstate import PassState
from halyard.policies.plan import Plan
from halyard.policies.stages import Ordering, Ranking
from halyard.policies.view import ClusterView, JobInfo

# Synergy's public simulator (msr-fiddle/synergy, simulator/schedulers/srtf_synergy_new.py and
# las_synergy_new.py: ``if job.get_time_since_last_execution(t) > 1000 * 3600: job.job_priority = 1``)
# puts a job that has not run for 1,000 hours ahead of every other, for good. Not in the paper:
# Halyard's SRTF and LAS apply it only when named (``+starvation-guard``).
STARVATION_GUARD_S = 1000 * 3600.0
STARVATION_PROMOTED_KEY = "ordering/starvation-promoted"  # pass state: this pass's promoted job ids
# How close two jobs' remaining times may come before Srtf.same_until stops promising an unchanged order
# (ours): a millionth of the two keys plus a microsecond, far above the float rounding of a key (about
# 1e-16 of it) and far below the gaps between jobs' remaining times, so it only ever costs a pass that
# would have been skipped. And how long before that time the promise ends (as tiresias.QUIET_MARGIN_S).
SRTF_QUIET_KEY_TOLERANCE = 1e-6
SRTF_QUIET_MARGIN_S = 1e-3


class StarvationGuard:
    """Which jobs have waited longer than ``after_s`` since they last ran (or arrived): they go first
    from then on (sticky, as the public simulator's ``job_priority``).

    Promotion is a step of its own, not a side effect of sorting: :meth:`promote` finds the pass's
    promotions once, over every pending job, and keeps them tentatively in the pass state; the ordering's
    :meth:`commit` (from ``on_applied``) makes them last, so a refused plan promotes nobody, as the
    policy contract has it (stages learn only from applied plans). :meth:`rank` then only reads.
    """

    def __init__(self, after_s: float) -> None:
        if not after_s > 0:
            raise ValidationError(f"must be > 0 seconds, got {after_s!r}", field="starvation_guard")
        self.after_s = after_s
        self.promoted: frozenset[str] = frozenset()  # as of the last applied pass
        # The queue last scanned (the core's own, the same object from pass to pass) and the earliest time a
        # job waits from in it then: a job that waits later began after that scan (the clock never goes
        # back), so until that earliest one has waited ``after_s`` no job of the queue has (promote).
        self._scanned: object | None = None
        self._earliest = math.inf

    def promote(self, view: ClusterView, state: PassState) -> frozenset[str]:
        """The jobs promoted at this pass: those kept, plus every pending job that has waited more than
        ``after_s`` (remembered in ``state`` until the plan is applied). The queue is scanned only once
        its earliest waiting job may have waited that long: a loaded Synergy queue holds ~1,300 jobs and
        the guard's 1,000 h are rarely reached."""
        now, after_s = view.now, self.after_s
        pending = view.pending
        if pending is self._scanned and now - self._earliest <= after_s:
            promoted = self.promoted  # no waiting job has waited after_s (the earliest has not)
        else:
            new = {job.job_id for job in pending if now - job.pending_since > after_s} - self.promoted
            promoted = self.promoted | new
            self._scanned, self._earliest = pending, min((job.pending_since for job in pending), default=math.inf)
        state.put(STARVATION_PROMOTED_KEY, promoted)
        return promoted

    def commit(self, view: ClusterView, state: PassState) -> None:
        """Keep the pass's promotions (its plan was applied); forget jobs that have ended."""
        promoted = state.get(STARVATION_PROMOTED_KEY, self.promoted)
        if not promoted:  # nobody to keep: no need to list the live jobs
            self.promoted = frozenset()
            return
        records = view.jobs
        if records is not None:  # (each promoted job looked up, not every pending one listed)
            running = view.running
            self.promoted = frozenset(j for j in promoted if j in running or (
                (r := records.get(j)) is not None and r.state is JobState.PENDING))
            return
        live = view.running.keys() | {job.job_id for job in view.pending}
        self.promoted = frozenset(j for j in promoted if j in live)

    def next_promotion(self, view: ClusterView, promoted: frozenset[str]) -> float:
        """When the first pending job not in ``promoted`` will have waited ``after_s`` (so is promoted at any
        later pass): the earliest waiting time the last scan found, when it was of this queue and nobody is
        promoted; else read from the queue."""
        if not promoted and view.pending is self._scanned:
            return self._earliest + self.after_s
        return min((job.pending_since for job in view.pending if job.job_id not in promoted),
                   default=math.inf) + self.after_s

    @staticmethod
    def rank(promoted: frozenset[str], job: JobInfo) -> int:
        """0 for a promoted job, else 1: the first element of the guarded ordering's key."""
        return 0 if job.job_id in promoted else 1


def _arrival_key(job: JobInfo) -> tuple[float, int]:
    """:class:`Fifo`'s key: submit time, arrival."""
    return (job.spec.submit_time, job.arrival_seq)


class Fifo(Ordering):
    """First in, first out by submit time; never preempts."""

    name = "fifo"
    preemptive = False
    needs_rounds = False
    arrival_order = True  # the core keeps pending jobs by (submit time, arrival)

    def __init__(self) -> None:
        # The running jobs in key order as of the last pass of the core's own view (_running_order): whose
        # records they are, then each job's key by id, and the keys and the jobs sorted.
        self._running: tuple[object, dict[str, tuple[float, int]], list[tuple[float, int]], list[JobInfo]] | None = None

    def key(self, view: ClusterView, state: PassState) -> Callable[[JobInfo], tuple[float, int]]:
        return lambda job: (job.spec.submit_time, job.arrival_seq)

    def same_until(self, view: ClusterView) -> float:
        """:meth:`Ordering.same_until`: a job's key is its submit time and arrival, which the clock never
        moves, so the order holds for good (until an event)."""
        return math.inf

    def tail_key(self, view: ClusterView, state: PassState) -> Callable[[JobInfo], Any] | None:
        """:meth:`Ordering.tail_key`: submit time and arrival (the key itself), which never change."""
        return _arrival_key

    def ranking(self, view: ClusterView, state: PassState, pending: Sequence[JobInfo]) -> Ranking:
        """:meth:`Ordering.ranking` without sorting the queue: ``pending`` is already in arrival order
        (the contract of :meth:`Ordering.ranked`, which :attr:`arrival_order` states), so only the
        running jobs are sorted and each is put in by bisection (keys are unique: ties break by
        arrival). A loaded Synergy FIFO+TUNE round ranks ~1,300 jobs, ~50 of them running;
        keying and sorting all of them every pass was 15 % of its cProfile. The running jobs ahead of the
        first waiting one (98 % of them in that round) go in as one slice of the sorted running jobs."""
        key = self.key(view, state)
        if type(self).key is Fifo.key and view.jobs is not None:
            keys, running = self._running_order(view, key)
        else:  # another key, or a view without the core's records: sorted afresh (keys are unique)
            pairs = sorted((key(job), job) for job in view.running.values())
            keys, running = [k for k, _ in pairs], [job for _, job in pairs]
        head = len(running) if not pending else bisect_left(keys, key(pending[0]))
        jobs = running[:head]
        held = np.zeros(len(running) + len(pending), np.int64)
        held[:head] = [job.num_gpus for job in jobs]
        at, gpus, cut = [], [], 0
        for k, job in zip(keys[head:], running[head:], strict=True):  # (the few running jobs behind a waiting one)
            i = bisect_left(pending, k, lo=cut, key=key)
            if i > cut:
                jobs.extend(pending[cut:i])
                cut = i
            at.append(len(jobs))
            gpus.append(job.num_gpus)
            jobs.append(job)
        jobs.extend(pending[cut:])
        if at:
            held.put(at, gpus)
        return Ranking(jobs, None, held)

    def _running_order(self, view: ClusterView, key: Callable[[JobInfo], tuple[float, int]]
                       ) -> tuple[list[tuple[float, int]], list[JobInfo]]:
        """The running jobs of the core's view sorted by ``key`` (:meth:`key`), and their keys: the kept lists
        themselves, read only. A job's key never changes and the core keeps one record per job for its life
        (``view.jobs``), so from pass to pass only the jobs that started or stopped since are put in or taken out
        (by bisection: keys are unique); a pass of another core's records sorts afresh."""
        kept, running = self._running, view.running
        if kept is None or kept[0] is not view.jobs:
            pairs = sorted((key(job), job) for job in running.values())
            kept = self._running = (view.jobs, {job.job_id: k for k, job in pairs},
                                    [k for k, _ in pairs], [job for _, job in pairs])
            return kept[2], kept[3]
        _, by_id, keys, jobs = kept
        if by_id.keys() != running.keys():
            for job_id in by_id.keys() - running.keys():
                i = bisect_left(keys, by_id.pop(job_id))
                del keys[i], jobs[i]
            for job_id in running.keys() - by_id.keys():
                job = running[job_id]
                k = by_id[job_id] = key(job)
                i = bisect_left(keys, k)
                keys.insert(i, k)
                jobs.insert(i, job)
        return keys, jobs


_RANKED = (JobState.PENDING, JobState.RUNNING)
# How many progress lines of jobs no longer running Srtf._running_keys keeps before it prunes them (our choice:
# a few passes' worth of ended jobs; each pruning is one pass over the kept lines).
KEYS_SLACK = 256


class WaitingByKey(WaitingFollower, EventOrder):
    """The waiting jobs sorted by a key that does not move while a job waits (SRTF's remaining time,
    submission, arrival), kept from pass to pass and read again only for the jobs of new events; with each
    key's first element in a list of its own (:func:`bisect_key`)."""

    def __init__(self) -> None:
        self._key: Callable[[JobInfo], Any] | None = None
        super().__init__()

    def _start(self, events: object) -> None:
        super()._start(events)
        self._firsts: list[Any] = []  # in the order of _keys: each key's first element

    def ordered(self, view: ClusterView, key: Callable[[JobInfo], Any]
                ) -> tuple[list[JobInfo], list[Any], list[Any]]:
        """The view's waiting jobs sorted by ``key``, their keys and the keys' first elements: the kept lists
        themselves, read only and valid until the next call. ``key`` must give a waiting job the key it gave it
        at any earlier pass."""
        self._key = key
        self._follow(view)
        return self._jobs, self._keys, self._firsts

    def _learn(self, job: JobInfo, view: ClusterView) -> None:
        assert self._key is not None
        key = self._key(job)
        self._firsts.insert(self._insert(job, key), key[0])

    def _forget(self, job_id: str) -> int | None:
        i = super()._forget(job_id)
        if i is not None:
            del self._firsts[i]
        return i


def bisect_key(keys: Sequence[Any], firsts: Sequence[Any], key: Any, lo: int) -> int:
    """``bisect_left(keys, key, lo=lo)`` for sorted tuples ``keys`` whose first elements are ``firsts``: by the
    first elements (a float compare, not a tuple's), then over the keys that share ``key``'s first. SRTF
    puts ~65 running jobs into ~240 waiting ones a loaded Synergy round, eight tuple compares each before."""
    first = key[0]
    i = bisect_left(firsts, first, lo=lo)
    n = len(keys)
    while i < n and firsts[i] == first and keys[i] < key:
        i += 1
    return i


class Srtf(Ordering):
    """Shortest remaining time first, preemptive.

    Remaining time = remaining iterations x the job's ideal (consolidated)
    iteration time, so a job is not penalised for a bad current placement.
    Only events change the order (running jobs' keys only shrink), so SRTF
    needs no round passes.
    """

    name = "srtf"
    preemptive = True
    arrival_order = False
    needs_rounds = False
    guard: StarvationGuard | None = None

    def __init__(self) -> None:
        self._waiting = WaitingByKey()
        # Running jobs' progress lines by job id (_running_keys): (job, epoch, allocation, iterations, as a
        # float, ideal iteration, submit time, arrival, done, since, rate, GPUs).
        self._lines: dict[str, tuple[Any, ...]] = {}
        # The last ranking from the kept order, its view and the jobs promoted then (for same_until), and the
        # key it was made with (for tail_key in the same pass).
        self._last: tuple[ClusterView, Ranking, frozenset[str]] | None = None
        self._key: tuple[ClusterView, Callable[[JobInfo], tuple[float, ...]]] | None = None

    def key(self, view: ClusterView, state: PassState) -> Callable[[JobInfo], tuple[float, ...]]:
        now, guard = view.now, self.guard
        if guard is not None:
            promoted, rank = guard.promote(view, state), guard.rank
            return lambda job: (rank(promoted, job), job.remaining_iterations(now) * job.ideal_iteration_s,
                                job.spec.submit_time, job.arrival_seq)
        return self.remaining_key(view)

    @staticmethod
    def remaining_key(view: ClusterView) -> Callable[[JobInfo], tuple[float, float, int]]:
        """The key without the starvation guard's rank: the order among jobs the guard treats alike."""
        now = view.now
        return lambda job: (job.remaining_iterations(now) * job.ideal_iteration_s, job.spec.submit_time,
                            job.arrival_seq)

    def ranking(self, view: ClusterView, state: PassState, pending: Sequence[JobInfo]) -> Ranking:
        """:meth:`Ordering.ranking` with the waiting jobs in an order kept from pass to pass
        (:class:`WaitingByKey`): a waiting job's remaining time does not move (it makes no progress), so
        only the running jobs are keyed and sorted at each pass, and each is put in by bisection (keys are
        unique: ties break by arrival), after the jobs the starvation guard promotes (sorted among
        themselves). A loaded Synergy SRTF pass ranks ~1,300 jobs, ~60 of them running; keying and sorting
        all of them every pass was a quarter of the run. Sorted afresh when the view offers no event log,
        when not every pending job is admitted, or for a subclass's own key."""
        if (type(self).key is not Srtf.key or view.events is None or view.jobs is None
                or len(pending) != len(view.pending)):
            return super().ranking(view, state, pending)
        key, unguarded = self.key(view, state), self.remaining_key(view)
        self._key = (view, key)
        waiting, keys, firsts = self._waiting.ordered(view, unguarded)
        promoted: frozenset[str] = frozenset()
        if self.guard is not None:
            promoted = state.get(STARVATION_PROMOTED_KEY, frozenset())
        jobs: list[JobInfo] = []
        running: Iterable[JobInfo] = view.running.values()
        if promoted:  # rank 0 before everything else; then the order without them
            found = (view.jobs.get(job_id) for job_id in promoted)
            jobs = sorted((j for j in found if j is not None and j.state in _RANKED), key=key)
            kept = [i for i, j in enumerate(waiting) if j.job_id not in promoted]
            waiting, keys, firsts = [waiting[i] for i in kept], [keys[i] for i in kept], [firsts[i] for i in kept]
            running = [j for j in running if j.job_id not in promoted]
        at = [i for i, job in enumerate(jobs) if job.allocation is not None]
        gpus = [jobs[i].num_gpus for i in at]
        cut = 0
        # Each running job keyed once (keys are unique: the job itself is never compared), in columns.
        entries = sorted(self._running_keys(view, running))
        remaining, submits, arrivals, ordered, held_by = zip(*entries, strict=True) if entries else ((),) * 5
        # The running jobs with less remaining time than every waiting one (7 in 10 in a loaded Synergy round)
        # go in as one slice, from position ``start``; each other is put in by bisection.
        head = bisect_left(remaining, firsts[0]) if firsts else len(entries)
        start = len(jobs)
        jobs.extend(ordered[:head])
        n = len(firsts)
        for r in range(head, len(entries)):
            k0 = remaining[r]
            i = bisect_left(firsts, k0, lo=cut)
            if i < n and firsts[i] == k0:  # (a waiting job with the same remaining time: the whole key decides)
                i = bisect_key(keys, firsts, (k0, submits[r], arrivals[r]), cut)
            if i > cut:
                jobs.extend(waiting[cut:i])
                cut = i
            at.append(len(jobs))
            gpus.append(held_by[r])
            jobs.append(ordered[r])
        jobs.extend(waiting[cut:])
        held = np.zeros(len(jobs), np.int64)
        held[start:start + head] = held_by[:head]
        held.put(at, gpus)
        ranking = Ranking(jobs, None, held)
        self._last = (view, ranking, promoted)
        return ranking

    def _running_keys(self, view: ClusterView, running: Iterable[JobInfo]
                      ) -> list[tuple[float, float, int, JobInfo, int]]:
        """Each running job's :meth:`remaining_key`, then the job and its GPUs, in one flat tuple (sorting flat
        tuples compares floats, not the key tuples within), from its progress line kept while its epoch and
        allocation are those it was read at (which fix the line: ``JobInfo.epoch``): the same arithmetic as
        ``JobRecord.iterations_done``, without its calls (a loaded Synergy round keys ~65)."""
        now = view.now
        if len(self._lines) > 2 * len(view.running) + KEYS_SLACK:
            self._lines = {job_id: line for job_id, line in self._lines.items() if job_id in view.running}
        out, lines = [], self._lines
        for job in running:
            line = lines.get(job.job_id)  # (_kept_line, inlined: ~65 a round)
            if line is None or line[0] is not job or line[1] != job.epoch or line[2] is not job.allocation:
                line = self._read_line(job)
            _, _, _, total, ceiling, ideal, submit, arrival, done, since, rate, g = line
            if rate != 0.0 and (elapsed := now - since) > 0.0:
                done += rate * elapsed  # at most the ceiling: min(ceiling, done) without the call, the same float
                if not done < ceiling:
                    done = ceiling
            out.append(((total - done) * ideal, submit, arrival, job, g))
        return out

    def tail_key(self, view: ClusterView, state: PassState) -> Callable[[JobInfo], Any] | None:
        """:meth:`Ordering.tail_key`: the key itself. A waiting job's remaining time does not move and the
        starvation guard's rank only falls (its promotions are for good); ``None`` for a subclass's own key."""
        if type(self).key is not Srtf.key:
            return None
        kept = self._key
        return kept[1] if kept is not None and kept[0] is view else self.key(view, state)

    def same_until(self, view: ClusterView) -> float:
        """:meth:`Ordering.same_until`: a waiting job's remaining time does not move and a running job's
        falls along a line (flat until its restore ends, then at its rate: ``JobInfo.progress_line``), so
        with no event the order of the jobs changes first between two neighbours in it, one of them
        running: the order holds until the first such pair's remaining times meet (within
        ``SRTF_QUIET_KEY_TOLERANCE``), or until the starvation guard promotes its next job, less
        ``SRTF_QUIET_MARGIN_S``. Jobs promoted and not (the key's first element) never change places. The
        lines change only with events and with an agent's report of real progress, after which the core
        asks again (SchedulingCore.report_progress). ``-inf`` for a subclass's own key."""
        if type(self).key is not Srtf.key:
            return -math.inf
        if self._last is not None and self._last[0] is view:  # the quiet pass's own ranking
            _, ranking, promoted = self._last
        else:
            state = PassState()
            ranking = self.ranking(view, state, view.pending)
            promoted = state.get(STARVATION_PROMOTED_KEY, frozenset())
        jobs = ranking.ranked()
        until = math.inf if self.guard is None else self.guard.next_promotion(view, promoted)
        # A running job's neighbour behind it waits (never catches up: it does not move) or runs (that pair
        # is the other's): only the running jobs and the neighbours ahead of them are compared.
        for i in np.flatnonzero(ranking.held_ranked()).tolist():
            if i:
                ahead, behind = jobs[i - 1], jobs[i]
                if (ahead.job_id in promoted) == (behind.job_id in promoted):
                    until = min(until, _lines_meet(self._line_of(ahead), self._line_of(behind), view.now))
        return until - SRTF_QUIET_MARGIN_S

    def _kept_line(self, job: JobInfo) -> tuple[Any, ...]:
        """The job's entry in :attr:`_lines`, read again from its progress line where its epoch or allocation
        is not the one it was read at."""
        line = self._lines.get(job.job_id)
        if line is None or line[0] is not job or line[1] != job.epoch or line[2] is not job.allocation:
            line = self._read_line(job)
        return line

    def _read_line(self, job: JobInfo) -> tuple[Any, ...]:
        """Read ``job``'s progress line into :attr:`_lines` (and return the entry)."""
        done, since, rate, _, _ = job.progress_line()
        line = self._lines[job.job_id] = (job, job.epoch, job.allocation, job.iterations_total,
                                          float(job.iterations_total), job.ideal_iteration_s, job.spec.submit_time,
                                          job.arrival_seq, done, since, rate, job.num_gpus)
        return line

    def _line_of(self, job: JobInfo) -> tuple[float, float, float]:
        """SRTF's remaining time of ``job`` as a line, from its kept progress line: ``(value, since, slope)``, the
        value until ``since`` and falling by ``slope`` per second after it (to its completion, an event)."""
        _, _, _, total, _, ideal, _, _, done, since, rate, _ = self._kept_line(job)
        return (total - done) * ideal, since, rate * ideal

    def on_applied(self, view: ClusterView, plan: Plan, state: PassState) -> None:
        if self.guard is not None:
            self.guard.commit(view, state)


def _lines_meet(a: tuple[float, float, float], b: tuple[float, float, float], now: float) -> float:
    """The earliest time from ``now`` on at which remaining-time line ``b`` (``Srtf._line_of``, the job
    behind) comes within ``SRTF_QUIET_KEY_TOLERANCE`` of ``a`` (the job ahead): ``now`` if it is already, ``inf``
    if never. The lines are straight between their ``since`` times."""
    if a[1] <= now and b[1] <= now:  # (most pairs: both lines straight from now on)
        va, vb = a[0] - a[2] * (now - a[1]), b[0] - b[2] * (now - b[1])
        gap = vb - va - SRTF_QUIET_KEY_TOLERANCE * (abs(va) + abs(vb) + 1.0)
        if gap <= 0.0:
            return now
        closing = b[2] - a[2]
        return now + gap / closing if closing > 0.0 else math.inf
    points = sorted({now, *(since for _, since, _ in (a, b) if since > now)})
    for i, t in enumerate(points):
        va = a[0] if t <= a[1] else a[0] - a[2] * (t - a[1])
        vb = b[0] if t <= b[1] else b[0] - b[2] * (t - b[1])
        gap = vb - va - SRTF_QUIET_KEY_TOLERANCE * (abs(va) + abs(vb) + 1.0)
        if gap <= 0.0:
            return t
        closing = (b[2] if t >= b[1] else 0.0) - (a[2] if t >= a[1] else 0.0)  # per second, after t
        if closing > 0.0:
            meet = t + gap / closing
            if i + 1 == len(points) or meet <= points[i + 1]:
                return meet
    return math.inf


class Las(Ordering):
    """Least attained service first: attained GPU-seconds (GPUs x time held), preemptive."""

    name = "las"
    preemptive = True
    arrival_order = False
    needs_rounds = True
    guard: StarvationGuard | None = None

    def __init__(self) -> None:
        self._running = RunningService()  # what ranking() keeps between passes

    def key(self, view: ClusterView, state: PassState) -> Callable[[JobInfo], tuple[float, ...]]:
        now, guard = view.now, self.guard
        if guard is not None:
            promoted, rank = guard.promote(view, state), guard.rank
            return lambda job: (rank(promoted, job), job.attained_gpu_s(now), job.spec.submit_time,
                                job.arrival_seq)
        return lambda job: (job.attained_gpu_s(now), job.spec.submit_time, job.arrival_seq)

    def ranking(self, view: ClusterView, state: PassState, pending: Sequence[JobInfo]) -> Ranking:
        """:meth:`Ordering.ranking` with the running jobs' service kept between passes as arrays
        (:class:`RunningService`) when it can be: no starvation guard and a view that offers the core's
        event log; otherwise sorted afresh by :meth:`key`."""
        if self.guard is not None or view.events is None or view.jobs is None:
            return super().ranking(view, state, pending)
        return self._running.ranking(view, pending)

    def on_applied(self, view: ClusterView, plan: Plan, state: PassState) -> None:
        if self.guard is not None:
            self.guard.commit(view, state)


class RunningService(RunningFollower, EventOrder):
    """LAS' order of the running and pending jobs, with the running jobs' attained service lines kept
    from pass to pass (keying and sorting ~1,300 running jobs every pass was a quarter of LAS'
    time on 20k Philly jobs compressed 8x, and between two passes a handful of them start or stop).

    A running job's attained service is ``banked + gpus x (now - since)``
    (:meth:`~halyard.policies.view.JobInfo.service_line`), three numbers that change only when the core
    logs an event for the job (:class:`~halyard.policies.event_order.EventFollower` keeps them up). They
    are kept in (submit time, arrival number) order, as the view's pending jobs are. Each pass evaluates
    every line at once with the same float operations as
    :meth:`~halyard.policies.view.JobInfo.attained_gpu_s` (one subtraction, one product, one sum per
    job) and sorts running and pending jobs by (attained, submit time, arrival number) -- a key that
    never ties, so the order is the one sorting by :meth:`Las.key` gives
    (``tests/test_las_running_service.py``)."""

    def __init__(self) -> None:
        self._running: Mapping[str, JobInfo] = {}  # the view's running jobs, as of the last ranking()
        super().__init__()

    def _start(self, events: object) -> None:
        super()._start(events)
        self._lines = OrderedColumns(3)  # rows: banked, gpus, since

    def ranking(self, view: ClusterView, pending: Sequence[JobInfo]) -> Ranking:
        self._running = view.running
        self._follow(view)
        n = len(self._jobs)
        banked, gpus, since = self._lines.data[:, :n]
        attained = banked + gpus * (view.now - since)
        held = gpus.astype(np.int64)
        if pending:
            attained = np.concatenate((attained, [job.attained_gpu_s(view.now) for job in pending]))
            held = np.concatenate((held, np.zeros(len(pending), np.int64)))
        jobs = [*self._jobs, *pending]
        return Ranking(jobs, self._order(attained, n, jobs), held)

    @staticmethod
    def _order(attained: np.ndarray, n: int, jobs: Sequence[JobInfo]) -> np.ndarray:
        """Positions of ``jobs`` (``n`` running ones, then pending ones, each part in (submit time,
        arrival number) order) by (attained, submit time, arrival number): a stable sort by service
        alone, unless a running job ties a pending one exactly (jobs of one part that tie are already in
        order); then all three keys. A third of the cost of sorting by three keys on ~1,400 jobs; the
        Philly jobs started in one pass on as many GPUs tie for as long as they run."""
        by_service = np.argsort(attained, kind="stable")
        ranked = attained[by_service]
        tied = np.flatnonzero(ranked[1:] == ranked[:-1])
        if tied.size and ((by_service[tied] < n) != (by_service[tied + 1] < n)).any():
            submit = np.fromiter((job.spec.submit_time for job in jobs), float, len(jobs))
            seq = np.fromiter((job.arrival_seq for job in jobs), np.int64, len(jobs))
            return np.lexsort((seq, submit, attained))
        return by_service

    def _holds(self, job: JobInfo) -> bool:
        return job.job_id in self._running

    def _learn(self, job: JobInfo, view: ClusterView) -> None:
        banked, gpus, since = job.service_line()
        if since is None:  # not running after all: the count check reads the view afresh
            return
        i = self._insert(job, (job.spec.submit_time, job.arrival_seq))
        self._lines.insert(i, len(self._jobs), (banked, gpus, since))

    def _forget(self, job_id: str) -> int | None:
        i = super()._forget(job_id)
        if i is not None:
            self._lines.delete(i, len(self._jobs))
        return i


class FinishTimeFairness(Ordering):
    """Themis finish-time fairness (REFERENCE-NUMBERS "Themis finish-time fairness").

    rho = (time since submission + remaining iterations x current iteration time)
        / (isolated time so far + remaining iterations / isolated throughput),
    isolated = a 1/N share of the cluster's GPUs (N = active jobs); a job that waits
    runs at no rate, so its shared time is its wait plus its remaining ideal time.
    Highest rho first (minimise the maximum rho); preemptive, drifts with time.
    """

    name = "ftf"
    preemptive = True
    arrival_order = False
    needs_rounds = True

    def key(self, view: ClusterView, state: PassState) -> Callable[[JobInfo], tuple[float, float, int]]:
        now = view.now
        n = max(1, len(view.running) + len(view.pending))
        share = view.cluster.total_gpus / n

        def rho(job: JobInfo) -> tuple[float, float, int]:
            gpus = job.spec.num_gpus
            isolated_s = job.ideal_iteration_s / min(1.0, share / gpus)
            remaining = job.remaining_iterations(now)
            current_s = job.iteration_s if job.allocation is not None else job.ideal_iteration_s
            shared = (now - job.spec.submit_time) + remaining * current_s
            isolated = job.iterations_done(now) * isolated_s + remaining * isolated_s
            return (-shared / max(isolated, 1e-9), job.spec.submit_time, job.arrival_seq)

        return rho


ORDERINGS: dict[str, Callable[[], Ordering]] = {"fifo": Fifo, "srtf": Srtf, "las": Las, "ftf": FinishTimeFairness}


def starvation_guard(policy: Any) -> Any:
    """``policy`` with :data:`STARVATION_GUARD_S` on its SRTF or LAS ordering (the ``+starvation-guard``
    suffix); it then needs round passes, since a waiting job crosses the threshold between events."""
    ordering = getattr(policy, "ordering", None)
    if not isinstance(ordering, Srtf | Las):
        raise ValidationError(f"+starvation-guard needs an srtf or las ordering; {policy.name!r} has "
                              f"{getattr(ordering, 'name', None)!r}", field="policy")
    ordering.guard = StarvationGuard(STARVATION_GUARD_S)
    ordering.needs_rounds = True
    policy.name = f"{policy.name}+starvation-guard"
    return policy
