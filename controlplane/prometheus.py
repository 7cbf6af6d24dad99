"""The control plane's Prometheus metrics and its health checks (calls are counted by :mod:`calls`).

Everything lives in one :class:`Metrics` object with a registry of its own (no
global state). Job counters and histograms are derived from the event log, the
record every state change already goes through, at scrape time: a scrape
reads the events appended since the previous one. Counting starts at the log's
end when the server starts, so a restart resets the counters (as Prometheus
expects of a new process) instead of counting the restored history again.

(``metrics.py`` beside this holds the run summaries of ``simulate`` and
``replay``; those are not Prometheus metrics.)
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from halyard.controlplane.calls import CallWrapper
from halyard.controlplane.dashboard import measured_utilisation
from halyard.controlplane.service import ControlPlane
from halyard.datamodel import EventKind
from halyard.policies import WaitCode
from halyard.scheduling.core import SchedulingCore
from halyard.scheduling.eventcounts import EVENT_COUNTS
from halyard.scheduling.state import StoreError

MAX_TENANT_LABELS = 32  # distinct tenants that get a label value of their own; later ones share OTHER_TENANT
OTHER_TENANT = "_other"
# Cluster seconds. JCTs of DL training jobs run from minutes to weeks (Philly, Helios).
JCT_BUCKETS = (60, 300, 900, 1800, 3600, 2 * 3600, 4 * 3600, 8 * 3600, 12 * 3600, 86400, 2 * 86400, 4 * 86400,
               7 * 86400, 14 * 86400)
QUEUE_BUCKETS = (0, 1, 10, 60, 300, 900, 1800, 3600, 2 * 3600, 4 * 3600, 8 * 3600, 86400, 2 * 86400)
PASS_BUCKETS = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0)
COMMIT_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)  # submissions per group commit
FINAL_KINDS = (EventKind.COMPLETED, EventKind.FAILED, EventKind.CANCELLED)


class BoundedLabels:
    """Label values from an open set (tenants) kept to a bounded number of series.

    The first ``limit`` distinct values keep their name; every later one is
    reported as ``other``, so a client inventing tenants cannot grow the
    number of time series without bound.
    """

    def __init__(self, limit: int = MAX_TENANT_LABELS, other: str = OTHER_TENANT) -> None:
        self.limit = limit
        self.other = other
        self._seen: set[str] = set()

    def __call__(self, value: str) -> str:
        if value in self._seen:
            return value
        if len(self._seen) < self.limit:
            self._seen.add(value)
            return value
        return self.other


class Metrics:
    """The metrics an operator scrapes from ``/metrics``, and ``/healthz``'s checks."""

    def __init__(self, cp: ControlPlane, *, tenant_labels: int = MAX_TENANT_LABELS) -> None:
        self.cp = cp
        self.registry = r = CollectorRegistry()
        core = cp.core
        Gauge("halyard_pending_jobs", "Jobs waiting for GPUs", registry=r).set_function(lambda: len(core.pending))
        Gauge("halyard_running_jobs", "Jobs holding GPUs", registry=r).set_function(lambda: len(core.running))
        Gauge("halyard_gpus_allocated", "GPUs held by running jobs", registry=r).set_function(
            lambda: cp.cluster.total_gpus - core.free.total_gpus)
        Gauge("halyard_gpus_total", "GPUs in the cluster", registry=r).set(cp.cluster.total_gpus)
        Gauge("halyard_agents_connected", "Agents with a live stream", registry=r).set_function(
            lambda: len(cp.sessions))
        Gauge("halyard_nodes_drained", "Nodes drained by an operator", registry=r).set_function(
            lambda: len(cp.drained))
        guard = cp.agents.guard
        Gauge("halyard_agents_silent", "Nodes whose agent was quiet for half the heartbeat timeout or more at "
              "the latest liveness check (what the lost-agent guard judges on)",
              registry=r).set_function(lambda: guard.silent)
        Gauge("halyard_agent_disruption", "0: lost agents are declared lost at once; 1: many are silent, they are "
              "declared lost at the secondary rate; 2: all are silent, none is (disruption.py)",
              registry=r).set_function(lambda: guard.state.value)
        Gauge("halyard_cluster_time_seconds", "Cluster time", registry=r).set_function(cp.now)
        waiting = Gauge("halyard_waiting_jobs", "Pending jobs by why they wait, after the last pass",
                        ["code"], registry=r)
        for code in WaitCode:
            waiting.labels(code=code.value).set_function(functools.partial(_waiting, core, code))
        Gauge("halyard_time_shift_drift_max_seconds",
              "Largest |drift| from its time-shift grid that agents last reported for a running job "
              "(Cassini section 4.4.2 step 3; 0 when none reports one)", registry=r).set_function(
            lambda: max((abs(rec.time_shift_drift_s or 0.0) for rec in core.running.values()), default=0.0))
        Gauge("halyard_healthy", "1 while /healthz passes (store readable, scheduling loop running)",
              registry=r).set_function(lambda: 0 if self.problems() else 1)
        self.pass_seconds = Histogram("halyard_pass_seconds", "Wall time of a scheduling pass", registry=r,
                                      buckets=PASS_BUCKETS)
        self.commit_jobs = Histogram("halyard_submit_commit_jobs", "Submissions stored by one group commit "
                                     "(one SQLite transaction and one pass)", registry=r, buckets=COMMIT_BUCKETS)
        self.rpcs = Counter("halyard_grpc_server_handled", "gRPC calls handled, by final status code",
                            ["service", "method", "code"], registry=r)
        self.finished = Counter("halyard_jobs_finished", "Jobs that reached a final state",
                                ["state", "tenant"], registry=r)
        self.submitted = Counter("halyard_jobs_submitted", "Jobs accepted", ["tenant"], registry=r)
        # Per-job counts of event kinds (preemptions, suspensions), as scheduling/eventcounts.py declares them.
        self.counts = {c.kind: Counter(f"halyard_{c.field}", c.help, ["tenant"], registry=r) for c in EVENT_COUNTS}
        self.jct = Histogram("halyard_job_completion_seconds", "JCT of completed jobs: completion - submit, "
                             "cluster seconds", buckets=JCT_BUCKETS, registry=r)
        self.queueing = Histogram("halyard_job_queueing_seconds", "Time completed jobs spent pending "
                                  "(every wait, preemptions included), cluster seconds", buckets=QUEUE_BUCKETS,
                                  registry=r)
        r.register(_AgentCollector(cp))
        self.tenant = BoundedLabels(tenant_labels)
        self._cursor = 0
        cp.on_pass = self.pass_seconds.observe
        cp.commits.on_commit = self.commit_jobs.observe

    def skip_history(self) -> None:
        """Count from the log's current end (call once the control plane restored its state)."""
        self._cursor = len(self.cp.core.log)

    def catch_up(self) -> None:
        """Fold the events appended since the last call into the job counters and histograms."""
        records = self.cp.core.records
        for event in self.cp.core.log.since(self._cursor):
            self._cursor = event.seq
            record = records.get(event.job_id)
            tenant = self.tenant(record.spec.tenant if record is not None else "")
            if event.kind is EventKind.SUBMITTED:
                self.submitted.labels(tenant).inc()
            elif event.kind in self.counts:
                self.counts[event.kind].labels(tenant).inc()
            elif event.kind in FINAL_KINDS:
                self.finished.labels(event.state.value, tenant).inc()
                if event.kind is EventKind.COMPLETED and record is not None:
                    self.jct.observe(event.time - record.spec.submit_time)
                    self.queueing.observe(record.queued_s)

    def render(self) -> bytes:
        """The text exposition format, after catching up with the event log."""
        self.catch_up()
        return generate_latest(self.registry)

    def problems(self) -> list[str]:
        """What makes the control plane unhealthy now; empty when healthy."""
        found = []
        try:
            self.cp.store.get_meta("schema_version")
        except StoreError as exc:
            found.append(f"store: {exc}")
        if (problem := self.cp.scheduler_problem()) is not None:
            found.append(f"scheduler: {problem}")
        return found

    def call_wrapper(self, checks_own_requests: Iterable[str] = ()) -> CallWrapper:
        """What wraps every gRPC method: counts each call in ``halyard_grpc_server_handled`` by its status."""
        return CallWrapper(self.rpcs, checks_own_requests)


