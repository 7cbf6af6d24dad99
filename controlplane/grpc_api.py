"""gRPC servicers: requests in, :class:`ControlPlane` calls, replies out.

Every request is validated before anything changes; errors map to status
codes in one place (:func:`_status`): bad input -> INVALID_ARGUMENT naming the
field, unknown ids -> NOT_FOUND, duplicates -> ALREADY_EXISTS, wrong state ->
FAILED_PRECONDITION. No stack trace ever reaches a client.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

import grpc
import structlog

from halyard.controlplane import forecast_api, logs
from halyard.controlplane.auth import Authenticator
from halyard.controlplane.calls import Undecodable, refuse_undecodable
from halyard.controlplane.errors import (
    AlreadyExists,
    FailedPrecondition,
    NotFound,
    PermissionDenied,
    TooManyFailures,
    Unauthenticated,
    Unavailable,
)
from halyard.controlplane.forecast import Forecaster
from halyard.controlplane.logs import LogRelay
from halyard.controlplane.service import ControlPlane
from halyard.datamodel import HalyardError, JobState, ValidationError
from halyard.datamodel import limits as lim
from halyard.policies import Unplaced
from halyard.scheduling.records import JobRecord
from halyard.scheduling.state import StoreError
from halyard.tls import ROLE_TENANT_USER, Principal
from halyard.v1 import agent_service_pb2 as apb
from halyard.v1 import agent_service_pb2_grpc as agrpc
from halyard.v1 import cluster_service_pb2 as cpb
from halyard.v1 import cluster_service_pb2_grpc as cgrpc
from halyard.v1 import job_service_pb2 as jpb
from halyard.v1 import job_service_pb2_grpc as jgrpc
from halyard.v1 import types_pb2 as tpb
from halyard.wire import allocation_to_pb, event_to_pb, node_to_pb, spec_from_pb, spec_to_pb, state_from_pb, state_to_pb

log = structlog.get_logger("halyard.grpc")

MAX_PAGE = 1000
DEFAULT_PAGE = 100
WATCH_POLL_S = 1.0  # how often an idle WatchEvents stream re-checks it is still wanted

T = TypeVar("T")


def _status(exc: HalyardError) -> grpc.StatusCode:
    if isinstance(exc, StoreError | Unavailable):
        return grpc.StatusCode.UNAVAILABLE  # the state could not be saved: the control plane restarts; retry
    if isinstance(exc, TooManyFailures):
        return grpc.StatusCode.RESOURCE_EXHAUSTED
    if isinstance(exc, Unauthenticated):
        return grpc.StatusCode.UNAUTHENTICATED
    if isinstance(exc, PermissionDenied):
        return grpc.StatusCode.PERMISSION_DENIED
    if isinstance(exc, NotFound):
        return grpc.StatusCode.NOT_FOUND
    if isinstance(exc, AlreadyExists):
        return grpc.StatusCode.ALREADY_EXISTS
    if isinstance(exc, FailedPrecondition):
        return grpc.StatusCode.FAILED_PRECONDITION
    return grpc.StatusCode.INVALID_ARGUMENT


async def _call(context: grpc.aio.ServicerContext, name: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except HalyardError as exc:
        await context.abort(_status(exc), str(exc))
        raise  # unreachable: abort raises
    except Exception:  # a bug of ours: logged with its trace, never sent to the client
        log.exception("request failed", method=name)
        await context.abort(grpc.StatusCode.INTERNAL, f"{name} failed inside the control plane (logged)")
        raise


def _raise(exc: Exception) -> None:
    raise exc


async def _durable(context: grpc.aio.ServicerContext, cp: ControlPlane) -> None:
    """Wait for the group commit that stores this call's changes; UNAVAILABLE if it failed."""
    try:
        await cp.committed()
    except HalyardError as exc:
        await context.abort(_status(exc), str(exc))


FOREIGN_JOB = "a job of another tenant"  # what a tenant's user reads where a reason names such a job
Foreign = Callable[[object], bool]


