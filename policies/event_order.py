"""What a policy keeps about jobs from pass to pass, read again only when the core logs an event for them.

On a loaded queue four keepers hold per-job numbers between passes, for speed: Tiresias' 2D-LAS,
running and waiting jobs by queue, submission and arrival (:class:`~halyard.policies.tiresias.KeptOrder`);
Dally's waiting jobs by Nw_sens, submission and arrival
(:class:`~halyard.policies.waiting_sens.WaitingOrder`); LAS' running jobs' service lines
(:class:`~halyard.policies.ordering.RunningService`); and Dally's running jobs' progress rows for their
Nw_sens (:class:`~halyard.policies.running_sens.RunningNwSens`, which also checks epochs: a rate change
logs no event). What each keeps changes only when the core logs
an event for the job (it arrived, started, stopped, moved or ended) or at a time the keeper knows in
advance (:meth:`EventFollower._due`). :class:`EventFollower` is the upkeep: each pass re-reads the jobs
of the events logged since the last one, and should the count of jobs ever disagree with the view's,
everything is read afresh from the view. :class:`EventOrder` keeps them in two parallel lists sorted by key,
and :class:`OrderedColumns` numbers per job in that order (LAS' service lines, 2D-LAS' held GPUs).
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

import numpy as np

from halyard.datamodel import JobState
from halyard.policies.view import ClusterView, JobInfo

FIRST_COLUMNS = 64  # jobs an OrderedColumns holds at first; it doubles when full


class EventFollower:
    """The upkeep; a subclass says which jobs it holds, and how it learns and forgets one."""

    def __init__(self) -> None:
        self._start(None)

    def _start(self, events: object) -> None:
        """Forget everything and follow ``events`` from its first event."""
        self._events = events  # the log followed; another one (a new core) starts over
        self._seen = 0

    def _follow(self, view: ClusterView) -> None:
        """Bring what is kept up to the view: read again the jobs of the events logged since the last call
        and those :meth:`_due` names; read everything afresh if the count disagrees with the view's."""
        events, jobs = view.events, view.jobs
        assert events is not None and jobs is not None
        if events is not self._events or len(events) < self._seen:
            self._start(events)
        touched = {event.job_id for event in events.since(self._seen)}
        self._seen = len(events)
        touched.update(self._due(view))
        for job_id in touched:
            self._forget(job_id)
            job = jobs.get(job_id)
            if job is not None and self._holds(job):
                self._learn(job, view)
        if self._held() != self._count(view):  # a change seen by no event
            self._start(events)
            self._seen = len(events)
            for job in self._members(view):
                self._learn(job, view)

    # --- what a subclass says ---------------------------------------------------
    def _holds(self, job: JobInfo) -> bool:
        """Whether ``job`` (in its current state) is one to keep."""
        raise NotImplementedError

    def _count(self, view: ClusterView) -> int:
        """How many jobs should be kept at ``view``."""
        raise NotImplementedError

    def _members(self, view: ClusterView) -> Iterable[JobInfo]:
        """Every job that should be kept at ``view``."""
        raise NotImplementedError

    def _held(self) -> int:
        """How many jobs it holds."""
        raise NotImplementedError

    def _learn(self, job: JobInfo, view: ClusterView) -> None:
        """Read ``job`` (one :meth:`_holds` says it holds and :meth:`_forget` has dropped)."""
        raise NotImplementedError

    def _forget(self, job_id: str) -> int | None:
        """Drop whatever is kept of ``job_id`` (nothing, if nothing is); a follower that keeps an order
        answers where the job was in it (None otherwise)."""
        raise NotImplementedError

    def _due(self, view: ClusterView) -> Iterable[str]:
        """Jobs to read again at ``view`` though no event was logged for them (none by default)."""
        return ()


