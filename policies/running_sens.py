"""Dally's Nw_sens (§4.3.1) of every running job at once, for the victims of a pass.

On a loaded trace Dally's pass needs the Nw_sens of every running job whenever a waiting job
does not fit (2.9M evaluations on 10,000 Philly jobs compressed 8x, most of Dally's
time). A running job's progress is a closed form of five numbers
(:meth:`~halyard.policies.view.JobInfo.progress_line`) that change only when its ``epoch`` does
or it starts on a new allocation, so they are kept per job in arrays, read again only then, and
one vector expression gives every job's Nw_sens. Given the view, the running jobs themselves are
followed through the core's event log (:class:`~halyard.policies.event_order.EventFollower`: every
start, stop and move is an event), so a pass reads of each job only its ``epoch``, in one C-level
map, instead of checking it in a Python loop (that loop was a sixth of Dally's time on
20,000 Philly jobs compressed 8x). It is the very expression of
:func:`halyard.policies.dally_stages.nw_sens` over ``iterations_done`` and ``run_time_s``, operation for
operation, so the floats are the same to the last bit (``tests/test_running_sens.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping

import numpy as np

from halyard.datamodel import Allocation, JobState
from halyard.policies.event_order import EpochWatch, RunningFollower
from halyard.policies.view import ClusterView, JobInfo

FIRST_ROWS = 256  # rows of the arrays at first; they double when full
PRUNE_SLACK = 256  # rows of finished jobs kept beyond twice the running ones before a sweep

# What a job's row was read from: (job, epoch, allocation, row).
_Entry = tuple[JobInfo, Hashable, Allocation | None, int]


class RunningNwSens(RunningFollower):
    """Per-job progress numbers kept between passes, and Nw_sens of the running jobs from them."""

    # The followed jobs (set in _start), in three parallel sequences: their rows (the first ``_n`` of
    # ``_order``), the jobs, and each one's epoch when its row was last read; ``_index``: job id -> its
    # position in them. A job leaves by the last one taking its place, so a start or an end costs O(1),
    # not a rebuild of the sequences (that was 4% of Dally's time on 20,000 Philly jobs compressed 8x);
    # the order of the jobs is no order the pass reads (worst_first sorts by keys unique per job).
    _index: dict[str, int]
    _order: np.ndarray
    _n: int
    _followed: list[JobInfo]
    _epochs: list[Hashable]
    _version: int  # bumped whenever a followed job's row or place changes (the gathered numbers are stale)

    def __init__(self) -> None:
        self.watch = EpochWatch()  # which followed jobs' epochs moved since the last at() (the core's journal)
        self._reset(None)
        super().__init__()

    def _reset(self, basis: object) -> None:
        """No rows: every job's numbers are read again, with compute_s answered from ``basis``."""
        # done, since, rate, run_s, run_from, iterations_total, compute_s, submit time, arrival seq: a row per job
        self._columns = np.zeros((9, FIRST_ROWS))
        self._last_rows = np.zeros(0, dtype=np.int64)  # the rows of the last at()'s jobs, in order
        self._spare = list(range(FIRST_ROWS - 1, -1, -1))
        self._job_at: list[JobInfo | None] = [None] * FIRST_ROWS  # the job whose numbers a row holds
        # job id -> (job, epoch, allocation, row): the row holds the job's numbers while all three are the same
        self._known: dict[str, _Entry] = {}
        self._basis = basis  # what compute_s answers from; a different one forgets every row
        # The last at()'s rows gathered from the columns (every number of its jobs, in its order), kept while
        # the same rows array is asked for and no row is read again: most passes between two events of a
        # loaded trace see the same running jobs with the same numbers. With their submit times and arrival
        # numbers negated, for worst_first, once asked.
        self._block_key: int | None = None
        self._block = np.zeros((9, 0))
        self._negated: tuple[np.ndarray, np.ndarray] | None = None
        none = np.zeros(0, dtype=bool)  # (the block's parts that do not depend on now: set with it)
        self._fixed: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] = (none, none, none, np.zeros(0))
        self.run = np.zeros(0)  # the last at()'s run seconds of its jobs, in its order
        self._start(None)

    def at(self, running: Mapping[str, JobInfo], now: float, compute_s: Callable[[JobInfo], float],
           basis: object = None, view: ClusterView | None = None) -> tuple[list[JobInfo], np.ndarray]:
        """The running jobs that hold an allocation and their Nw_sens at ``now`` (``compute_s``: a job's
        ideal compute seconds per iteration, asked once per job while ``basis``, the facts it answers
        from, is the same object). In ``running``'s order; given a ``view`` whose ``running`` it is
        and which offers the event log, in the order the table keeps them (a job that leaves has its
        place taken by the last one: no order a caller may rely on)."""
        if basis is not self._basis:
            self._reset(basis)
        self._compute_s = compute_s
        if view is not None and view.events is not None and view.jobs is not None:
            self._follow(view)
            rows, jobs = self._rows(view)
        else:
            rows = self._check(running)
            jobs = [self._job_at[row] for row in rows.tolist()]
        self._last_rows = rows
        key = self._version if view is not None else None
        if key is None or self._block_key != key:  # (the same rows, none read since: the numbers gathered last time)
            self._block_key, self._block = key, self._columns[:, rows]
            self._negated = None
            done, _, rate, _, run_from, total, compute = self._block[:7]
            # what does not depend on ``now``, worked out once per block (the same operations on the same numbers)
            self._fixed = (rate == 0.0, np.isnan(run_from), total <= 0.0, compute * total)
        done, since, rate, run_s, run_from, total, _ = self._block[:7]
        no_rate, stopped, no_total, ideal = self._fixed
        # JobRecord.iterations_done: done if rate == 0 or now - since <= 0, else min(total, done + rate x elapsed)
        elapsed = now - since
        still = no_rate | (elapsed <= 0.0)
        done_now = np.where(still, done, np.minimum(total, done + rate * elapsed))
        # JobRecord.run_time_s: run_s (not running: run_from is NaN), else run_s + (now - run_from)
        run = np.where(stopped, run_s, run_s + (now - run_from))
        self.run = run  # each job's run_time_s(now), as JobRecord.run_time_s works it out
        # nw_sens: 1.0 if run <= 0 or total <= 0, else (done / total) / (run / (compute_s x total))
        with np.errstate(divide="ignore", invalid="ignore"):
            sens = np.where((run <= 0.0) | no_total, 1.0, (done_now / total) / (run / ideal))
        return jobs, sens

    def _check(self, running: Mapping[str, JobInfo]) -> np.ndarray:
        """Every running job's row, each checked (and read again if stale) in a loop."""
        rows: list[int] = []
        known = self._known
        for job_id, job in running.items():  # as little as can be per job
            entry = known.get(job_id)
            if entry is None or _stale(entry, job):
                if job.allocation is None:
                    continue
                entry = self._read(job, entry)
            rows.append(entry[3])
        return np.array(rows, dtype=np.int64)

    def _rows(self, view: ClusterView) -> tuple[np.ndarray, list[JobInfo]]:
        """The followed jobs' rows and the jobs: only a job's ``epoch`` can have changed since its last
        event (a rate change or a progress report), so only jobs whose epoch differs from their row's
        are read again: those the core's journal of epoch moves names (:class:`EpochWatch`), or, without
        it, any of all the followed jobs."""
        jobs = self._followed
        for i in self.watch.stale(view, jobs, self._epochs, self._index):
            self._read(jobs[i], self._known[jobs[i].job_id])
        return self._order[:self._n], jobs  # (read only, and valid until the next at(): edited in place)

    # --- EventFollower: the running jobs that hold an allocation, each with its row ---------------
    def _start(self, events: object) -> None:
        super()._start(events)
        self._index = {}
        self._order = np.zeros(FIRST_ROWS, dtype=np.int64)
        self._n = 0
        self._followed = []
        self._epochs = []
        self._version = getattr(self, "_version", 0) + 1

    def _holds(self, job: JobInfo) -> bool:
        return job.state is JobState.RUNNING and job.allocation is not None

    def _held(self) -> int:
        return self._n

    def _learn(self, job: JobInfo, view: ClusterView) -> None:
        entry = self._known.get(job.job_id)
        if entry is None or _stale(entry, job):
            entry = self._read(job, entry)
        n = self._n
        if n == len(self._order):
            self._order = np.concatenate([self._order, np.zeros_like(self._order)])
        self._order[n] = entry[3]
        self._followed.append(job)
        self._epochs.append(entry[1])
        self._index[job.job_id] = n
        self._n = n + 1
        self._version += 1

    def _forget(self, job_id: str) -> None:
        i = self._index.pop(job_id, None)
        if i is None:
            return
        last = self._n - 1
        if i != last:  # the last job takes its place
            moved = self._followed[last]
            self._order[i], self._followed[i], self._epochs[i] = self._order[last], moved, self._epochs[last]
            self._index[moved.job_id] = i
        self._followed.pop()
        self._epochs.pop()
        self._n = last
        self._version += 1

    def followed(self) -> list[JobInfo]:
        """The followed jobs, in the order :meth:`at` gives them given a view (read only)."""
        return self._followed

    def position(self, job_id: str) -> int:
        """Where a followed job is in :meth:`followed` (and in the last :meth:`at`'s answer, given a view)."""
        return self._index[job_id]

    def worst_first(self, sens: np.ndarray, chosen: np.ndarray) -> list[int]:
        """The positions where ``chosen`` holds, into the last :meth:`at`'s jobs and ``sens`` (its
        answer), in the order Dally lists victims: highest Nw_sens, then latest submission, then
        latest arrival first (``sens`` without NaN: NaN does not order as in Python's sort)."""
        positions = np.flatnonzero(chosen)
        if self._negated is None:
            self._negated = (-self._block[7], -self._block[8])
        late, later = self._negated
        order = np.lexsort((later[positions], late[positions], -sens[positions]))
        return positions[order].tolist()

    def _read(self, job: JobInfo, entry: _Entry | None,
              ) -> _Entry:
        """Read ``job``'s numbers into its row (``entry``'s, else a new one)."""
        row = entry[3] if entry is not None else self._row()
        epoch = job.epoch
        self._columns[:, row] = (*job.progress_line(), job.iterations_total, self._compute_s(job),
                                 job.spec.submit_time, job.arrival_seq)
        self._job_at[row] = job
        self._version = getattr(self, "_version", 0) + 1
        entry = self._known[job.job_id] = (job, epoch, job.allocation, row)
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


def _stale(entry: _Entry, job: JobInfo) -> bool:
    """Whether ``job``'s row (``entry``) must be read again: the job, its epoch or its allocation is not
    the one it was read from."""
    return entry[2] is not job.allocation or entry[1] != job.epoch or entry[0] is not job
