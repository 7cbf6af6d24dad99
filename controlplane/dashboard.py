"""What the web dashboard shows, as JSON-able views of the control plane's own state.

Jobs and events are the gRPC API's messages (:func:`grpc_api.job_to_pb`,
:func:`wire.event_to_pb`) in protobuf's JSON mapping, so the page and
``halyard jobs --json`` agree field for field. The cluster map adds what the
API's NodeStatus has no room for: which job holds each GPU, and the GPU
utilisation the node's agent measured in its latest heartbeat. The utilisation
timeline is rebuilt from the event log, so it covers the control plane's whole
history, restarts included, in cluster time.

Every view takes ``visible``: the one tenant the caller may see (a tenant's user), or
None (an operator). A tenant's user sees only its tenant's jobs and events; on the
cluster map another tenant's GPUs are busy without a job name (``""``). No view carries
an environment value: jobs come from :func:`job_to_pb`, which keeps only the names.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass
from typing import Any

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

from halyard.controlplane.dispatch import allocation_of
from halyard.controlplane.errors import PermissionDenied
from halyard.controlplane.grpc_api import Foreign, foreign_jobs, job_to_pb
from halyard.controlplane.service import ControlPlane
from halyard.datamodel import EventKind, JobEvent, JobState, ValidationError
from halyard.scheduling.records import JobRecord
from halyard.wire import event_to_pb

MAX_JOBS = 1000  # newest jobs a list returns; the total says how many matched
MAX_WINDOW_S = 7 * 86400.0
# Without window_s the chart covers the cluster's history (from its first event), at most
# DEFAULT_WINDOW_S and at least MIN_WINDOW_S: a young cluster fills the chart instead of being a
# sliver at the right edge of six hours.
DEFAULT_WINDOW_S = 6 * 3600.0
MIN_WINDOW_S = 60.0
TIMELINE_POINTS = 240
MEASURED_SAMPLES = 5760  # measured-utilisation samples kept: 24 h at one per MEASURE_EVERY_S
MEASURE_EVERY_S = 15.0  # wall seconds between samples (and one more at each timeline request)
ALLOCATING = (EventKind.STARTED, EventKind.MIGRATED, EventKind.RESIZED)
HIDDEN_JOB = ""  # a cluster-map slot held by a job the caller may not see


def sees(visible: str | None, record: JobRecord) -> bool:
    """Whether a caller who may see tenant ``visible`` (None: every tenant) may see ``record``."""
    return visible is None or record.spec.tenant == visible


def to_json(message: Message) -> dict[str, Any]:
    """protobuf's JSON mapping with proto field names and zero values kept (the page reads every field)."""
    return MessageToDict(message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)


def job_json(cp: ControlPlane, record: JobRecord, now: float, foreign: Foreign | None = None) -> dict[str, Any]:
    """GetJob's message (why it waits included), plus ``waiting_s``: how long a pending job has
    waited since it last became pending (the message's ``queued_s`` counts only waits that are over)."""
    waiting = now - record.pending_since if record.state is JobState.PENDING else 0.0
    return {**to_json(job_to_pb(record, now, cp.core.wait_of(record), foreign=foreign)),
            "waiting_s": max(0.0, waiting)}


def event_json(event: JobEvent) -> dict[str, Any]:
    return to_json(event_to_pb(event))


def cluster_view(cp: ControlPlane, visible: str | None = None) -> dict[str, Any]:
    """Racks, nodes and per-GPU occupancy; agent connection, drain and heartbeat per node."""
    holder: dict[tuple[str, int], str] = {}
    for record in cp.core.running.values():
        name = record.job_id if sees(visible, record) else HIDDEN_JOB
        for part in allocation_of(record).nodes:
            for gpu in part.gpus:
                holder[(part.node, gpu)] = name
    free = cp.core.free
    nodes = []
    for node in cp.cluster.nodes:
        session = cp.sessions.get(node.name)
        beat = session.heartbeat if session is not None else None
        nodes.append({
            "name": node.name, "rack": node.rack, "gpu_type": node.gpu_type, "gpus": node.gpus,
            "cpus": node.cpus, "memory_mb": node.memory_mb,
            "connected": session is not None, "backend": session.backend if session is not None else None,
            "drained": node.name in cp.drained,
            "healthy": None if beat is None else beat.healthy,
            "health_detail": "" if beat is None else beat.detail,
            "gpu_utilization": None if beat is None else beat.gpu_utilization,
            "free_gpus": int(free.gpus[node.index]), "free_cpus": int(free.cpus[node.index]),
            "free_memory_mb": int(free.memory_mb[node.index]),
            "slots": [holder.get((node.name, g)) for g in range(node.gpus)],
        })
    policy = cp.core.policy
    return {
        "name": cp.cluster.name, "policy": policy.name, "cluster_time": cp.now(),
        "racks": [r.name for r in cp.cluster.racks], "nodes": nodes,
        "total_gpus": cp.cluster.total_gpus, "free_gpus": int(free.total_gpus),
        "pending_jobs": len(cp.core.pending), "running_jobs": len(cp.core.running),
        "agents_connected": len(cp.sessions), "nodes_drained": len(cp.drained),
        "gpu_utilization_measured": measured_utilisation(cp),
    }


