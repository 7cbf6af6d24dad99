"""Dally's waiting jobs in offer order, with their Nw_sens, kept from pass to pass.

Dally offers resources in increasing Nw_sens (§4.3.1), then submission time, then arrival. On a
loaded trace about a thousand jobs wait at every pass (20,000 Philly jobs compressed 8x),
and computing every waiting job's Nw_sens and sorting them was a quarter of Dally's time. A
waiting job's Nw_sens does not move: its completed iterations and its run time stop while it waits
(:meth:`~halyard.policies.view.JobInfo.progress_line`), so its key changes only when the core logs
an event for it (it arrived, started, was preempted or ended). Each pass re-keys the jobs of the
events logged since the last one (:class:`~halyard.policies.event_order.EventOrder`). It equals
sorting the waiting jobs by the key on every pass (``tests/test_waiting_sens.py``).

Beside the order it keeps each job's id and GPU demand in the same order, and whether any Nw_sens
is NaN, so that a pass reads the lowest Nw_sens and answers the long tail of jobs that only wait
without a Python step per job (that tail walk was a tenth of Dally's time on 20,000 Philly
jobs compressed 8x; :class:`~halyard.policies.dally_pass.DallyPass`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np

from halyard.datamodel import JobState
from halyard.policies.event_order import EventOrder, OrderedColumns
from halyard.policies.view import ClusterView, JobInfo


class WaitingOrder(EventOrder):
    """The waiting jobs sorted by (Nw_sens, submit time, arrival number), and each one's Nw_sens."""

    def __init__(self) -> None:
        self._sensitivity: Callable[[JobInfo], float] | None = None  # the pass's, given to ranked()
        super().__init__()

    def _start(self, events: object) -> None:
        super()._start(events)
        self.sens: dict[str, float] = {}  # job id -> Nw_sens, for the jobs in the order
        self.ids: list[str] = []  # the jobs' ids, in the order
        self.demands: list[int] = []  # their GPU demands, in the order
        self._wanted = OrderedColumns(1, np.int64)  # the same demands as one array (the tail's fit test)
        self._nans = 0  # how many Nw_sens are NaN (NaN does not order: then the sort is not by value)

    def ranked(self, view: ClusterView, sensitivity: Callable[[JobInfo], float]) -> list[JobInfo]:
        """The view's waiting jobs in offer order (``sensitivity``: a waiting job's Nw_sens; :attr:`sens`
        holds them after the call). Needs ``view.events`` and ``view.jobs``. The kept list itself, not a copy
        (copying the thousand jobs of a loaded queue at every pass was 3% of Dally's time on 20,000 Philly jobs
        compressed 8x): read only, and valid until the next call, which edits it."""
        self._sensitivity = sensitivity
        self._follow(view)
        return self._jobs

    def _holds(self, job: JobInfo) -> bool:
        return job.state is JobState.PENDING

    def _count(self, view: ClusterView) -> int:
        return len(view.pending)

    def _members(self, view: ClusterView) -> Iterable[JobInfo]:
        return view.pending

    def lowest(self) -> float:
        """The lowest Nw_sens of the waiting jobs, as ``min(self.sens.values(), default=-inf)`` gives it
        (the first key's, unless a NaN makes the order no sort by value; ±0.0 may differ in sign only)."""
        if self._nans:
            return min(self.sens.values(), default=-math.inf)
        return self._keys[0][0] if self._keys else -math.inf

    def _forget(self, job_id: str) -> int | None:
        sens = self.sens.pop(job_id, None)
        if sens is not None and sens != sens:
            self._nans -= 1
        i = super()._forget(job_id)
        if i is not None:
            del self.ids[i], self.demands[i]
            self._wanted.delete(i, len(self.ids))
        return i

    def _learn(self, job: JobInfo, view: ClusterView) -> None:
        assert self._sensitivity is not None
        sens = self.sens[job.job_id] = self._sensitivity(job)
        if sens != sens:
            self._nans += 1
        i = self._insert(job, (sens, job.spec.submit_time, job.arrival_seq))
        self.ids.insert(i, job.job_id)
        self.demands.insert(i, job.spec.num_gpus)
        self._wanted.insert(i, len(self.ids), job.spec.num_gpus)

    def wanted(self) -> np.ndarray:
        """:attr:`demands` as an array (a view, valid until the order next changes): kept in step with the
        order, so a pass does not convert the thousand demands of a loaded queue again (that was 4% of
        Dally's time on 20,000 Philly jobs compressed 8x)."""
        return self._wanted.data[0, :len(self.ids)]
