"""Forecasts on the wire: ``Job.forecast`` (GetJob, ListJobs), ``ClusterService.WhatIf`` and the metric.

Kept apart from :mod:`grpc_api` so the servicers only call in here (docs/forecast.md).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram

from halyard.controlplane.forecast import MAX_ADDED_NODES, Change, Forecaster, ForecastError, NewNode, Summary, WhatIf
from halyard.datamodel import ValidationError
from halyard.datamodel import limits as lim
from halyard.v1 import cluster_service_pb2 as cpb
from halyard.v1 import job_service_pb2 as jpb
from halyard.v1 import types_pb2 as tpb

# |actual - forecast| first start, cluster seconds: from exact (FIFO's head) to a day off.
ERROR_BUCKETS = (0, 1, 10, 60, 300, 900, 1800, 3600, 2 * 3600, 4 * 3600, 8 * 3600, 86400)
MAX_CHANGE_ITEMS = 1000  # names in one WhatIf list


def attach_forecast(job: jpb.Job, forecasts: Forecaster | None) -> jpb.Job:
    """Fill ``job.forecast`` from the latest forecast; a job the latest forecast does not hold (submitted
    since) asks for a new one, made in the background (the answer does not wait for it)."""
    if forecasts is None or job.state not in (tpb.PENDING, tpb.RUNNING):
        return job
    latest = forecasts.latest
    mine = None if latest is None else latest[job.spec.job_id]
    if latest is None or mine is None:
        forecasts.refresh_soon()
        return job
    f = job.forecast
    f.made_at, f.made_at_unix = latest.made_at, latest.made_wall
    f.assumes = "no new arrivals" + (f"; band over {latest.samples} sampled-arrival runs" if latest.samples else "")
    if mine.start is not None and job.state == tpb.PENDING:
        f.expected_start, f.expected_start_unix = mine.start, forecasts.wall_time(mine.start)
    if mine.finish is not None:
        f.expected_finish, f.expected_finish_unix = mine.finish, forecasts.wall_time(mine.finish)
    if mine.start_band is not None and job.state == tpb.PENDING:
        f.start_p10, f.start_p50, f.start_p90 = mine.start_band
    if mine.finish_band is not None:
        f.finish_p10, f.finish_p50, f.finish_p90 = mine.finish_band
    return job


def change_from_pb(request: cpb.WhatIfRequest) -> Change:
    for name in ("drain", "undrain", "cancel"):
        items = getattr(request, name)
        if len(items) > MAX_CHANGE_ITEMS:
            raise ValidationError(f"holds {len(items)} names; at most {MAX_CHANGE_ITEMS}", field=name)
        for item in items:
            if not item or len(item) > lim.MAX_REQUEST_ID:
                raise ValidationError(f"names must be 1 to {lim.MAX_REQUEST_ID} characters", field=name)
    if len(request.policy) > lim.MAX_REQUEST_ID:
        raise ValidationError(f"is {len(request.policy)} characters long; at most {lim.MAX_REQUEST_ID}",
                              field="policy")
    if len(request.add_node) > MAX_ADDED_NODES:
        raise ValidationError(f"adds {len(request.add_node)} nodes; at most {MAX_ADDED_NODES}", field="add_node")
    added = []
    for i, node in enumerate(request.add_node):
        for name in ("name", "rack", "gpu_type", "fabric"):  # checked in full against the cluster later
            if len(getattr(node, name)) > lim.MAX_REQUEST_ID:
                raise ValidationError(f"is longer than {lim.MAX_REQUEST_ID} characters", field=f"add_node[{i}].{name}")
        added.append(NewNode(rack=node.rack, name=node.name, gpu_type=node.gpu_type, gpus=node.gpus, cpus=node.cpus,
                             memory_mb=node.memory_mb, fabric=node.fabric, fabric_gbyte_s=node.fabric_gbyte_s,
                             nic_gbyte_s=node.nic_gbyte_s))
    return Change(request.policy, tuple(request.drain), tuple(request.undrain), tuple(request.cancel),
                  tuple(added))


def _summary_pb(s: Summary) -> cpb.ForecastSummary:
    return cpb.ForecastSummary(policy=s.policy, jobs=s.jobs, unfinished=s.unfinished, avg_wait_s=s.avg_wait_s,
                               p99_wait_s=s.p99_wait_s, avg_jct_s=s.avg_jct_s, p99_jct_s=s.p99_jct_s)


def what_if_to_pb(w: WhatIf) -> cpb.WhatIfResponse:
    out = cpb.WhatIfResponse(change=w.change, made_at=w.made_at, today=_summary_pb(w.today),
                             changed=_summary_pb(w.changed))
    for m in w.moves:
        move = out.moves.add(job_id=m.job_id)
        for name, value in (("start_today", m.start_before), ("start_changed", m.start_after),
                            ("finish_today", m.finish_before), ("finish_changed", m.finish_after)):
            if value is not None:
                setattr(move, name, value)
    return out


async def what_if(forecasts: Forecaster | None, request: cpb.WhatIfRequest) -> cpb.WhatIfResponse:
    """The WhatIf answer (FAILED_PRECONDITION when forecasts are off or the forward run failed)."""
    if forecasts is None:
        raise ForecastError("forecasts are off on this control plane (started without them)")
    return what_if_to_pb(await forecasts.what_if(change_from_pb(request)))


def register_metrics(forecasts: Forecaster, registry: CollectorRegistry) -> Histogram:
    """``halyard_forecast_start_error_seconds``: how far off the latest forecast's start was, per job, once
    the job really started."""
    histogram = Histogram("halyard_forecast_start_error_seconds",
                          "|actual - forecast| first start of a job, cluster seconds, scored against the latest "
                          "forecast made before it started", buckets=ERROR_BUCKETS, registry=registry)
    forecasts.on_error = histogram.observe
    return histogram