def measured_utilisation(cp: ControlPlane) -> float | None:
    """GPU-weighted mean of the utilisation connected agents measured in their latest heartbeat (None: no report)."""
    busy = gpus = 0.0
    for name, session in list(cp.sessions.items()):
        if session.heartbeat is not None:
            node_gpus = cp.cluster.node(name).gpus
            busy += session.heartbeat.gpu_utilization * node_gpus
            gpus += node_gpus
    return busy / gpus if gpus else None


def parse_state(value: str | None) -> JobState | None:
    if not value:
        return None
    try:
        return JobState(value.upper())
    except ValueError:
        raise ValidationError(f"unknown job state {value!r} (one of {', '.join(s.value for s in JobState)})",
                              field="state") from None


def jobs_view(cp: ControlPlane, *, state: JobState | None = None, tenant: str | None = None,
              limit: int = MAX_JOBS, visible: str | None = None) -> dict[str, Any]:
    """Jobs matching the filters, newest first, at most ``limit``; and every tenant the caller
    may see, for the filter's choices."""
    _check_limit(limit)
    if visible is not None and tenant and tenant != visible:
        raise PermissionDenied(f"field 'tenant': this caller may list only tenant {visible!r}'s jobs")
    tenant = tenant or visible
    now, foreign = cp.now(), foreign_jobs(cp, visible)
    matching = [r for r in cp.core.records.values()
                if (state is None or r.state is state) and (not tenant or r.spec.tenant == tenant)]
    return {
        "total": len(matching),
        "jobs": [job_json(cp, r, now, foreign) for r in reversed(matching[-limit:])],
        "tenants": [visible] if visible is not None else sorted({r.spec.tenant for r in cp.core.records.values()}),
        "states": [s.value for s in JobState],
    }


def job_view(cp: ControlPlane, job_id: str, visible: str | None = None) -> dict[str, Any]:
    """One job (raises NotFound, or PermissionDenied for another tenant's, as GetJob) with its
    events: every placement it had is in its STARTED/MIGRATED/RESIZED events."""
    record = cp.job(job_id)
    if not sees(visible, record):
        raise PermissionDenied(f"job {record.job_id!r} belongs to another tenant; this caller may see only "
                               f"tenant {visible!r}'s jobs")
    return {"job": job_json(cp, record, cp.now(), foreign_jobs(cp, visible)),
            "events": [event_json(e) for e in cp.core.log if e.job_id == job_id]}


def queue_view(cp: ControlPlane, *, limit: int = MAX_JOBS, visible: str | None = None) -> dict[str, Any]:
    """The first ``limit`` pending jobs the caller may see, in the core's queue order (submit time, then arrival)."""
    _check_limit(limit)
    now = cp.now()
    forecasts = cp.forecasts  # each queued job's expected start, cluster seconds (None: not forecast)

    def queued(r: JobRecord, foreign: Foreign | None = None) -> dict[str, Any]:
        return {**job_json(cp, r, now, foreign), "expected_start": forecasts and forecasts.start_of(r.job_id)}

    if visible is None:
        return {"cluster_time": now, "total": len(cp.core.pending),
                "jobs": [queued(r) for r in cp.core.pending.islice(0, limit)]}
    mine, foreign = [r for r in cp.core.pending if sees(visible, r)], foreign_jobs(cp, visible)
    return {"cluster_time": now, "total": len(mine), "jobs": [queued(r, foreign) for r in mine[:limit]]}


def _check_limit(limit: int) -> None:
    if not 1 <= limit <= MAX_JOBS:
        raise ValidationError(f"must be between 1 and {MAX_JOBS}", field="limit")


def allocation_gpus(detail: str) -> int:
    """GPUs in an allocating event's detail, :func:`eventlog.describe`'s ``node:gpu,gpu;node:gpu``."""
    return sum(len(part.partition(":")[2].split(",")) for part in detail.split(";") if part.partition(":")[2])


