"""Dally's waiting jobs in offer order, with their Nw_sens, kept from pass to pass.

Dally offers resources in increasing Nw_sens (§4.3.1), then submission time, then arrival. On a
loaded trace about a thousand jobs wait at every pass (issue 19: 20,000 Philly jobs compressed 8x),
and computing every waiting job's Nw_sens and sorting them was a quarter of Dally's time. A
waiting job's Nw_sens does not move: its completed iterations and its run time stop while it waits
(:meth:`~halyard.policies.view.JobInfo.progress_line`), so its key changes only when the core logs
an event for it (it arrived, started, was preempted or ended). Each pass re-keys the jobs of the
events logged since the last one; the order is two parallel lists kept sorted by key. It equals
sorting the waiting jobs by the key on every pass (``tests/test_waiting_sens.py``); should the
count of jobs ever disagree with the view's, it is rebuilt from the view.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

from halyard.datamodel import JobState
from halyard.policies.view import ClusterView, JobInfo


class WaitingOrder:
    """The waiting jobs sorted by (Nw_sens, submit time, arrival number), and each one's Nw_sens."""

    def __init__(self) -> None:
        self._start(None)

    def _start(self, events: object) -> None:
        """Forget everything and follow ``events`` from its first event."""
        self._events = events  # the log followed; another one (a new core) starts over
        self._seen = 0
        self._keys: list[tuple[float, float, int]] = []  # sorted
        self._jobs: list[JobInfo] = []  # in the order of _keys
        self._key_of: dict[str, tuple[float, float, int]] = {}
        self.sens: dict[str, float] = {}  # job id -> Nw_sens, for the jobs in the order

    def ranked(self, view: ClusterView, sensitivity: Callable[[JobInfo], float]) -> list[JobInfo]:
        """The view's waiting jobs in offer order (``sensitivity``: a waiting job's Nw_sens; :attr:`sens`
        holds them after the call). Needs ``view.events`` and ``view.jobs``."""
        events, jobs = view.events, view.jobs
        assert events is not None and jobs is not None
        if events is not self._events or len(events) < self._seen:
            self._start(events)
        touched = {event.job_id for event in events.since(self._seen)}
        self._seen = len(events)
        pending = JobState.PENDING
        for job_id in touched:
            self._forget(job_id)
            job = jobs.get(job_id)
            if job is not None and job.state is pending:
                self._learn(job, sensitivity)
        if len(self._jobs) != len(view.pending):  # a change seen by no event
            self._start(events)
            self._seen = len(events)
            for job in view.pending:
                self._learn(job, sensitivity)
        return list(self._jobs)

    def _forget(self, job_id: str) -> None:
        key = self._key_of.pop(job_id, None)
        if key is not None:
            i = bisect.bisect_left(self._keys, key)
            del self._keys[i], self._jobs[i]
            del self.sens[job_id]

    def _learn(self, job: JobInfo, sensitivity: Callable[[JobInfo], float]) -> None:
        sens = self.sens[job.job_id] = sensitivity(job)
        key = (sens, job.spec.submit_time, job.arrival_seq)
        i = bisect.bisect_right(self._keys, key)
        self._keys.insert(i, key)
        self._jobs.insert(i, job)
        self._key_of[job.job_id] = key