def foreign_jobs(cp: ControlPlane, tenant: str | None) -> Foreign | None:
    """For a caller who may see only ``tenant``'s jobs: whether a value is the id of another
    tenant's job (None: the caller sees every tenant)."""
    if tenant is None:
        return None
    records = cp.core.records

    def foreign(value: object) -> bool:
        record = records.get(value) if isinstance(value, str) else None
        return record is not None and record.spec.tenant != tenant
    return foreign


def wait_reason(wait: Unplaced, foreign: Foreign | None = None) -> str:
    """Why a job waits, with any other tenant's job a reason names (e.g. FIFO's "behind J") left unnamed."""
    if foreign is None or not any(map(foreign, wait.args)):
        return wait.reason
    return wait.template.format(*(FOREIGN_JOB if foreign(a) else a for a in wait.args))


def job_to_pb(record: JobRecord, now: float, wait: Unplaced | None = None, ignored: str = "",
              foreign: Foreign | None = None) -> jpb.Job:
    """The Job message of ``record`` at ``now``; ``wait`` is why it waits (SchedulingCore.wait_of),
    ``ignored`` what of its spec the policy does not act on (SchedulingCore.ignored_fields),
    ``foreign`` which job ids the caller may not see (:func:`foreign_jobs`).

    Every Job a client, the dashboard or a log receives is made here, so here the environment's
    values are dropped: ``env_names`` lists the names, ``spec.env`` is empty. Only a Launch, to
    the agent that runs the job, carries the values (docs/security.md)."""
    spec = spec_to_pb(record.spec)
    spec.ClearField("env")
    job = jpb.Job(spec=spec, state=state_to_pb(record.state), env_names=sorted(record.spec.env),
                  iterations_done=record.iterations_done(now), iterations_total=record.iterations_total,
                  submit_time=record.spec.submit_time, preemptions=record.preemptions, suspensions=record.suspensions,
                  queued_s=record.queued_s)
    if record.allocation is not None and not record.state.terminal:
        job.allocation.CopyFrom(allocation_to_pb(record.allocation))
    if record.first_start is not None:
        job.start_time = record.first_start
    if record.end_time is not None:
        job.end_time = record.end_time
    if ignored:
        job.ignored = ignored
    if record.end_reason:
        job.end_reason = record.end_reason
    if record.time_shift_drift_s is not None and record.state is JobState.RUNNING:
        job.time_shift_drift_s = record.time_shift_drift_s
    if wait is not None:
        job.wait.CopyFrom(jpb.WaitReason(code=jpb.WaitCode.Value(wait.code.value), stage=wait.stage,
                                         reason=wait_reason(wait, foreign)))
    return job


def _tenant_of(who: Principal) -> str | None:
    """The one tenant the caller may see (None: every tenant)."""
    return who.tenant if who.role == ROLE_TENANT_USER else None


def _check_tenant(who: Principal, record: JobRecord) -> JobRecord:
    tenant = _tenant_of(who)
    if tenant is not None and record.spec.tenant != tenant:
        raise PermissionDenied(f"job {record.job_id!r} belongs to another tenant; {who.describe()} may see and "
                               f"cancel only tenant {tenant!r}'s jobs")
    return record


def _as_caller(spec: tpb.JobSpec, who: Principal) -> tpb.JobSpec:
    """The spec a caller may submit: a tenant's user submits into its own tenant, under its own name."""
    tenant = _tenant_of(who)
    if tenant is None:
        return spec
    if spec.tenant and spec.tenant != tenant:
        raise PermissionDenied(f"field 'spec.tenant': {who.describe()} submits into its own tenant, "
                               f"not {spec.tenant[:lim.MAX_TENANT]!r}")
    mine = tpb.JobSpec()
    mine.CopyFrom(spec)
    mine.tenant, mine.user = tenant, who.name
    return mine


