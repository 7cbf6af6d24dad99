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
jobs compressed 8x; :class:`~halyard.policies.dally_pass.DallyPass`). It also keeps, in the same
order, the reason the core holds for each job that a tail answered (as a number: equal reasons,
equal numbers), so that a pass tells the core only the reasons that changed (Plan.changes_from).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Hashable, Mapping

import numpy as np

from halyard.policies.event_order import EventOrder, OrderedColumns, WaitingFollower
from halyard.policies.reasons import Unplaced
from halyard.policies.view import ClusterView, JobInfo

NOT_TOLD = -1  # a job's reason code when no tail answered it in the last applied pass
# How many distinct tail reasons are numbered before the numbering starts again (a tail reason quotes a
# demand and a free GPU count, so a run has at most a few thousand; this only bounds a pathological one).
MAX_REASON_CODES = 1 << 16
MAX_TAIL_KEYS = 256  # tail reason tables kept (one per free GPU count a tail's reasons quote)


class WaitingOrder(WaitingFollower, EventOrder):
    """The waiting jobs sorted by (Nw_sens, submit time, arrival number), and each one's Nw_sens."""

    def __init__(self) -> None:
        self._sensitivity: Callable[[JobInfo], float] | None = None  # the pass's, given to ranked()
        super().__init__()

    def _start(self, events: object) -> None:
        super()._start(events)
        self.sens: dict[str, float] = {}  # job id -> Nw_sens, for the jobs in the order
        self.ids: list[str] = []  # the jobs' ids, in the order
        self.demands: list[int] = []  # their GPU demands, in the order
        # Row 0: the same demands as one array (the tail's fit test); row 1: the code of the reason the core
        # holds for the job, if a tail answered it (told_codes), else NOT_TOLD.
        self._wanted = OrderedColumns(2, np.int64)
        self._nans = 0  # how many Nw_sens are NaN (NaN does not order: then the sort is not by value)
        self._codes: dict[Unplaced, int] = {}  # a tail reason -> its code
        self._told_into: Mapping[str, Unplaced] | None = None  # the core's reasons the codes are of
        # A tail's numbered reasons, kept from pass to pass: what else they depend on -> (demand -> code, demand
        # -> reason). Working them out and numbering them anew on every pass was a tenth of Dally's time.
        self._tails: dict[Hashable, tuple[np.ndarray, dict[int, Unplaced]]] = {}

    def ranked(self, view: ClusterView, sensitivity: Callable[[JobInfo], float]) -> list[JobInfo]:
        """The view's waiting jobs in offer order (``sensitivity``: a waiting job's Nw_sens; :attr:`sens`
        holds them after the call). Needs ``view.events`` and ``view.jobs``. The kept list itself, not a copy
        (copying the thousand jobs of a loaded queue at every pass was 3% of Dally's time on 20,000 Philly jobs
        compressed 8x): read only, and valid until the next call, which edits it."""
        self._sensitivity = sensitivity
        self._follow(view)
        return self._jobs

    def merged(self, others: list[tuple[tuple[float, float, int], JobInfo]]) -> list[JobInfo] | None:
        """The kept order (as :meth:`ranked` last left it) with ``others``, jobs it does not hold keyed alike
        (Nw_sens, submit time, arrival number), each in its place: what sorting them all by the key gives, the
        keys being unique (arrival numbers are). None when a NaN Nw_sens, here or in ``others``, makes the order
        no sort by value (the caller sorts)."""
        if self._nans or any(key[0] != key[0] for key, _ in others):
            return None
        keys, order = list(self._keys), list(self._jobs)
        for key, job in sorted(others, key=lambda other: other[0]):
            i = bisect.bisect_right(keys, key)
            keys.insert(i, key)
            order.insert(i, job)
        return order

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
        self._wanted.insert(i, len(self.ids), (job.spec.num_gpus, NOT_TOLD))

    def wanted(self) -> np.ndarray:
        """:attr:`demands` as an array (a view, valid until the order next changes): kept in step with the
        order, so a pass does not convert the thousand demands of a loaded queue again (that was 4% of
        Dally's time on 20,000 Philly jobs compressed 8x)."""
        return self._wanted.data[0, :len(self.ids)]

    # --- the reasons told (Plan.changes_from) ------------------------------------------------
    def code(self, why: Unplaced) -> int:
        """``why``'s code: the same for equal reasons."""
        code = self._codes.get(why)
        if code is None:
            code = self._codes[why] = len(self._codes)
        return code

    def tail_reasons(self, key: Hashable, size: int) -> tuple[np.ndarray, dict[int, Unplaced]]:
        """The tail reasons numbered for ``key`` (what they depend on besides the demand): an array of
        at least ``size`` codes by demand (NOT_TOLD where none yet) and the reasons by demand, both for the
        caller to fill."""
        kept = self._tails.get(key)
        if kept is None or len(kept[0]) < size:
            if len(self._tails) >= MAX_TAIL_KEYS:
                self._tails.clear()
            kept = self._tails[key] = (np.full(max(size, 2 * len(kept[0]) if kept else size), NOT_TOLD,
                                               dtype=np.int64), {})
        return kept

    def told_codes(self, reasons: Mapping[str, Unplaced] | None) -> np.ndarray | None:
        """Each waiting job's reason code as the core holds it, in the order (NOT_TOLD where unknown), when
        ``reasons`` (a view's) is the core's mapping the last :meth:`commit_told` was made into; else None
        (another pass replaced the core's reasons since). A view, valid until the order next changes."""
        if reasons is None or reasons is not self._told_into:
            return None
        return self._wanted.data[1, :len(self.ids)]

    def commit_told(self, codes: np.ndarray, reasons: Mapping[str, Unplaced]) -> None:
        """The core applied a pass that told ``reasons`` (the view's) the reasons of ``codes`` (one per job
        of the order as that pass saw it)."""
        if len(self._codes) > MAX_REASON_CODES:  # numbered afresh from the next pass, which tells all
            self._codes.clear()
            self._tails.clear()
            self.forget_told()
            return
        self._wanted.data[1, :len(codes)] = codes
        self._told_into = reasons

    def forget_told(self) -> None:
        """The core's reasons are not what the codes say (a pass that said them whole, or refused)."""
        self._told_into = None
