"""Dally's Nw_sens (§4.3.1) of every running job at once, for the victims of a pass.

On a loaded trace Dally's pass needs the Nw_sens of every running job whenever a waiting job
does not fit (issue 19: 2.9M evaluations on 10,000 Philly jobs compressed 8x, most of Dally's
time). A running job's progress is a closed form of five numbers
(:meth:`~halyard.policies.view.JobInfo.progress_line`) that change only when its ``epoch`` does
or it starts on a new allocation, so they are kept per job in arrays, read again only then, and
one vector expression gives every job's Nw_sens. It is the very expression of
:func:`halyard.policies.dally.nw_sens` over ``iterations_done`` and ``run_time_s``, operation for
operation, so the floats are the same to the last bit (``tests/test_running_sens.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping

import numpy as np

from halyard.datamodel import Allocation
from halyard.policies.view import JobInfo

FIRST_ROWS = 256  # rows of the arrays at first; they double when full
PRUNE_SLACK = 256  # rows of finished jobs kept beyond twice the running ones before a sweep


class RunningNwSens:
    """Per-job progress numbers kept between passes, and Nw_sens of the running jobs from them."""

    __slots__ = ("_basis", "_columns", "_job_at", "_known", "_last_rows", "_spare")

    def __init__(self) -> None:
        self._forget(None)

    def _forget(self, basis: object) -> None:
        """No rows: every job's numbers are read again, with compute_s answered from ``basis``."""
        # done, since, rate, run_s, run_from, iterations_total, compute_s, submit time, arrival seq: a row per job
        self._columns = np.zeros((9, FIRST_ROWS))
        self._last_rows = np.zeros(0, dtype=np.int64)  # the rows of the last at()'s jobs, in order
        self._spare = list(range(FIRST_ROWS - 1, -1, -1))
        self._job_at: list[JobInfo | None] = [None] * FIRST_ROWS  # the job whose numbers a row holds
        # job id -> (job, epoch, allocation, row): the row holds the job's numbers while all three are the same
        self._known: dict[str, tuple[JobInfo, Hashable, Allocation, int]] = {}
        self._basis = basis  # what compute_s answers from; a different one forgets every row

    def at(self, running: Mapping[str, JobInfo], now: float, compute_s: Callable[[JobInfo], float],
           basis: object = None) -> tuple[list[JobInfo], np.ndarray]:
        """The running jobs that hold an allocation, in ``running``'s order, and their Nw_sens at ``now``
        (``compute_s``: a job's ideal compute seconds per iteration, asked once per job while ``basis``,
        the facts it answers from, is the same object)."""
        if basis is not self._basis:
            self._forget(basis)
        rows: list[int] = []
        known = self._known
        for job_id, job in running.items():  # the loop of every pass: as little as can be per job
            entry = known.get(job_id)
            if entry is None or entry[2] is not job.allocation or entry[1] != job.epoch or entry[0] is not job:
                if job.allocation is None:
                    continue
                entry = self._learn(job, job.allocation, compute_s, entry)
            rows.append(entry[3])
        job_at = self._job_at
        jobs = [job_at[row] for row in rows]
        self._last_rows = np.array(rows, dtype=np.int64)
        done, since, rate, run_s, run_from, total, compute = self._columns[:7, self._last_rows]
        # JobRecord.iterations_done: done if rate == 0 or now - since <= 0, else min(total, done + rate x elapsed)
        elapsed = now - since
        still = (rate == 0.0) | (elapsed <= 0.0)
        done_now = np.where(still, done, np.minimum(total, done + rate * elapsed))
        # JobRecord.run_time_s: run_s (not running: run_from is NaN), else run_s + (now - run_from)
        run = np.where(np.isnan(run_from), run_s, run_s + (now - run_from))
        # nw_sens: 1.0 if run <= 0 or total <= 0, else (done / total) / (run / (compute_s x total))
        with np.errstate(divide="ignore", invalid="ignore"):
            sens = np.where((run <= 0.0) | (total <= 0.0), 1.0, (done_now / total) / (run / (compute * total)))
        return jobs, sens

    def worst_first(self, sens: np.ndarray, chosen: np.ndarray) -> list[int]:
        """The positions where ``chosen`` holds, into the last :meth:`at`'s jobs and ``sens`` (its
        answer), in the order Dally lists victims: highest Nw_sens, then latest submission, then
        latest arrival first (``sens`` without NaN: NaN does not order as in Python's sort)."""
        positions = np.flatnonzero(chosen)
        rows = self._last_rows[positions]
        order = np.lexsort((-self._columns[8, rows], -self._columns[7, rows], -sens[positions]))
        return positions[order].tolist()

    def _learn(self, job: JobInfo, allocation: Allocation, compute_s: Callable[[JobInfo], float],
               entry: tuple[JobInfo, Hashable, Allocation, int] | None) -> tuple[JobInfo, Hashable, Allocation, int]:
        row = entry[3] if entry is not None else self._row()
        epoch = job.epoch
        self._columns[:, row] = (*job.progress_line(), job.iterations_total, compute_s(job), job.spec.submit_time,
                                 job.arrival_seq)
        self._job_at[row] = job
        entry = self._known[job.job_id] = (job, epoch, allocation, row)
        return entry

    def _row(self) -> int:
        if not self._spare:
            rows = self._columns.shape[1]
            self._columns = np.concatenate([self._columns, np.zeros_like(self._columns)], axis=1)
            self._job_at.extend([None] * rows)
            self._spare = list(range(2 * rows - 1, rows - 1, -1))
        return self._spare.pop()

    def prune(self, running: Mapping[str, JobInfo]) -> None:
        """Free the rows of jobs no longer running (their numbers are read again if they run again),
        once they are most of the rows (so that a pass pays for this rarely)."""
        if len(self._known) <= 2 * len(running) + PRUNE_SLACK:
            return
        gone = [job_id for job_id in self._known if job_id not in running]
        for job_id in gone:
            row = self._known.pop(job_id)[3]
            self._job_at[row] = None
            self._spare.append(row)