class JobServicer(jgrpc.JobServiceServicer):
    def __init__(self, cp: ControlPlane, auth: Authenticator | None = None, logs: LogRelay | None = None,
                 forecasts: Forecaster | None = None) -> None:
        self.cp = cp
        self.forecasts = forecasts  # Job.forecast (docs/forecast.md); None: forecasts off
        self.auth = auth or Authenticator(secure=False)
        self.logs = logs or LogRelay(cp)

    async def SubmitJob(self, request: jpb.SubmitJobRequest, context: grpc.aio.ServicerContext) -> jpb.Job:
        cp = self.cp
        try:  # checked first: only a valid caller's spec is admitted (profiled, or in lockstep waits)
            who = await _call(context, "SubmitJob", lambda: self._checked(request, self.auth.client(context)))
            arrival = await cp.admit(request.spec, request.submit_time if request.HasField("submit_time") else None)
            job = await _call(context, "SubmitJob", lambda: self._submit(request, who, arrival))
        except grpc.aio.AbortError:
            if context.code() != grpc.StatusCode.UNAVAILABLE:  # final; an UNAVAILABLE call is retried
                cp.submit_refused()  # lockstep: its instant still gets its pass
            raise
        await _durable(context, cp)  # answered only once stored: it survives a kill -9 from here on
        return job

    async def SubmitJobs(self, request: jpb.SubmitJobsRequest,
                         context: grpc.aio.ServicerContext) -> jpb.SubmitJobsResponse:
        """SubmitJob for each job, in order, each with its own result; one group commit holds them all
        (the caller is checked once; each job is admitted as SubmitJob's: in lockstep it waits for earlier
        completions)."""
        try:
            who = await _call(context, "SubmitJobs", lambda: self.auth.client(context))
            if len(request.jobs) > lim.MAX_SUBMIT_BATCH:
                await _call(context, "SubmitJobs", lambda: _raise(ValidationError(
                    f"holds {len(request.jobs)} jobs; at most {lim.MAX_SUBMIT_BATCH} per call", field="jobs")))
        except grpc.aio.AbortError:
            if context.code() != grpc.StatusCode.UNAVAILABLE:  # as SubmitJob's: a final refusal
                self.cp.submit_refused()
            raise
        out = jpb.SubmitJobsResponse()
        # Crius §6.1: the batch's Cells profiled at once, not one job after another (admit then finds them).
        await self.cp.prepare_profiles(*(one.spec for one in request.jobs if one.HasField("spec")))
        for i, one in enumerate(request.jobs):
            result = out.results.add()
            try:
                self._checked(one, who, f"jobs[{i}].")
                arrival = await self.cp.admit(one.spec, one.submit_time if one.HasField("submit_time") else None)
                result.job.CopyFrom(self._submit(one, who, arrival, f"jobs[{i}]."))
            except HalyardError as exc:
                result.error.code, result.error.message = _status(exc).value[0], f"jobs[{i}]: {exc}"
            except Exception:  # a bug of ours: logged with its trace, never sent to the client
                log.exception("request failed", method="SubmitJobs", index=i)
                result.error.code = grpc.StatusCode.INTERNAL.value[0]
                result.error.message = f"jobs[{i}]: SubmitJobs failed inside the control plane (logged)"
            if result.HasField("error") and result.error.code != grpc.StatusCode.UNAVAILABLE.value[0]:
                self.cp.submit_refused()  # lockstep, as SubmitJob's: a refused last arrival still gets its pass
        await _durable(context, self.cp)  # every accepted job is stored before the answer
        return out

    @staticmethod
    def _checked(request: jpb.SubmitJobRequest, who: Principal, prefix: str = "") -> Principal:
        """``who``, once the request's own fields are in range (before any lockstep wait)."""
        if request.HasField("submit_time"):
            lim.check_seconds(request.submit_time, f"{prefix}submit_time", lim.MAX_TIME_S)
        if not request.HasField("spec"):
            raise ValidationError("is required", field=f"{prefix}spec")
        return who

    def _submit(self, request: jpb.SubmitJobRequest, who: Principal, arrival: float, prefix: str = "") -> jpb.Job:
        """Submit one checked request arriving at ``arrival``: the Job to answer (stored only once
        :meth:`ControlPlane.committed` returns)."""
        self.cp.check_writable()
        # Stamped when it arrived, not after the lockstep wait (never before the last pass).
        now = max(arrival, self.cp.last_pass_time)
        record = self.cp.submit(spec_from_pb(_as_caller(request.spec, who), submit_time=now,
                                             prefix=f"{prefix}spec"))
        return job_to_pb(record, now, self.cp.core.wait_of(record), self.cp.core.ignored_fields(record.spec),
                         foreign_jobs(self.cp, _tenant_of(who)))

    async def GetJob(self, request: jpb.GetJobRequest, context: grpc.aio.ServicerContext) -> jpb.Job:
        def get() -> jpb.Job:
            who = self.auth.client(context)
            record = _check_tenant(who, self.cp.job(_job_id(request.job_id)))
            return forecast_api.attach_forecast(job_to_pb(record, self.cp.now(), self.cp.core.wait_of(record),
                                                          foreign=foreign_jobs(self.cp, _tenant_of(who))),
                                                self.forecasts)
        return await _call(context, "GetJob", get)

    async def CancelJob(self, request: jpb.CancelJobRequest, context: grpc.aio.ServicerContext) -> jpb.Job:
        def cancel() -> jpb.Job:
            who = self.auth.client(context)
            job_id = _check_tenant(who, self.cp.job(_job_id(request.job_id))).job_id
            record = self.cp.cancel(job_id)
            log.info("job cancelled", job=job_id, by=who.describe())
            return job_to_pb(record, self.cp.now())
        return await _call(context, "CancelJob", cancel)

    async def ListJobs(self, request: jpb.ListJobsRequest, context: grpc.aio.ServicerContext) -> jpb.ListJobsResponse:
        def page() -> jpb.ListJobsResponse:
            who = self.auth.client(context)
            tenant = _tenant_of(who)
            if tenant is not None and request.tenant and request.tenant != tenant:
                raise PermissionDenied(f"field 'tenant': {who.describe()} may list only tenant {tenant!r}'s jobs")
            tenant = tenant or request.tenant
            size = request.page_size or DEFAULT_PAGE
            if size > MAX_PAGE:
                raise ValidationError(f"must be <= {MAX_PAGE}", field="page_size")
            token = request.page_token
            if token and not (len(token) <= lim.MAX_PAGE_TOKEN and token.isascii() and token.isdigit()):
                raise ValidationError("not a token this server issued", field="page_token")
            start = int(token or 0)
            if start > len(self.cp.core.records):
                raise ValidationError("not a token this server issued", field="page_token")
            # A state newer than this control plane (docs/api.md, "Unknown enum values") matches no job here.
            states = {state_from_pb(s, "states") for s in request.states
                      if self.cp.unknown_enums.read(tpb.JobState, s, message="ListJobsRequest", field="states",
                                                    default=None, peer=context.peer()) is not None}
            records = list(self.cp.core.records.values())  # arrival order
            now, out, i = self.cp.now(), jpb.ListJobsResponse(), start
            foreign = foreign_jobs(self.cp, _tenant_of(who))
            while i < len(records) and len(out.jobs) < size:
                r = records[i]
                i += 1
                if (not request.states or r.state in states) and (not tenant or r.spec.tenant == tenant):
                    out.jobs.append(forecast_api.attach_forecast(job_to_pb(r, now, self.cp.core.wait_of(r),
                                                                           foreign=foreign), self.forecasts))
            out.next_page_token = str(i) if i < len(records) else ""
            return out
        return await _call(context, "ListJobs", page)

    async def WatchEvents(self, request: jpb.WatchEventsRequest,
                          context: grpc.aio.ServicerContext) -> AsyncIterator[tpb.JobEvent]:
        who = await _call(context, "WatchEvents", lambda: self.auth.client(context))
        tenant = _tenant_of(who)
        if request.job_id:
            await _call(context, "WatchEvents", lambda: _job_id(request.job_id))
            if tenant is not None and request.job_id in self.cp.core.records:
                await _call(context, "WatchEvents",
                            lambda: _check_tenant(who, self.cp.core.records[request.job_id]))
        records = self.cp.core.records
        seq = request.after_seq
        while True:
            for event in self.cp.core.log.since(seq):
                seq = event.seq
                if request.job_id and event.job_id != request.job_id:
                    continue
                if tenant is not None and records[event.job_id].spec.tenant != tenant:
                    continue
                yield event_to_pb(event)
            await self.cp.wait_events(seq, WATCH_POLL_S)


    async def StreamLogs(self, request: jpb.StreamLogsRequest,
                         context: grpc.aio.ServicerContext) -> AsyncIterator[jpb.LogChunk]:
        def check() -> tuple[JobRecord, int]:
            who = self.auth.client(context)
            record = _check_tenant(who, self.cp.job(_job_id(request.job_id)))
            return record, logs.resolve(record, request, self.cp.core.wait_of(record))
        record, attempt = await _call(context, "StreamLogs", check)
        try:
            async for chunk in logs.stream_logs(self.logs, record, attempt, request):
                yield chunk
        except HalyardError as exc:
            await context.abort(_status(exc), str(exc))


