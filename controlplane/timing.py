"""What the performance model expects of each job an applied plan touched.

Both drivers of the core call this after applying a plan: the simulator then
schedules the completion it implies, the control plane tells agents to run the
job and relies on them to report. Sharing it is what keeps `simulate` and
`replay` on the same schedule (DESIGN.md: one performance model).
"""

from __future__ import annotations

from halyard.controlplane.core import SchedulingCore
from halyard.controlplane.records import JobRecord
from halyard.datamodel import JobState
from halyard.emulator import PerformanceModel
from halyard.policies import Action, Migrate, Preempt, Resize, Start


def performance_model_for(policy: object, **settings: object) -> PerformanceModel:
    """The performance model a run of ``policy`` uses: data stalls on for a policy that
    declares ``resource_sensitive`` (Synergy's, which give jobs other CPU/memory than the
    GPU-proportional share), off otherwise (every other policy keeps its iteration times).
    Every driver (simulate, replay, the test cluster, the daemons) and the emulated agents
    of a run must use the model this returns."""
    return PerformanceModel(data_stalls=bool(getattr(policy, "resource_sensitive", False)), **settings)


def expect(core: SchedulingCore, perf: PerformanceModel, actions: list[Action], now: float) -> list[JobRecord]:
    """Set the rate of every running job an action touched; returns them in action order.

    A start from a checkpoint, a migration and a resize restore a checkpoint
    first (the model's restart cost); a time-shift or a CPU/memory change
    keeps the job running.
    """
    touched: list[JobRecord] = []
    for action in actions:
        if isinstance(action, Preempt):
            continue  # the core already stopped it at its last checkpoint
        record = core.records[action.job_id]
        if record.state is not JobState.RUNNING:
            continue
        timing = perf.iteration_time(record.spec, record.allocation, core.cluster)
        resumes = isinstance(action, Migrate | Resize) or (isinstance(action, Start) and record.has_checkpoint)
        record.set_rate(now, timing.total_s, perf.restart_cost_s(record.spec) if resumes else 0.0,
                        exposed_s=timing.exposed_s)
        touched.append(record)
    return touched
