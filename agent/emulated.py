"""The emulated node agent: runs launched jobs on the shared performance model.

It speaks exactly the protocol a real agent speaks (one ``AgentService.Connect``
stream), so the control plane cannot tell the difference. A job's timeline is
computed, not ticked: from its start time, restore time and the model's
iteration time the agent knows when it will finish and sleeps on the agreed
clock until then. Only the job's leader (its first node) reports progress and
the exit; the others hold their GPUs and let go at the same instant.

Completions that happen while the stream is down are kept and sent after the
next Register, so a control plane restart loses no exit; Register also lists
the jobs the agent runs so the control plane can reconcile.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import structlog

from halyard.clock import Clock, ClockParams, clock_from_params
from halyard.datamodel import Allocation, Cluster, JobSpec, Node, parse_cluster
from halyard.emulator import PerformanceModel
from halyard.v1 import agent_service_pb2 as apb
from halyard.v1 import agent_service_pb2_grpc as agrpc
from halyard.v1.types_pb2 import NodeSpec
from halyard.wire import allocation_from_pb, node_to_pb, spec_from_pb

log = structlog.get_logger("halyard.agent")

BACKOFF_START_S = 0.05
BACKOFF_MAX_S = 2.0
VERSION = "halyard-emulated/1"


@dataclass
class EmulatedJob:
    """One job's timeline on this node: ``done`` iterations at ``start``, progress from ``start + restore``."""

    job_id: str
    attempt: int
    spec: JobSpec
    allocation: Allocation
    leader: bool
    total: int
    done: float
    start: float
    restore_s: float
    iteration_s: float
    task: asyncio.Task[None] | None = None

    def iterations_at(self, t: float) -> float:
        running = t - (self.start + self.restore_s)
        return self.done if running <= 0 else min(float(self.total), self.done + running / self.iteration_s)

    @property
    def finish(self) -> float:
        return self.start + self.restore_s + (self.total - self.done) * self.iteration_s