@dataclass(frozen=True, slots=True)
class Point:
    time: float
    gpus_busy: int
    pending: int
    running: int


class Timeline:
    """GPUs allocated, pending and running jobs after each event, rebuilt from the event log.

    Incremental: each call folds in only the events appended since the last.
    """

    def __init__(self) -> None:
        self._points: list[Point] = []
        self._times: list[float] = []
        self._cursor = 0
        self._state: dict[str, JobState] = {}
        self._gpus: dict[str, int] = {}
        self._counts = {JobState.PENDING: 0, JobState.RUNNING: 0}
        self._busy = 0

    def update(self, events: list[JobEvent]) -> None:
        for event in events:
            self._cursor = event.seq
            before = self._state.get(event.job_id)
            if before in self._counts:
                self._counts[before] -= 1
            if event.state in self._counts:
                self._counts[event.state] += 1
            self._state[event.job_id] = event.state
            held = allocation_gpus(event.detail) if event.kind in ALLOCATING else (
                self._gpus.get(event.job_id, 0) if event.state is JobState.RUNNING else 0)
            self._busy += held - self._gpus.get(event.job_id, 0)
            self._gpus[event.job_id] = held
            point = Point(event.time, self._busy, self._counts[JobState.PENDING], self._counts[JobState.RUNNING])
            if self._times and self._times[-1] == event.time:
                self._points[-1] = point  # the state after the instant's last event
            else:
                self._points.append(point)
                self._times.append(event.time)

    @property
    def cursor(self) -> int:
        return self._cursor

    @property
    def first_time(self) -> float | None:
        """Cluster time of the first event folded in (None before any)."""
        return self._times[0] if self._times else None

    def sample(self, start: float, end: float, points: int = TIMELINE_POINTS) -> list[Point]:
        """The step function at ``points`` + 1 evenly spaced instants of [start, end] (zeros before the first event)."""
        out = []
        for i in range(points + 1):
            t = start + (end - start) * i / points
            k = bisect.bisect_right(self._times, t) - 1
            p = self._points[k] if k >= 0 else Point(t, 0, 0, 0)
            out.append(Point(t, p.gpus_busy, p.pending, p.running))
        return out


class MeasuredSeries:
    """The agents' measured GPU utilisation over cluster time: samples kept in memory, the newest
    ``keep`` (heartbeats are not persisted, so this history starts with the process)."""

    def __init__(self, keep: int = MEASURED_SAMPLES) -> None:
        self._times: deque[float] = deque(maxlen=keep)
        self._values: deque[float | None] = deque(maxlen=keep)

    def record(self, cp: ControlPlane) -> None:
        t, value = cp.now(), measured_utilisation(cp)
        if self._times and self._times[-1] >= t:  # the clock stood still: the newest reading wins
            self._values[-1] = value
        else:
            self._times.append(t)
            self._values.append(value)

    def at(self, instants: list[float]) -> list[float | None]:
        """The latest sample at or before each instant (None before the first)."""
        times = list(self._times)
        return [self._values[k] if (k := bisect.bisect_right(times, t) - 1) >= 0 else None for t in instants]


def timeline_view(cp: ControlPlane, timeline: Timeline, measured: MeasuredSeries,
                  window_s: float | None = None) -> dict[str, Any]:
    """The chart's samples over the last ``window_s`` cluster seconds (None: the cluster's age, within
    [MIN_WINDOW_S, DEFAULT_WINDOW_S]; ``window_s`` in the answer says which)."""
    if window_s is not None and not 0 < window_s <= MAX_WINDOW_S:
        raise ValidationError(f"must be in (0, {MAX_WINDOW_S:g}] seconds", field="window_s")
    timeline.update(cp.core.log.since(timeline.cursor))
    measured.record(cp)
    end = cp.now()
    if window_s is None:
        first = timeline.first_time
        window_s = DEFAULT_WINDOW_S if first is None else min(DEFAULT_WINDOW_S, max(MIN_WINDOW_S, end - first))
    samples = timeline.sample(end - window_s, end)
    instants = [p.time for p in samples]
    return {"total_gpus": cp.cluster.total_gpus, "start": end - window_s, "end": end, "window_s": window_s,
            "time": instants, "gpus_busy": [p.gpus_busy for p in samples],
            "pending": [p.pending for p in samples], "running": [p.running for p in samples],
            "measured": measured.at(instants)}
