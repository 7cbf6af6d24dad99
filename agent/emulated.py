"""The emulated node agent: runs launched jobs on the shared performance model.

It speaks exactly the protocol a real agent speaks (one ``AgentService.Connect``
stream), so the control plane cannot tell the difference. A job's timeline is
computed, not ticked: from its start time, restore time and the model's
iteration time the agent knows when it will finish and sleeps on the agreed
clock until then. Only the job's leader (its first node) reports progress and
the exit; the others hold their GPUs and let go at the same instant.

The stream, reconnection and the delivery of exits that happen while the
stream is down are shared with the real backends (:mod:`halyard.agent.base`).
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Unpack

from halyard.agent.base import StreamAgent, StreamOptions
from halyard.agent.cluster_copy import ClusterCopy
from halyard.agent.profiling import model_for, model_profiling
from halyard.clock import Clock
from halyard.datamodel import Allocation, JobSpec, Node
from halyard.emulator import PerformanceModel
from halyard.timeshift import drift_s, grid_at_or_after, paced_iteration_s
from halyard.tls import ClientTLS
from halyard.v1 import agent_service_pb2 as apb
from halyard.wire import allocation_from_pb, spec_from_pb

__all__ = ["VERSION", "EmulatedAgent", "EmulatedJob"]

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
    link_slowdown: float = 1.0  # the emulated fabric's contention, as the control plane computed it
    task: asyncio.Task[None] | None = None

    def iterations_at(self, t: float) -> float:
        running = t - (self.start + self.restore_s)
        return self.done if running <= 0 else min(float(self.total), self.done + running / self.iteration_s)

    @property
    def finish(self) -> float:
        return self.start + self.restore_s + (self.total - self.done) * self.iteration_s

    def drift_at(self, t: float) -> float | None:
        """With a time-shift: the offset of the iteration under way at ``t`` from its grid point
        (the shift's period, else the job's own iteration); None without a shift or before it runs."""
        a = self.allocation
        begun = self.start + self.restore_s
        if not a.has_time_shift or t < begun:
            return None
        k = math.floor((t - begun) / self.iteration_s)
        return drift_s(begun + k * self.iteration_s, a.time_shift_epoch_s + a.time_shift_s,
                       a.time_shift_period_s or self.iteration_s)


class EmulatedAgent(StreamAgent):
    backend = "emulated"
    version = VERSION

    def __init__(self, target: str, node: Node | str, *, shared_clock: Clock | None = None,
                 perf: PerformanceModel | None = None, tls: ClientTLS | None = None,
                 cluster: ClusterCopy | None = None, **stream: Unpack[StreamOptions]) -> None:
        super().__init__(target, node, shared_clock=shared_clock, tls=tls, cluster=cluster, **stream)
        self.perf = perf or PerformanceModel()
        self.jobs: dict[str, EmulatedJob] = {}
        # What the next heartbeats report about the node's health: (healthy, detail). An emulated
        # node is healthy unless a test kit injects a fault (TestCluster.set_health).
        self.health: tuple[bool, str] = (True, "")

    def _on_registered(self, registered: apb.Registered) -> None:
        super()._on_registered(registered)
        self.perf = model_for(registered, self.perf)  # compute what the control plane computes

    def on_profile(self, profile: apb.Profile) -> None:
        """A stage profiling (Crius §5.1) answered from the model this agent runs its jobs on."""
        self.send(apb.AgentMessage(profile_result=model_profiling(self.perf, self.cluster, self.node_name,
                                                                  self.backend, profile)), keep=False)

    async def stop_jobs(self) -> None:
        for job in self.jobs.values():
            if job.task is not None:
                job.task.cancel()
        self.jobs.clear()

    # --- reports ------------------------------------------------------------------

    def running_jobs(self) -> list[apb.RunningJob]:
        return [apb.RunningJob(job_id=j.job_id, attempt=j.attempt, leader=j.leader,
                               iterations_done=j.iterations_at(self.clock.now()) if self.clock else j.done)
                for j in self.jobs.values()]

    def heartbeat(self, now: float) -> apb.Heartbeat:
        busy = sum(len(p.gpus) for j in self.jobs.values() for p in j.allocation.nodes if p.node == self.node_name)
        total = self.registered_cluster().node(self.node_name).gpus
        healthy, detail = self.health
        # A launch can reach the agent before the preemption of the job it replaces ends, so the held
        # GPUs may briefly count twice; a share above 1 is refused by the control plane's report checks.
        return apb.Heartbeat(cluster_time=now, gpu_utilization=min(busy, total) / total if total else 0.0,
                             healthy=healthy,
                             detail=detail)

    def progress_reports(self, now: float) -> list[apb.Progress]:
        return [apb.Progress(job_id=job.job_id, attempt=job.attempt, iterations_done=job.iterations_at(now),
                             cluster_time=now, recent_iteration_s=[job.iteration_s],
                             time_shift_drift_s=job.drift_at(now))
                for job in self.jobs.values() if job.leader]

    # --- commands ---------------------------------------------------------------

    def on_launch(self, body: apb.Launch) -> None:
        self._run(body.job_id, body.attempt, body.spec, body.allocation, body.leader, body.iterations_total,
                  body.iterations_done, body.start_time, body.restore_s, link_slowdown=body.link_slowdown,
                  align=True)

    def on_preempt(self, body: apb.Preempt) -> None:
        self._stop(body.job_id, body.attempt)

    def on_reconfigure(self, body: apb.Reconfigure) -> None:
        job = self.jobs.get(body.job_id)
        if job is not None and job.attempt == body.attempt:
            # restart_attempt: a resize or migration, which goes on as the next attempt from
            # the checkpoint (the control plane's iterations_done and restore_s say where and when).
            self._run(job.job_id, body.restart_attempt or job.attempt, None, body.allocation, body.leader,
                      body.iterations_total or job.total, body.iterations_done, body.start_time, body.restore_s,
                      spec=job.spec, link_slowdown=body.link_slowdown)

    def on_set_time_shift(self, body: apb.SetTimeShift) -> None:
        """Re-phase the job on the grid ``epoch + seconds + k x period`` (0 s is a shift): with a
        period its next iteration starts on the next grid point, as the worker library's would."""
        job = self.jobs.get(body.job_id)
        if job is not None and job.attempt == body.attempt:
            now = self.registered_clock().now()
            allocation = job.allocation.with_time_shift(body.seconds, body.period_s, body.epoch_s)
            restore = max(0.0, job.start + job.restore_s - now)
            self._run(job.job_id, job.attempt, None, None, job.leader, job.total, job.iterations_at(now),
                      now, restore, spec=job.spec, allocation=allocation, link_slowdown=job.link_slowdown,
                      align=True)

    def _run(self, job_id: str, attempt: int, spec_pb, allocation_pb, leader: bool, total: int, done: float,
             start: float, restore_s: float, *, spec: JobSpec | None = None, allocation: Allocation | None = None,
             link_slowdown: float = 1.0, align: bool = False) -> None:
        old = self.jobs.pop(job_id, None)
        if old is not None and old.task is not None:
            old.task.cancel()
        spec = spec or spec_from_pb(spec_pb, submit_time=0.0)
        cluster = self.registered_cluster()
        allocation = allocation or allocation_from_pb(allocation_pb, cluster)
        slowdown = max(1.0, link_slowdown)  # 0: an older control plane that does not say
        step = self.perf.job_timing(spec, allocation, cluster).iteration.total_s * slowdown
        period = allocation.time_shift_period_s
        if allocation.has_time_shift and period > 0.0:  # iterations start on the grid (halyard.timeshift)
            step = paced_iteration_s(step, period)
            if align:  # the first one waits for the next grid point (the control plane's pacer does the same)
                anchor = allocation.time_shift_epoch_s + allocation.time_shift_s
                restore_s = grid_at_or_after(start + restore_s, anchor, period) - start
        job = EmulatedJob(job_id, attempt, spec, allocation, leader, total, done, start, restore_s, step, slowdown)
        job.task = asyncio.create_task(self._finish(job), name=f"job {job_id}@{self.node_name}")
        self.jobs[job_id] = job

    async def _finish(self, job: EmulatedJob) -> None:
        await self.registered_clock().sleep_until(job.finish)
        if self.jobs.get(job.job_id) is job:
            del self.jobs[job.job_id]
            if job.leader:
                self._send(apb.AgentMessage(exited=apb.Exited(
                    job_id=job.job_id, attempt=job.attempt, status=apb.EXIT_COMPLETED, cluster_time=job.finish,
                    checkpoint_iteration=job.total)), keep=True)
            else:
                self.part_finished(job.job_id, job.attempt, job.total)

    def _stop(self, job_id: str, attempt: int) -> None:
        job = self.jobs.get(job_id)
        if job is None or job.attempt != attempt:
            return
        del self.jobs[job_id]
        if job.task is not None:
            job.task.cancel()
        if job.leader:
            now = self.registered_clock().now()
            self._send(apb.AgentMessage(exited=apb.Exited(
                job_id=job_id, attempt=attempt, status=apb.EXIT_PREEMPTED, cluster_time=now,
                checkpoint_iteration=math.floor(job.iterations_at(now) + 1e-9))), keep=False)