class EpochWatch:
    """Which jobs' epochs may have moved since the last call, from the core's journal of epoch moves
    (:attr:`ClusterView.epochs`): a follower that keeps per-job numbers checked by epoch (a rate change or a
    progress report moves it without an event) compares only those jobs' epochs, not every job's. Exact: every
    change of a record's epoch is noted in its core's journal (``JobRecord._moved``), so a job whose epoch differs
    from what the follower saw at its last call is among them. ``use`` False (or a view without the journal, a
    journal it does not know, one that dropped entries since) answers None: compare every job's epoch."""

    __slots__ = ("_journal", "_seen", "use")

    def __init__(self) -> None:
        self._journal: object = None
        self._seen = 0
        self.use = True  # False: every call answers None (the tests compare both paths)

    def moved(self, view: ClusterView) -> Iterable[str] | None:
        """The ids of the jobs whose epoch moved since the last call (each once), or None: it is not known, compare
        every job's. The caller brings every job it keeps up to its epoch now, in the same call."""
        journal = view.epochs
        if journal is None:
            self._journal = None
            return None
        seen, self._seen = self._seen, len(journal)
        if journal is not self._journal or not self.use:
            self._journal = journal
            return None
        moved = journal.since(seen)
        return None if moved is None else set(moved)

    def stale(self, view: ClusterView, jobs: list[JobInfo], epochs: list[Hashable], index: Mapping[str, int]
              ) -> list[int]:
        """The positions ``i`` of ``jobs`` whose epoch differs from ``epochs[i]`` (what the follower last read;
        ``index``: job id -> position), with ``epochs`` brought up to date: the jobs :meth:`moved` names, or, when it
        does not know, every job compared."""
        moved = self.moved(view)
        if moved is not None:
            stale = []
            for job_id in moved:
                i = index.get(job_id)
                if i is not None and jobs[i].epoch != epochs[i]:
                    epochs[i] = jobs[i].epoch
                    stale.append(i)
            return stale
        now = [job.epoch for job in jobs]  # (a list display and one comparison: the cheap check)
        if now == epochs:
            return []
        stale = list(itertools.compress(range(len(jobs)), map(operator.ne, now, epochs)))
        epochs[:] = now
        return stale


class RunningFollower(EventFollower):
    """An :class:`EventFollower` of the view's running jobs."""

    def _count(self, view: ClusterView) -> int:
        return len(view.running)

    def _members(self, view: ClusterView) -> Iterable[JobInfo]:
        return view.running.values()


class WaitingFollower(EventFollower):
    """An :class:`EventFollower` of the view's waiting (pending) jobs."""

    def _holds(self, job: JobInfo) -> bool:
        return job.state is JobState.PENDING

    def _count(self, view: ClusterView) -> int:
        return len(view.pending)

    def _members(self, view: ClusterView) -> Iterable[JobInfo]:
        return view.pending


class EventOrder(EventFollower):
    """Jobs in two parallel lists sorted by key (a subclass's :meth:`_learn` keys a job and inserts it)."""

    def _start(self, events: object) -> None:
        super()._start(events)
        self._keys: list[Any] = []  # sorted
        self._jobs: list[JobInfo] = []  # in the order of _keys
        self._key_of: dict[str, Any] = {}

    def _held(self) -> int:
        return len(self._jobs)

    def _forget(self, job_id: str) -> int | None:
        """Drop ``job_id``; where it was in the order (None if it was not kept)."""
        key = self._key_of.pop(job_id, None)
        if key is None:
            return None
        i = bisect.bisect_left(self._keys, key)
        del self._keys[i], self._jobs[i]
        return i

    def _insert(self, job: JobInfo, key: Any) -> int:
        """Put ``job`` in the order under ``key``; where it went."""
        i = bisect.bisect_right(self._keys, key)
        self._keys.insert(i, key)
        self._jobs.insert(i, job)
        self._key_of[job.job_id] = key
        return i


class OrderedColumns:
    """Numbers kept per job in an :class:`EventOrder`'s order, as columns of one array: column k is the
    k-th job's, the first ``n`` are in use, and a job's column moves with it on insert and delete (a numpy
    shift, a few microseconds), so a pass reads every job's numbers at once, in order, as rows."""

    def __init__(self, rows: int, dtype: Any = np.float64) -> None:
        self.data = np.zeros((rows, FIRST_COLUMNS), dtype)

    def insert(self, i: int, n: int, values: Any) -> None:
        """Put ``values`` (one per row) at column ``i``; ``n``: the jobs held counting this one."""
        if n > self.data.shape[1]:
            self.data = np.concatenate((self.data, np.zeros_like(self.data)), axis=1)
        data = self.data
        data[:, i + 1:n] = data[:, i:n - 1]
        data[:, i] = values

    def delete(self, i: int, n: int) -> None:
        """Take column ``i`` out; ``n``: the jobs held without it."""
        data = self.data
        data[:, i:n] = data[:, i + 1:n + 1]
