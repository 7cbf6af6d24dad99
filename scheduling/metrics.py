"""Run summaries: the JSON keys every run (simulate, later replay) reports."""

from __future__ import annotations

import numpy as np

from halyard.datamodel import JobState
from halyard.scheduling.core import SchedulingCore
from halyard.scheduling.eventcounts import counts_of, totals
from halyard.scheduling.records import JobRecord


def summarize(core: SchedulingCore, *, policy: str, trace_jobs: int, rejected: int,
              wall_s: float, measure: tuple[int, int] | None = None) -> dict[str, float | int | str]:
    """Aggregate job metrics.

    JCT = completion - submit; queueing delay = all time spent PENDING
    (first wait and waits after preemptions); makespan = last completion -
    first submission; GPU utilisation = GPU-seconds held / (GPUs x makespan).
    Tails: ``p95_*`` is the 95th percentile, ``tail95_*`` the mean of the values at
    or above it (Dally's ">P95"). Communication: ``exposed_comm_s`` sums each
    completed job's exposed (not overlapped) communication seconds,
    ``comm_share`` is that over the jobs' summed run time, ``avg_comm_share`` the
    mean of the per-job shares (:func:`job_metrics` has them per job).
    ``measure`` restricts the job metrics to arrival positions [start, end)
    (steady-state windows as in Synergy §5.1).
    """
    records = list(core.records.values())
    if measure is not None:
        start, end = measure
        records = [r for r in records if start <= r.arrival_seq < end]
    done = [r for r in records if r.state is JobState.COMPLETED]
    ends = [_ended(r) for r in done]
    jct = np.array([end - r.spec.submit_time for r, end in zip(done, ends, strict=True)], dtype=float)
    queue = np.array([r.queued_s for r in done], dtype=float)
    gpu_s = float(sum(r.attained_gpu_s(r.end_time or 0.0) for r in records))
    first_submit = min((r.spec.submit_time for r in records), default=0.0)
    last_end = max(ends, default=first_submit)
    makespan = last_end - first_submit
    capacity = core.cluster.total_gpus * makespan

    def pct(q: float) -> float:
        return float(np.percentile(jct, q)) if jct.size else 0.0

    exposed = np.array([r.exposed_comm_s(end) for r, end in zip(done, ends, strict=True)], dtype=float)
    run = np.array([r.run_time_s(end) for r, end in zip(done, ends, strict=True)], dtype=float)
    share = np.divide(exposed, run, out=np.zeros_like(exposed), where=run > 0)

    summary: dict[str, float | int | str] = {
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
        "p95_queue_s": _percentile(queue, 95),
        "p99_queue_s": _percentile(queue, 99),
        "tail95_queue_s": tail_mean(queue, 95),
        "tail99_queue_s": tail_mean(queue, 99),
        "tail95_jct_s": tail_mean(jct, 95),
        "tail99_jct_s": tail_mean(jct, 99),
        "exposed_comm_s": float(exposed.sum()),
        "avg_exposed_comm_s": float(exposed.mean()) if exposed.size else 0.0,
        "comm_share": float(exposed.sum() / run.sum()) if run.sum() > 0 else 0.0,
        "avg_comm_share": float(share.mean()) if share.size else 0.0,
        "gpu_utilization": gpu_s / capacity if capacity > 0 else 0.0,
        **totals(records),  # preemptions, suspensions (Crius §6.1, apart): scheduling/eventcounts.py
        "passes": core.passes,
        "skipped_passes": core.skipped_passes,  # repeats of an empty pass (Policy.quiet_until)
        "avg_pass_ms": 1e3 * core.pass_seconds.total / core.passes if core.passes else 0.0,
        **core.pass_seconds.latency_ms(),
        "events": len(core.log),
        "wall_s": wall_s,
        "jobs_per_wall_s": trace_jobs / wall_s if wall_s > 0 else 0.0,
    }
    with_deadline = [(r, r.spec.deadline) for r in records if r.spec.deadline is not None]
    if with_deadline:  # ElasticFlow's deadline satisfactory ratio (Crius §8.5): met / jobs with a deadline
        met = sum(1 for r, deadline in with_deadline if r.state is JobState.COMPLETED and _ended(r) <= deadline)
        summary["deadline_jobs"] = len(with_deadline)
        summary["deadline_met_ratio"] = met / len(with_deadline)
        summary["dropped"] = sum(1 for r, _ in with_deadline if r.state is JobState.CANCELLED)
    return summary


def _ended(record: JobRecord) -> float:
    """When a completed job ended (the core sets the end time of every job it completes)."""
    end = record.end_time
    if end is None:
        raise ValueError(f"job {record.job_id} is {record.state.name} without an end time")
    return end


def _percentile(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if values.size else 0.0


def tail_mean(values: np.ndarray, q: float) -> float:
    """Mean of the values at or above the ``q``-th percentile (0 for none)."""
    if not values.size:
        return 0.0
    cut = np.percentile(values, q)
    return float(values[values >= cut].mean())


def job_metrics(core: SchedulingCore, now: float = 0.0) -> list[dict[str, float | int | str | None]]:
    """Per job, in arrival order: times, preemptions and exposed communication.

    Jobs that have not ended are measured at ``now``. ``comm_share`` = exposed
    communication seconds / run seconds (0 if it never ran).
    """
    out: list[dict[str, float | int | str | None]] = []
    for r in sorted(core.records.values(), key=lambda r: r.arrival_seq):
        end = r.end_time
        at = end if end is not None else now
        run = r.run_time_s(at)
        exposed = r.exposed_comm_s(at)
        out.append({
            "job_id": r.job_id,
            "model": r.spec.model,
            "gpus": r.spec.num_gpus,
            "state": r.state.value,
            "submit_s": r.spec.submit_time,
            "jct_s": None if end is None else end - r.spec.submit_time,
            "queue_s": r.queued_s,
            "run_s": run,
            "exposed_comm_s": exposed,
            "comm_share": exposed / run if run > 0 else 0.0,
            **counts_of(r),
            "restarts": r.restarts,
        })
    return out
