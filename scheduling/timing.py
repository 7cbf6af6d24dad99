"""What the performance model expects of running jobs after every change.

Both drivers of the core use a :class:`Pacer`: after a plan is applied or jobs
ended, it sets the rate of every running job whose iteration time changed --
the jobs an action touched, and the jobs that share a link with something that
started, moved or stopped (:class:`halyard.emulator.fabric.Fabric`). The
simulator then schedules the completions those rates imply; the control plane
tells agents. Sharing it is what keeps `simulate` and `replay` on the same
schedule (DESIGN.md: one performance model).
"""

from __future__ import annotations

from typing import Any

from halyard.datamodel import Allocation, JobState
from halyard.emulator import PerformanceModel
from halyard.emulator.fabric import Fabric
from halyard.emulator.parallel import JobTiming
from halyard.policies import Action, Migrate, Policy, Preempt, Resize, SetTimeShift, Start
from halyard.policies.view import allocation_of
from halyard.scheduling.core import SchedulingCore
from halyard.scheduling.records import JobRecord
from halyard.timeshift import grid_at_or_after, paced_iteration_s


def performance_model_for(policy: Policy, **settings: Any) -> PerformanceModel:
    """The performance model a run of ``policy`` uses: data stalls on for a policy that
    declares ``resource_sensitive`` (Synergy's, which give jobs other CPU/memory than the
    GPU-proportional share), off otherwise (every other policy keeps its iteration times).
    Every driver (simulate, replay, the test cluster, the daemons) and the emulated agents
    of a run must use the model this returns. ``settings`` are :class:`PerformanceModel`'s other options."""
    return PerformanceModel(data_stalls=policy.resource_sensitive, **settings)


class Pacer:
    """Keeps each running job's rate what the model says for its allocation and its link co-runners.

    A start from a checkpoint restores it first (the model's restart cost). A
    resize reconfigures the running job (EasyScale §3.2, "Adapting to
    elasticity"): it writes an on-demand checkpoint of its whole iterations, then
    restarts on the new allocation from it, making no progress for the model's
    ``reconfigure_cost_s`` (checkpoint write + restart); its rate then follows the
    new allocation. A migration keeps its whole iterations too but pays the
    restart cost alone, as it always has: charging it the checkpoint write as
    well would change the schedules of the policies that migrate (Gandiva, Dally)
    and their published reproductions (docs/decisions/parallelism-and-elasticity.md, "Elastic sizing").
    A time-shift, a CPU/memory change or a co-runner coming or going keeps the
    job running at a new rate.

    A job with a time-shift and a period starts its iterations on the grid
    ``epoch + shift + k x period`` (:mod:`halyard.timeshift`), as the emulated
    agents and the worker library do: a start, move or new shift waits for the
    next grid point, and each iteration takes the paced time.
    """

    def __init__(self, core: SchedulingCore, perf: PerformanceModel) -> None:
        self.core = core
        self.perf = perf
        self.fabric = None if perf.contention == "off" else Fabric(perf, core.cluster, sharing=perf.contention)
        self._seen_events = len(core.log)
        # Each running job's dedicated timing on its allocation (a pure function of the two), taken
        # once for the fabric and for every re-rating: a job is re-rated each time a co-runner on its
        # links comes or goes, its allocation unchanged (Tiresias called job_timing 102k times for 30k
        # starts on the synthetic 90% trace before this cache).
        self._dedicated: dict[str, tuple[Allocation, JobTiming]] = {}

    def update(self, actions: list[Action], now: float) -> list[JobRecord]:
        """Rates after ``actions`` (a pass's applied plan, possibly empty) and any job that ended
        since the last call; returns the re-rated running jobs, the touched ones first in action order."""
        core = self.core
        restore: dict[str, float] = {}
        align: set[str] = set()  # started, moved or re-shifted: a shifted job waits for its grid
        for action in actions:
            if isinstance(action, Preempt):
                continue  # the core already stopped it at its last checkpoint
            record = core.records[action.job_id]
            if record.state is JobState.RUNNING:
                if isinstance(action, Resize):
                    restore[record.job_id] = self.perf.reconfigure_cost_s(record.spec)
                else:
                    resumes = isinstance(action, Migrate) or (isinstance(action, Start) and record.has_checkpoint)
                    restore[record.job_id] = (self.perf.restart_cost_s(record.spec) if resumes
                                              else self.perf.start_cost_s if isinstance(action, Start) else 0.0)
                if isinstance(action, Start | Migrate | Resize | SetTimeShift):
                    align.add(record.job_id)
        slowdowns = self._sync_fabric(restore, now)
        out: list[JobRecord] = []
        for job_id, restore_s in restore.items():
            out.append(self._rate(core.records[job_id], now, restore_s, align=job_id in align))
        for job_id in slowdowns:
            record = core.records[job_id]
            if job_id not in restore and record.state is JobState.RUNNING:
                out.append(self._rate(record, now, 0.0))
        return out

    def _sync_fabric(self, restore: dict[str, float], now: float) -> dict[str, float]:
        """Move the fabric to the core's running set as of now; the jobs whose slowdown changed.
        A job that stopped running is forgotten by the dedicated-time cache as well."""
        log, fabric, records = self.core.log, self.fabric, self.core.records
        for event in log.since(self._seen_events):
            record = records[event.job_id]
            if record.state is not JobState.RUNNING:
                self._dedicated.pop(record.job_id, None)
                if fabric is not None:
                    fabric.remove(record.job_id)
            elif fabric is not None and not fabric.holds(record.job_id, allocation_of(record)):
                start = now + restore.get(record.job_id, 0.0)
                fabric.place(record.job_id, record.spec, allocation_of(record), start, origin_s=self.core.origin_s,
                             timing=self._timing(record))
        self._seen_events = len(log)
        return {} if fabric is None else fabric.settle()

    def _rate(self, record: JobRecord, now: float, restore_s: float, *, align: bool = False) -> JobRecord:
        timing = self._timing(record).iteration
        if self.fabric is not None:
            timing = self.fabric.contended(record.job_id, timing)
        step = timing.total_s
        shift = allocation_of(record)
        if shift.has_time_shift and shift.time_shift_period_s > 0.0:
            step = paced_iteration_s(step, shift.time_shift_period_s)
            if align:
                ready = now + restore_s if restore_s > 0.0 else max(now, record.resume_at)
                restore_s = grid_at_or_after(ready, shift.time_shift_epoch_s + shift.time_shift_s,
                                             shift.time_shift_period_s) - now
        record.set_rate(now, step, restore_s, exposed_s=timing.exposed_s)
        return record

    def _timing(self, record: JobRecord) -> JobTiming:
        """``perf.job_timing`` of the running job on its allocation, computed once per allocation."""
        allocation = allocation_of(record)
        kept = self._dedicated.get(record.job_id)
        if kept is not None and kept[0] is allocation:
            return kept[1]
        timing = self.perf.job_timing(record.spec, allocation, self.core.cluster)
        self._dedicated[record.job_id] = (allocation, timing)
        return timing

    def slowdown(self, job_id: str) -> float:
        """The job's contended over dedicated iteration time (1.0 with contention off)."""
        return 1.0 if self.fabric is None else self.fabric.slowdown(job_id)