def _waiting(core: SchedulingCore, code: WaitCode) -> int:
    """Pending jobs that wait for ``code`` after the last pass (a gauge's value, read at each scrape)."""
    return core.waiting.get(code, 0)


class _AgentCollector(Collector):
    """Per node, at scrape time: the GPU utilisation its agent measured in its latest heartbeat."""

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        per_node = GaugeMetricFamily("halyard_node_gpu_utilization",
                                     "GPU utilisation (0..1) the node's agent measured in its latest heartbeat",
                                     labels=["node"])
        unhealthy = GaugeMetricFamily("halyard_agents_unhealthy", "Connected agents whose heartbeat says unhealthy")
        cluster = GaugeMetricFamily("halyard_gpu_utilization_measured",
                                    "GPU-weighted mean of the measured utilisation of nodes with a connected agent")
        bad = 0
        for name, session in list(self.cp.sessions.items()):
            if session.heartbeat is not None:
                per_node.add_metric([name], session.heartbeat.gpu_utilization)
                bad += not session.heartbeat.healthy
        unhealthy.add_metric([], bad)
        cluster.add_metric([], measured_utilisation(self.cp) or 0.0)
        yield per_node
        yield unhealthy
        yield cluster
        yield CounterMetricFamily("halyard_agent_quiet_streams", "Agent streams that went half the heartbeat "
                                  "timeout or more without a processed message since their Registered (each "
                                  "stream once): a busy control plane, or a slow agent",
                                  value=self.cp.agents.quiet_streams)
        unknown = CounterMetricFamily("halyard_unknown_enum", "Enum values peers sent that this control plane "
                                      "does not know, read as the default docs/api.md names",
                                      labels=["message", "field"])
        for (message, field), count in sorted(self.cp.unknown_enums.counts.items()):
            unknown.add_metric([message, field], count)
        yield unknown
        refused = CounterMetricFamily("halyard_agent_reports_refused", "Agent messages refused as out of range "
                                      "(their content is not kept), by the field named", labels=["field"])
        for field, count in sorted(self.cp.agents.refused_reports.items()):
            refused.add_metric([field], count)
        yield refused
