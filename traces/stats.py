"""Summary statistics of a loaded trace (``halyard trace stats``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from halyard.datamodel import JobSpec
from halyard.traces.schema import TraceLoad

PERCENTILES: tuple[int, ...] = (0, 10, 50, 90, 99, 100)
SECONDS_PER_HOUR = 3600.0
TOP_TENANTS = 10


def _percentiles(values: Sequence[float]) -> dict[str, float] | None:
    if not values:
        return None
    points = np.percentile(np.asarray(values, dtype=np.float64), PERCENTILES)
    return {f"p{p}": float(v) for p, v in zip(PERCENTILES, points, strict=True)}


def trace_stats(load: TraceLoad) -> dict[str, Any]:
    """Jobs, time span, arrival rate, GPU-demand histogram, duration and iteration percentiles.

    ``arrival_rate_per_hour`` is ``jobs / span`` (None for a span of 0);
    percentiles are numpy's linear interpolation, ``p0``/``p100`` being the
    minimum and maximum, over the jobs that set the value.
    """
    jobs: Sequence[JobSpec] = load.jobs
    times = [j.submit_time for j in jobs]
    span = (max(times) - min(times)) if times else 0.0
    gpus = Counter(j.num_gpus for j in jobs)
    tenants = Counter(j.tenant for j in jobs)
    return {
        "source": load.source,
        "format": load.format,
        "jobs": len(jobs),
        "skipped_rows": len(load.errors),
        "dropped_rows": dict(load.dropped),
        "first_submit_s": min(times) if times else None,
        "last_submit_s": max(times) if times else None,
        "span_s": span,
        "arrival_rate_per_hour": len(jobs) / (span / SECONDS_PER_HOUR) if span > 0 else None,
        "gpu_demand": {str(k): v for k, v in sorted(gpus.items())},
        "gpu_hours": sum(j.num_gpus * j.duration_s for j in jobs if j.duration_s) / SECONDS_PER_HOUR,
        "duration_s": _percentiles([j.duration_s for j in jobs if j.duration_s is not None]),
        "iterations": _percentiles([float(j.iterations) for j in jobs if j.iterations > 0]),
        "tenants": len(tenants),
        "top_tenants": dict(tenants.most_common(TOP_TENANTS)),
        "models": dict(Counter(j.model for j in jobs).most_common()),
    }
