"""The core's record of one job: state, allocation and progress.

Progress is kept as (iterations done at ``anchor``, rate), so a running job's
progress at any time is a closed form and nothing has to tick between events.
A job that resumes from a checkpoint makes no progress until ``resume_at``
(the restart cost). These records are what policies read through
:class:`halyard.policies.JobInfo`; only the core changes them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from halyard.datamodel import Allocation, JobSpec, JobState, NodeAllocation, Parallelism, StagePlan
from halyard.policies.reasons import Unplaced
from halyard.scheduling.eventcounts import RECOUNTED

# An EpochJournal keeps at least this many of its latest entries; it drops the older half once it holds twice as many.
JOURNAL_KEEP = 1 << 16


class EpochJournal:
    """Every move of a job's ``epoch``, in order: the job's id, numbered from 0 (one journal per core, which hands it
    to its records: :attr:`JobRecord.journal`). A rate change (:meth:`JobRecord.set_rate`, a driver's re-rating) or
    a progress report moves a running job's epoch without an event, so a policy that keeps per-job numbers checked
    by epoch had to compare every running job's epoch at every pass (Dally's lease ends, twice a pass: 14 % of
    ``dally``'s CPU on loaded Philly, issue 38); it reads the entries since its last position instead
    (:class:`~halyard.policies.event_order.EpochWatch`). Bounded (a daemon's progress reports move epochs for
    months): once it holds twice ``keep`` (:data:`JOURNAL_KEEP`) entries the older half is dropped, and
    :meth:`since` a position before what is kept answers None (the reader then compares every epoch, as before)."""

    __slots__ = ("_first", "_ids", "_keep")

    def __init__(self, keep: int = JOURNAL_KEEP) -> None:
        self._keep = keep
        self._first = 0  # the number of the first entry kept
        self._ids: list[str] = []

    def note(self, job_id: str) -> None:
        """``job_id``'s epoch moved."""
        ids = self._ids
        ids.append(job_id)
        if len(ids) >= 2 * self._keep:
            del ids[:self._keep]
            self._first += self._keep

    def __len__(self) -> int:
        return self._first + len(self._ids)

    def since(self, position: int) -> list[str] | None:
        """The ids of the moves numbered ``position`` and after (a job once per move); None if some are dropped."""
        if position < self._first:
            return None
        return self._ids[position - self._first:]


class JobRecord:
    __slots__ = (
        "_anchor", "_done", "_exposed_s", "_gpu_s", "_rate", "_resume_at", "_run_s", "_run_start",
        "allocation", "arrival_seq", "attempt", "end_reason", "end_time", "epoch", "exposed_iteration_s", "first_start",
        "ideal_iteration_s",
        "iteration_s", "iterations_total", "job_id", "journal", "last_assignment_time", "num_gpus", "pending_since",
        "preemptions", "queued_s", "restarts", "spec", "state", "suspensions", "time_shift_drift_s", "wait",
    )

    def __init__(self, spec: JobSpec, arrival_seq: int, iterations_total: int,
                 ideal_iteration_s: float, now: float) -> None:
        self.spec = spec
        self.job_id = spec.job_id
        self.arrival_seq = arrival_seq
        self.state = JobState.PENDING
        self.allocation: Allocation | None = None
        self.num_gpus = spec.num_gpus  # GPUs held when running, else GPUs requested
        self.iterations_total = iterations_total
        self.ideal_iteration_s = ideal_iteration_s
        self.iteration_s = ideal_iteration_s
        self.pending_since = now
        self.queued_s = 0.0
        self.first_start: float | None = None
        self.last_assignment_time: float | None = None
        self.end_time: float | None = None
        # Why it ended, when its own completion or a user's cancel did not end it: a failure ("exit code 0
        # before its last iteration") or the policy's drop; its terminal event's detail. Not a stored
        # column: SchedulingCore.restore reads it from that event, which the store keeps.
        self.end_reason = ""
        self.preemptions = 0
        # Opportunistic suspensions (Crius §6.1), apart from preemptions. Not a stored column: the
        # core recounts them from the SUSPENDED events when it restores.
        self.suspensions = 0
        self.restarts = 0
        self.epoch = 0  # bumped whenever a scheduled completion becomes stale (:meth:`_moved`)
        # Where each move of ``epoch`` is noted: the owning core's journal (SchedulingCore sets it); None for a
        # record no core owns. Not persisted: the core that restores the record sets its own.
        self.journal: EpochJournal | None = None
        self.attempt = 0  # numbers each launch on agents; older attempts' messages are stale
        self._done = 0.0
        self._anchor = now
        self._resume_at = now
        self._rate = 0.0
        self._gpu_s = 0.0
        self._run_s = 0.0
        self._run_start: float | None = None
        # Exposed (not overlapped) communication: seconds per iteration at the current
        # rate, and seconds accrued over the iterations run before ``_anchor``.
        self.exposed_iteration_s = 0.0
        self._exposed_s = 0.0
        # Why it waits: the latest reason a pass gave, and that pass's number (not persisted:
        # the first pass after a restart gives it again). Read through SchedulingCore.wait_of.
        self.wait: Unplaced | None = None
        # The latest drift an agent measured from the job's time-shift grid (Progress.time_shift_drift_s,
        # Cassini §4.4.2 step 3), seconds, + late; None until one is reported in this run. Not persisted:
        # the next report after a restart gives it again.
        self.time_shift_drift_s: float | None = None

    # --- read side (the JobInfo protocol) ---------------------------------

    def iterations_done(self, now: float) -> float:
        if self._rate == 0.0:
            return self._done
        since = now - max(self._anchor, self._resume_at)
        if since <= 0.0:
            return self._done
        return min(float(self.iterations_total), self._done + self._rate * since)

    def remaining_iterations(self, now: float) -> float:
        return self.iterations_total - self.iterations_done(now)

    def progress_line(self) -> tuple[float, float, float, float, float]:
        """The numbers :meth:`iterations_done` and :meth:`run_time_s` are closed forms of, for a policy
        that evaluates many jobs at once (``halyard.policies.running_sens``): ``(done, since, rate,
        run_s, run_from)`` where ``iterations_done(now)`` is ``done`` if ``rate == 0`` or ``now <=
        since``, else ``min(iterations_total, done + rate x (now - since))``, and ``run_time_s(now)``
        is ``run_s + (now - run_from)``, or ``run_s`` when not running (``run_from`` NaN). They change
        only when ``epoch`` does or the job starts on a new allocation."""
        return (float(self._done), max(self._anchor, self._resume_at), self._rate, self._run_s,
                math.nan if self._run_start is None else self._run_start)

    def service_line(self) -> tuple[float, int, float | None]:
        """``(banked, gpus, since)``: :meth:`attained_gpu_s` in closed form, ``banked + gpus x (now -
        since)`` while running, ``banked`` when not (``since`` None). They change only when the core
        logs an event for the job (it starts, stops, moves, is resized or re-shifted, or ends)."""
        return self._gpu_s, self.num_gpus, self._run_start

    def attained_gpu_s(self, now: float) -> float:
        if self._run_start is None:
            return self._gpu_s
        return self._gpu_s + self.num_gpus * (now - self._run_start)

    def run_time_s(self, now: float) -> float:
        return self._run_s if self._run_start is None else self._run_s + (now - self._run_start)

    def exposed_comm_s(self, now: float) -> float:
        """Exposed communication seconds so far: iterations run x exposed seconds per iteration,
        summed over every run segment (a re-run partial iteration counts again)."""
        return self._exposed_s + (self.iterations_done(now) - self._done) * self.exposed_iteration_s

    @property
    def resume_at(self) -> float:
        """When a job restoring a checkpoint starts making progress again."""
        return self._resume_at

    @property
    def has_checkpoint(self) -> bool:
        """Whether a start resumes earlier work (and so pays a restart cost)."""
        return self._done > 0.0 or self.preemptions > 0 or self.suspensions > 0

    def finish_time(self) -> float:
        """When a running job completes at its current rate (inf if not progressing)."""
        if self._rate <= 0.0:
            return math.inf
        return max(self._anchor, self._resume_at) + (self.iterations_total - self._done) / self._rate

    # --- write side (SchedulingCore and the agent pool only) --------------

    def begin_run(self, allocation: Allocation, now: float) -> None:
        """Start a PENDING job. No ``epoch`` bump: a job is PENDING only after submission or
        :meth:`end_run` (which bumps), so a cache keyed by epoch never holds this run's numbers
        under the epoch it has now (``tests/test_running_sens.py`` pins it)."""
        self.allocation = allocation
        self.num_gpus = allocation.num_gpus
        self.state = JobState.RUNNING
        self.queued_s += now - self.pending_since
        if self.first_start is None:
            self.first_start = now
        self.last_assignment_time = now
        self._run_start = now
        self._anchor = now
        self._rate = 0.0
        self.time_shift_drift_s = None

    def end_run(self, now: float, *, checkpoint: bool) -> None:
        """Stop running; with ``checkpoint`` keep only whole iterations (the last checkpoint)."""
        done = self.iterations_done(now)
        self._exposed_s += (done - self._done) * self.exposed_iteration_s
        self._done = math.floor(done + 1e-9) if checkpoint else done
        self._anchor = now
        self._rate = 0.0
        if self._run_start is not None:
            self._gpu_s += self.num_gpus * (now - self._run_start)
            self._run_s += now - self._run_start
            self._run_start = None
        if checkpoint:
            self.last_assignment_time = now
        self._moved()

    def rearm(self, now: float, allocation: Allocation, *, checkpoint: bool) -> None:
        """Switch a running job to a new allocation (migrate, resize, new resources)."""
        self.end_run(now, checkpoint=checkpoint)
        self.allocation = allocation
        self.num_gpus = allocation.num_gpus
        self._run_start = now

    def release(self) -> Allocation:
        """Drop the allocation of a stopped job; returns it for the ledger."""
        allocation = self.allocation
        if allocation is None:
            raise ValueError(f"job {self.job_id} holds no allocation to release")
        self.allocation = None
        self.time_shift_drift_s = None
        self.num_gpus = self.spec.num_gpus
        self.iteration_s = self.ideal_iteration_s
        return allocation

    def set_rate(self, now: float, iteration_s: float, restore_s: float = 0.0, exposed_s: float = 0.0) -> None:
        """One iteration now takes ``iteration_s``, of which ``exposed_s`` is exposed
        communication; with ``restore_s`` > 0 progress restarts only after that long
        (restoring a checkpoint), else a restore already under way still finishes first."""
        self._exposed_s = self.exposed_comm_s(now)
        self.exposed_iteration_s = exposed_s
        self._done = self.iterations_done(now)
        self._anchor = now
        self._resume_at = now + restore_s if restore_s > 0.0 else max(self._resume_at, now)
        self.iteration_s = iteration_s
        self._rate = 1.0 / iteration_s
        self._moved()

    def report_progress(self, now: float, iterations: float, iteration_s: float | None = None) -> None:
        """An agent that runs the job for real (not on the performance model) says how far it is.

        Progress is re-anchored at ``iterations`` now and extrapolates from there at
        the measured ``iteration_s`` (cluster seconds) if given, else at the current
        rate; so a preemption's checkpoint and a policy's remaining work follow what
        the job really did. Progress under way means any restore is over.
        """
        if self.state is not JobState.RUNNING:
            return
        done = min(float(self.iterations_total), max(0.0, float(iterations)))
        self._exposed_s = self.exposed_comm_s(now)
        if done > self._done:
            self._resume_at = min(self._resume_at, now)
        self._done = done
        self._anchor = now
        if iteration_s is not None and iteration_s > 0.0:
            self.iteration_s = iteration_s
            self._rate = 1.0 / iteration_s
        self._moved()  # saved with the next change

    def finish(self, now: float, state: JobState) -> None:
        done = float(self.iterations_total) if state is JobState.COMPLETED else self.iterations_done(now)
        self._exposed_s += (done - self._done) * self.exposed_iteration_s
        if state is JobState.COMPLETED:
            self._done = float(self.iterations_total)
        if self._run_start is not None:
            self._gpu_s += self.num_gpus * (now - self._run_start)
            self._run_s += now - self._run_start
            self._run_start = None
        elif self.state is JobState.PENDING:
            self.queued_s += now - self.pending_since
        self._rate = 0.0
        self.state = state
        self.end_time = now
        self._moved()

    def _moved(self) -> None:
        """Bump ``epoch`` and note it in :attr:`journal`: every change of the epoch goes through here."""
        self.epoch += 1
        if self.journal is not None:
            self.journal.note(self.job_id)

    # --- persistence -------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """Every slot (private progress fields included) as plain JSON-able values."""
        data = {name: getattr(self, name) for name in PERSISTED}
        data["spec"] = spec_to_dict(self.spec)
        data["state"] = self.state.value
        data["allocation"] = None if self.allocation is None else allocation_to_dict(self.allocation)
        return data

    @classmethod
    def restore(cls, data: Mapping[str, Any]) -> JobRecord:
        """The record :meth:`snapshot` gave ``data`` for, exactly; raises ValueError on a malformed dict."""
        missing = sorted(set(PERSISTED) - data.keys())
        unknown = sorted(data.keys() - set(PERSISTED))
        if missing or unknown:
            raise ValueError(f"job record fields missing {missing}, unknown {unknown}")
        record = cls.__new__(cls)
        for name in PERSISTED:
            setattr(record, name, data[name])
        record.wait, record.time_shift_drift_s, record.journal = None, None, None  # NOT_PERSISTED
        for name in RECOUNTED:  # NOT_PERSISTED: SchedulingCore.restore recounts them from the log
            setattr(record, name, 0)
        record.end_reason = ""  # NOT_PERSISTED: SchedulingCore.restore reads the terminal event's detail
        record.spec = spec_from_dict(data["spec"])
        record.state = JobState(data["state"])
        record.allocation = None if data["allocation"] is None else allocation_from_dict(data["allocation"])
        if record.job_id != record.spec.job_id:
            raise ValueError(f"job_id {record.job_id!r} differs from spec.job_id {record.spec.job_id!r}")
        return record


# Every slot but the waiting reason and the measured drift, which the first pass and the first
# progress report after a restart give again, and the journal, which the restoring core sets.
# The event counts that are not stored columns (scheduling/eventcounts.py) are recounted from the log.
NOT_PERSISTED = ("end_reason", *RECOUNTED, "journal", "time_shift_drift_s", "wait")
PERSISTED = tuple(name for name in JobRecord.__slots__ if name not in NOT_PERSISTED)


_SPEC_FIELDS = tuple(f.name for f in dataclasses.fields(JobSpec))  # looked up once, not per stored record


def spec_to_dict(spec: JobSpec) -> dict[str, Any]:
    """Every JobSpec field as plain JSON-able values (tuples as lists, mappings as dicts)."""
    data = {name: getattr(spec, name) for name in _SPEC_FIELDS}
    p = spec.parallelism
    data["parallelism"] = None if p is None else {"data": p.data, "tensor": p.tensor, "pipeline": p.pipeline}
    data["command"] = list(spec.command)
    data["env"] = dict(spec.env)
    data["extra"] = dict(spec.extra)
    return data


def spec_from_dict(data: Mapping[str, Any]) -> JobSpec:
    """The JobSpec :func:`spec_to_dict` gave ``data`` for (validated again)."""
    fields = dict(data)
    if fields.get("parallelism") is not None:
        fields["parallelism"] = Parallelism(**fields["parallelism"])
    if "command" in fields:
        fields["command"] = tuple(fields["command"])
    for name in ("env", "extra"):
        if name in fields:
            fields[name] = MappingProxyType(dict(fields[name]))
    return JobSpec(**fields)


def allocation_to_dict(allocation: Allocation) -> dict[str, Any]:
    return {
        "nodes": [{"node": p.node, "gpus": list(p.gpus), "cpus": p.cpus, "memory_mb": p.memory_mb,
                   "workers": list(p.workers)} for p in allocation.nodes],
        "time_shift_s": allocation.time_shift_s,
        "stages": [{"gpus": s.gpus, "data": s.data, "tensor": s.tensor} for s in allocation.stages],
        **({"time_shift": {"seconds": allocation.time_shift_s, "period_s": allocation.time_shift_period_s,
                           "epoch_s": allocation.time_shift_epoch_s}} if allocation.has_time_shift else {}),
    }


def allocation_from_dict(data: Mapping[str, Any]) -> Allocation:
    nodes = tuple(NodeAllocation(p["node"], tuple(p["gpus"]), p["cpus"], p["memory_mb"], tuple(p.get("workers", ())))
                  for p in data["nodes"])
    stages = tuple(StagePlan(s["gpus"], s["data"], s["tensor"]) for s in data.get("stages", ()))
    shift = data.get("time_shift")  # absent in stores written before shifts of 0 s were real
    if shift is not None:
        return Allocation(nodes, stages=stages).with_time_shift(shift["seconds"], shift["period_s"],
                                                                shift["epoch_s"])
    return Allocation(nodes, data.get("time_shift_s", 0.0), stages)