class EmulatedAgent:
    def __init__(self, target: str, node: Node | str, *, shared_clock: Clock | None = None,
                 perf: PerformanceModel | None = None) -> None:
        self.target = target
        self.node_name = node if isinstance(node, str) else node.name
        self.node = None if isinstance(node, str) else node
        self.shared_clock = shared_clock
        self.perf = perf or PerformanceModel()
        self.jobs: dict[str, EmulatedJob] = {}
        self.clock: Clock | None = None
        self.cluster: Cluster | None = None
        self.connected = asyncio.Event()
        self._unsent: list[apb.AgentMessage] = []  # exits to deliver once connected
        self._outbox: asyncio.Queue[apb.AgentMessage | None] | None = None
        self._call: grpc.aio.StreamStreamCall | None = None
        self._runner: asyncio.Task[None] | None = None
        self._cluster_text = ""

    # --- lifecycle ----------------------------------------------------------

    def start(self) -> asyncio.Task[None]:
        self._runner = asyncio.create_task(self.run(), name=f"agent {self.node_name}")
        return self._runner

    async def stop(self) -> None:
        """Stop like a killed process would: the stream breaks, the jobs stop with it."""
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
        for job in self.jobs.values():
            if job.task is not None:
                job.task.cancel()
        self.jobs.clear()
        self.connected.clear()

    def break_stream(self) -> None:
        """Cut the current stream (a network fault); the agent reconnects and keeps its jobs."""
        if self._call is not None:
            self._call.cancel()

    async def run(self) -> None:
        backoff = BACKOFF_START_S
        while True:
            try:
                await self._session()
                backoff = BACKOFF_START_S
            except asyncio.CancelledError:
                if asyncio.current_task().cancelling():
                    raise  # the agent itself is stopping
                log.info("stream cut, reconnecting", node=self.node_name)  # only the call was cancelled
            except grpc.aio.AioRpcError as exc:
                if exc.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION):
                    log.error("control plane refused this agent", node=self.node_name, error=exc.details())
                    raise
                log.info("control plane unreachable, retrying", node=self.node_name, code=exc.code().name,
                         retry_s=backoff)
            finally:
                self.connected.clear()
                self._outbox = None
            await asyncio.sleep(backoff)
            backoff = min(BACKOFF_MAX_S, backoff * 2)

    # --- the stream -----------------------------------------------------------

    async def _session(self) -> None:
        outbox: asyncio.Queue[apb.AgentMessage | None] = asyncio.Queue()
        outbox.put_nowait(apb.AgentMessage(register=self._register()))
        async with grpc.aio.insecure_channel(self.target) as channel:
            call = agrpc.AgentServiceStub(channel).Connect(_drain(outbox))
            self._call = call
            heartbeat: asyncio.Task[None] | None = None
            try:
                async for msg in call:
                    kind = msg.WhichOneof("body")
                    if kind == "registered":
                        self._on_registered(msg.registered)
                        self._outbox = outbox
                        for report in self._unsent:
                            outbox.put_nowait(report)
                        self._unsent.clear()
                        heartbeat = asyncio.create_task(self._heartbeats(outbox, msg.registered.heartbeat_interval_s))
                        self.connected.set()
                    else:
                        self._handle(kind, getattr(msg, kind))
            finally:
                self._call = None
                self._outbox = None
                outbox.put_nowait(None)
                if heartbeat is not None:
                    heartbeat.cancel()

    def _register(self) -> apb.Register:
        node = node_to_pb(self.node) if self.node is not None else NodeSpec(name=self.node_name)
        running = [apb.RunningJob(job_id=j.job_id, attempt=j.attempt, leader=j.leader,
                                  iterations_done=j.iterations_at(self.clock.now()) if self.clock else j.done)
                   for j in self.jobs.values()]
        # Jobs that ended while the stream was down are still ours until their exit is delivered
        # (right after Registered); listing them keeps reconciliation from requeueing them.
        running += [apb.RunningJob(job_id=m.exited.job_id, attempt=m.exited.attempt, leader=True,
                                   iterations_done=m.exited.checkpoint_iteration) for m in self._unsent]
        return apb.Register(node=node, running=running, backend="emulated", version=VERSION)

    def _on_registered(self, registered: apb.Registered) -> None:
        if registered.cluster_toml != self._cluster_text:
            self.cluster = parse_cluster(registered.cluster_toml, source="<control plane>")
            self._cluster_text = registered.cluster_toml
        c = registered.clock
        params = ClockParams("manual" if c.kind == apb.MANUAL else "scaled", c.wall_origin_unix_s,
                             c.cluster_origin_s, c.speedup or 1.0)
        self.clock = clock_from_params(params, shared=self.shared_clock)

    async def _heartbeats(self, outbox: asyncio.Queue[apb.AgentMessage | None], interval: float) -> None:
        while True:
            now = self.clock.now()
            busy = sum(len(p.gpus) for j in self.jobs.values() for p in j.allocation.nodes if p.node == self.node_name)
            total = self.cluster.node(self.node_name).gpus
            outbox.put_nowait(apb.AgentMessage(heartbeat=apb.Heartbeat(
                cluster_time=now, gpu_utilization=busy / total if total else 0.0, healthy=True)))
            for job in self.jobs.values():
                if job.leader:
                    outbox.put_nowait(apb.AgentMessage(progress=apb.Progress(
                        job_id=job.job_id, attempt=job.attempt, iterations_done=job.iterations_at(now),
                        cluster_time=now, recent_iteration_s=[job.iteration_s])))
            await asyncio.sleep(interval)

    def _send(self, msg: apb.AgentMessage, *, keep: bool) -> None:
        if self._outbox is not None:
            self._outbox.put_nowait(msg)
        elif keep:
            self._unsent.append(msg)

    # --- commands ---------------------------------------------------------------

    def _handle(self, kind: str, body) -> None:
        if kind == "launch":
            self._run(body.job_id, body.attempt, body.spec, body.allocation, body.leader, body.iterations_total,
                      body.iterations_done, body.start_time, body.restore_s)
        elif kind == "preempt":
            self._stop(body.job_id, body.attempt)
        elif kind == "reconfigure":
            job = self.jobs.get(body.job_id)
            if job is not None and job.attempt == body.attempt:
                self._run(job.job_id, job.attempt, None, body.allocation, body.leader, job.total,
                          body.iterations_done, body.start_time, body.restore_s, spec=job.spec)
        elif kind == "set_time_shift":
            job = self.jobs.get(body.job_id)
            if job is not None and job.attempt == body.attempt:
                now = self.clock.now()
                allocation = Allocation(job.allocation.nodes, body.seconds, job.allocation.stages)
                restore = max(0.0, job.start + job.restore_s - now)
                self._run(job.job_id, job.attempt, None, None, job.leader, job.total, job.iterations_at(now),
                          now, restore, spec=job.spec, allocation=allocation)
        elif kind == "drain":
            log.info("node drained", node=self.node_name, reason=body.reason)

    def _run(self, job_id: str, attempt: int, spec_pb, allocation_pb, leader: bool, total: int, done: float,
             start: float, restore_s: float, *, spec: JobSpec | None = None, allocation: Allocation | None = None
             ) -> None:
        old = self.jobs.pop(job_id, None)
        if old is not None and old.task is not None:
            old.task.cancel()
        spec = spec or spec_from_pb(spec_pb, submit_time=0.0)
        allocation = allocation or allocation_from_pb(allocation_pb, self.cluster)
        step = self.perf.iteration_time(spec, allocation, self.cluster).total_s
        job = EmulatedJob(job_id, attempt, spec, allocation, leader, total, done, start, restore_s, step)
        job.task = asyncio.create_task(self._finish(job), name=f"job {job_id}@{self.node_name}")
        self.jobs[job_id] = job

    async def _finish(self, job: EmulatedJob) -> None:
        await self.clock.sleep_until(job.finish)
        if self.jobs.get(job.job_id) is job:
            del self.jobs[job.job_id]
            if job.leader:
                self._send(apb.AgentMessage(exited=apb.Exited(
                    job_id=job.job_id, attempt=job.attempt, status=apb.EXIT_COMPLETED, cluster_time=job.finish,
                    checkpoint_iteration=job.total)), keep=True)

    def _stop(self, job_id: str, attempt: int) -> None:
        job = self.jobs.get(job_id)
        if job is None or job.attempt != attempt:
            return
        del self.jobs[job_id]
        if job.task is not None:
            job.task.cancel()
        if job.leader:
            now = self.clock.now()
            self._send(apb.AgentMessage(exited=apb.Exited(
                job_id=job_id, attempt=attempt, status=apb.EXIT_PREEMPTED, cluster_time=now,
                checkpoint_iteration=math.floor(job.iterations_at(now) + 1e-9))), keep=False)


async def _drain(outbox: asyncio.Queue[apb.AgentMessage | None]) -> AsyncIterator[apb.AgentMessage]:
    while (msg := await outbox.get()) is not None:
        yield msg
