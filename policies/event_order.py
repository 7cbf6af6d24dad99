"""Jobs kept sorted from pass to pass, re-keyed only when the core logs an event for them.

Two policies keep such an order on a loaded queue (issue 19): Tiresias' 2D-LAS, running and waiting
jobs by queue, submission and arrival (:class:`~halyard.policies.tiresias.KeptOrder`), and Dally's
waiting jobs by Nw_sens, submission and arrival (:class:`~halyard.policies.waiting_sens.WaitingOrder`).
Each key changes only when the core logs an event for its job (it arrived, started, stopped, moved or
ended) or at a time the subclass knows in advance (:meth:`EventOrder._due`). The order is two parallel
lists kept sorted by key; each pass re-keys the jobs of the events logged since the last one. Should
the count of jobs ever disagree with the view's, the order is rebuilt from the view.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import Any

from halyard.policies.view import ClusterView, JobInfo


class EventOrder:
    """The sorted order and its upkeep; a subclass says which jobs it holds and what their keys are."""

    def __init__(self) -> None:
        self._start(None)

    def _start(self, events: object) -> None:
        """Forget everything and follow ``events`` from its first event."""
        self._events = events  # the log followed; another one (a new core) starts over
        self._seen = 0
        self._keys: list[Any] = []  # sorted
        self._jobs: list[JobInfo] = []  # in the order of _keys
        self._key_of: dict[str, Any] = {}

    def _follow(self, view: ClusterView) -> None:
        """Bring the order up to the view: re-key the jobs of the events logged since the last call and
        those :meth:`_due` names; rebuild it if its count disagrees with the view's."""
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
        if len(self._jobs) != self._count(view):  # a change seen by no event
            self._start(events)
            self._seen = len(events)
            for job in self._members(view):
                self._learn(job, view)

    def _forget(self, job_id: str) -> None:
        key = self._key_of.pop(job_id, None)
        if key is not None:
            i = bisect.bisect_left(self._keys, key)
            del self._keys[i], self._jobs[i]

    def _insert(self, job: JobInfo, key: Any) -> None:
        i = bisect.bisect_right(self._keys, key)
        self._keys.insert(i, key)
        self._jobs.insert(i, job)
        self._key_of[job.job_id] = key

    # --- what a subclass says ---------------------------------------------------
    def _holds(self, job: JobInfo) -> bool:
        """Whether the order holds ``job`` (in its current state)."""
        raise NotImplementedError

    def _count(self, view: ClusterView) -> int:
        """How many jobs the order should hold at ``view``."""
        raise NotImplementedError

    def _members(self, view: ClusterView) -> Iterable[JobInfo]:
        """Every job the order should hold at ``view``."""
        raise NotImplementedError

    def _learn(self, job: JobInfo, view: ClusterView) -> None:
        """Key ``job`` and :meth:`_insert` it."""
        raise NotImplementedError

    def _due(self, view: ClusterView) -> Iterable[str]:
        """Jobs to re-key at ``view`` though no event was logged for them (none by default)."""
        return ()
