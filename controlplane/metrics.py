"""Run summaries: the JSON keys every run (simulate, later replay) reports."""

from __future__ import annotations

import numpy as np

from halyard.controlplane.core import SchedulingCore
from halyard.datamodel import JobState


def summarize(core: SchedulingCore, *, policy: str, trace_jobs: int, rejected: int,
              wall_s: float, measure: tuple[int, int] | None = None) -> dict[str, float | int | str]:
    """Aggregate job metrics.

    JCT = completion - submit; queueing delay = all time spent PENDING
    (first wait and waits after preemptions); makespan = last completion -
    first submission; GPU utilisation = GPU-seconds held / (GPUs x makespan).
    ``measure`` restricts the job metrics to arrival positions [start, end)
    (steady-state windows as in Synergy §5.1).
    """
    records = list(core.records.values())
    if measure is not None:
        start, end = measure
        records = [r for r in records if start <= r.arrival_seq < end]
    done = [r for r in records if r.state is JobState.COMPLETED]
    jct = np.array([r.end_time - r.spec.submit_time for r in done], dtype=float)
    queue = np.array([r.queued_s for r in done], dtype=float)
    gpu_s = float(sum(r.attained_gpu_s(r.end_time or 0.0) for r in records))
    first_submit = min((r.spec.submit_time for r in records), default=0.0)
    last_end = max((r.end_time for r in done), default=first_submit)
    makespan = last_end - first_submit
    capacity = core.cluster.total_gpus * makespan

    def pct(q: float) -> float:
        return float(np.percentile(jct, q)) if jct.size else 0.0

    return {
        "policy": policy,
        "cluster": core.cluster.name,
        "jobs": trace_jobs,
        "rejected": rejected,
        "completed": len(done),
        "avg_jct_s": float(jct.mean()) if jct.size else 0.0,
        "p50_jct_s": pct(50),
        "p95_jct_s": pct(95),
        "p99_jct_s": pct(99),
        "makespan_s": makespan,
        "avg_queue_s": float(queue.mean()) if queue.size else 0.0,
        "gpu_utilization": gpu_s / capacity if capacity > 0 else 0.0,
        "preemptions": sum(r.preemptions for r in records),
        "passes": core.passes,
        "avg_pass_ms": 1e3 * core.pass_wall_s / core.passes if core.passes else 0.0,
        "events": len(core.log),
        "wall_s": wall_s,
        "jobs_per_wall_s": trace_jobs / wall_s if wall_s > 0 else 0.0,
    }