class ClusterServicer(cgrpc.ClusterServiceServicer):
    def __init__(self, cp: ControlPlane, auth: Authenticator | None = None,
                 forecasts: Forecaster | None = None) -> None:
        self.cp = cp
        self.forecasts = forecasts  # WhatIf (docs/forecast.md); None: forecasts off
        self.auth = auth or Authenticator(secure=False)

    def _node(self, name: str) -> cpb.NodeStatus:
        node = self.cp.cluster.node(name)
        free = self.cp.core.free
        status = cpb.NodeStatus(spec=node_to_pb(node), connected=name in self.cp.sessions,
                                drained=name in self.cp.drained, free_gpus=int(free.gpus[node.index]),
                                free_cpus=int(free.cpus[node.index]), free_memory_mb=int(free.memory_mb[node.index]),
                                drain_reason=self.cp.drain_reasons.get(name, ""))
        session = self.cp.sessions.get(name)
        if session is not None:
            status.backend = session.backend
        if session is not None and session.heartbeat is not None:
            status.gpu_utilization = session.heartbeat.gpu_utilization
        return status

    async def GetCluster(self, request: cpb.GetClusterRequest, context: grpc.aio.ServicerContext) -> cpb.ClusterStatus:
        def status() -> cpb.ClusterStatus:
            self.auth.client(context)
            core = self.cp.core
            return cpb.ClusterStatus(
                name=self.cp.cluster.name, nodes=[self._node(n.name) for n in self.cp.cluster.nodes],
                cluster_time=self.cp.now(), total_gpus=self.cp.cluster.total_gpus, free_gpus=core.free.total_gpus,
                pending_jobs=len(core.pending), running_jobs=len(core.running))
        return await _call(context, "GetCluster", status)

    async def DrainNode(self, request: cpb.NodeRequest, context: grpc.aio.ServicerContext) -> cpb.NodeStatus:
        def drain() -> cpb.NodeStatus:
            who = self.auth.operator(context, "drain a node")
            log.info("node drained", node=request.node[:lim.MAX_REQUEST_ID], by=who.describe())
            self.cp.set_drained(_node_name(request.node), True, _reason(request.reason))
            return self._node(request.node)
        return await _call(context, "DrainNode", drain)

    async def UndrainNode(self, request: cpb.NodeRequest, context: grpc.aio.ServicerContext) -> cpb.NodeStatus:
        def undrain() -> cpb.NodeStatus:
            who = self.auth.operator(context, "undrain a node")
            log.info("node undrained", node=request.node[:lim.MAX_REQUEST_ID], by=who.describe())
            self.cp.set_drained(_node_name(request.node), False)
            return self._node(request.node)
        return await _call(context, "UndrainNode", undrain)

    async def GetPolicy(self, request: cpb.GetPolicyRequest, context: grpc.aio.ServicerContext) -> cpb.PolicyInfo:
        def info() -> cpb.PolicyInfo:
            self.auth.client(context)
            policy = self.cp.core.policy
            stages = [cpb.PolicyStage(stage=kind, choice=choice) for kind, choice in policy.stages()]
            return cpb.PolicyInfo(name=policy.name, stages=stages, round_s=self.cp.round_s)
        return await _call(context, "GetPolicy", info)

    async def WhatIf(self, request: cpb.WhatIfRequest, context: grpc.aio.ServicerContext) -> cpb.WhatIfResponse:
        """Operators only: the forecast today and with the change, run on forks of the live state."""
        who = await _call(context, "WhatIf", lambda: self.auth.operator(context, "ask what-if"))
        log.info("what-if asked", by=who.describe())
        try:
            return await forecast_api.what_if(self.forecasts, request)
        except HalyardError as exc:
            await context.abort(_status(exc), str(exc))
            raise  # unreachable: abort raises


class AgentServicer(agrpc.AgentServiceServicer):
    """One bidirectional stream per agent: Register first, then messages both ways.

    Connect checks each request for :class:`Undecodable` itself (:data:`CHECKS_OWN_REQUESTS`):
    one isinstance per heartbeat instead of another async generator between gRPC and the stream."""

    def __init__(self, cp: ControlPlane, auth: Authenticator | None = None, logs: LogRelay | None = None) -> None:
        self.cp = cp
        self.auth = auth or Authenticator(secure=False)
        self.logs = logs or LogRelay(cp)

    async def Connect(self, request_iterator: AsyncIterator[apb.AgentMessage],
                      context: grpc.aio.ServicerContext) -> AsyncIterator[apb.ControlMessage]:
        try:
            who = self.auth.agent(context)
        except HalyardError as exc:
            log.warning("agent refused", peer=context.peer(), error=str(exc))
            await context.abort(_status(exc), str(exc))
        first = await anext(aiter(request_iterator), None)
        await refuse_undecodable(context, first)  # this stream checks its own requests (calls.CallWrapper)
        if first is None or first.WhichOneof("body") != "register":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                "field 'register': the first message must be Register")
        try:
            session, registered = self.cp.agents.register(first.register, who, peer=context.peer())
        except HalyardError as exc:
            await context.abort(_status(exc), str(exc))
        reader = asyncio.create_task(self._read(session, request_iterator, context))
        getter: asyncio.Task[apb.ControlMessage] | None = None
        try:
            yield apb.ControlMessage(registered=registered)
            self.cp.agents.registered(session)
            while not session.closed:
                getter = asyncio.create_task(session.outbox.get())
                done, _ = await asyncio.wait({getter, reader}, return_when=asyncio.FIRST_COMPLETED)
                if getter not in done:
                    break
                yield getter.result()
        finally:
            for task in (getter, reader):
                if task is not None:
                    task.cancel()
            self.cp.agents.gone(session)

    async def _read(self, session, request_iterator: AsyncIterator[apb.AgentMessage],
                    context: grpc.aio.ServicerContext) -> None:
        async for msg in request_iterator:
            if session.closed:
                return
            if isinstance(msg, Undecodable):
                await refuse_undecodable(context, msg)
            if msg.WhichOneof("body") == "log_data":  # an answer to StreamLogs, not a change of state
                msg.log_data.error = lim.clean_text(msg.log_data.error, lim.MAX_AGENT_TEXT)  # shown to the client
                self.logs.deliver(session.node, msg.log_data)
                continue
            try:
                self.cp.agent_message(session, msg)
            except HalyardError as exc:
                self.cp.agents.refused(session, exc)
            except Exception:  # a bug of ours: said loudly, and the stream ends (the agent reconnects, reconciles)
                log.exception("agent message could not be applied; closing the stream", node=session.node,
                              kind=msg.WhichOneof("body"))
                raise


# Client-streaming methods whose servicer checks every request for a decode failure itself.
CHECKS_OWN_REQUESTS = ("/halyard.v1.AgentService/Connect",)


def _job_id(job_id: str) -> str:
    if not job_id:
        raise ValidationError("is required", field="job_id")
    if len(job_id) > lim.MAX_REQUEST_ID:
        raise ValidationError(f"is {len(job_id)} characters long; at most {lim.MAX_REQUEST_ID} allowed",
                              field="job_id")
    return job_id


def _reason(reason: str) -> str:
    if len(reason) > lim.MAX_DRAIN_REASON:
        raise ValidationError(f"is {len(reason)} characters long; at most {lim.MAX_DRAIN_REASON} allowed",
                              field="reason")
    return reason


def _node_name(node: str) -> str:
    if len(node) > lim.MAX_REQUEST_ID:
        raise ValidationError(f"is {len(node)} characters long; at most {lim.MAX_REQUEST_ID} allowed", field="node")
    return node
