"""``halyard replay``: a trace through the real control plane, real gRPC and emulated agents.

The control plane runs with an accelerated clock (cluster time = ``speedup`` x
wall time); one emulated agent per node connects over its own gRPC channel (as
asyncio tasks here, or as separate ``halyard agent`` processes); a client
submits each job through JobService when the clock reaches its arrival time;
the run ends when every job has ended. The clock reads the trace's own time, as
the simulator's does (it starts a short lead before the first arrival, while the
agents register), so both drivers compute with the same instants. The summary
has the keys of ``halyard simulate`` plus ``speedup_achieved`` (cluster seconds
per wall second).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import structlog

from halyard.agent.cluster_copy import ClusterCopy
from halyard.agent.emulated import EmulatedAgent
from halyard.clock import ScaledClock
from halyard.controlplane.forecast import ForecastSettings
from halyard.controlplane.runtables import RunTables, TimelineRecorder, job_columns
from halyard.controlplane.server import ControlPlaneServer
from halyard.controlplane.service import ControlPlane, profiling_key
from halyard.controlplane.store import SqliteStore
from halyard.datamodel import Cluster, HalyardError, JobSpec
from halyard.emulator import Catalog
from halyard.policies import make_policy
from halyard.scheduling.core import SchedulingCore
from halyard.scheduling.metrics import summarize
from halyard.scheduling.simulator import Rejected
from halyard.scheduling.timing import performance_model_for
from halyard.v1 import job_service_pb2 as jpb
from halyard.v1 import job_service_pb2_grpc as jgrpc
from halyard.wire import spec_to_pb

AGENT_WAIT_S = 60.0  # wall seconds the agents get to register (processes start slowly on a busy machine)
START_MARGIN_WALL_S = 0.05  # between the last registration and the first arrival
# Wall seconds the agents first get to register before the trace's first arrival (a few rounds
# of registration on a busy 2-core machine); a replay whose agents come later starts again
# with LEAD_GROWTH times as long, up to AGENT_WAIT_S.
REGISTER_LEAD_WALL_S = 0.25
LEAD_GROWTH = 4.0
# Agent processes (``processes=True``) take a Python + gRPC start-up each, far above 0.25 s: their first
# lead is measured (:func:`_process_lead_s`), and an attempt whose agents came late is followed by one
# whose lead is this many times the registration time it measured (choices of ours).
LEAD_MARGIN = 1.5
SUBMIT_RETRY_S = 0.05
POLL_S = 0.02

log = structlog.get_logger("halyard.replay")

# replay(watch=...): a coroutine given the control plane's server and the replay's clock.
Watcher = Callable[[ControlPlaneServer, ScaledClock], Coroutine[Any, Any, None]]


async def replay(jobs: Sequence[JobSpec], cluster: Cluster, cluster_toml: str, *, policy: str, speedup: float,
                 processes: bool = False, db: str | Path = ":memory:", round_s: float = 300.0,
                 contention: str = "fair",
                 on_progress: Callable[[int, int, float], None] | None = None,
                 catalog: Catalog | None = None, forecast: ForecastSettings | None = None,
                 watch: Watcher | None = None) -> ReplayRun:
    """``forecast``: the control plane makes forecasts (off by default, as in the test kit).
    ``watch``: a coroutine run beside the trace from its first submission until every job has ended
    (then cancelled), given the server and the clock: e.g. benchmarks/forecast_accuracy.py reads
    the forecasts over gRPC every N cluster minutes."""
    first_submit = min((j.submit_time for j in jobs), default=0.0)
    lead_s = await _process_lead_s(len(cluster.nodes)) if processes else REGISTER_LEAD_WALL_S
    while True:
        # The clock reads the trace's own time (the simulator's: offset 0) and reaches the first
        # arrival `lead_s` wall seconds from now; the agents register meanwhile. Every instant
        # is then the simulator's float, so even rounding noise (a tie between equal keys) is
        # the same. Agents that come later than that: start again with a longer lead, and at
        # AGENT_WAIT_S start the trace at the next whole round instead (times then differ by
        # rounding noise; phases and draws follow the origin, SchedulingCore.origin_s).
        clock = ScaledClock(speedup, cluster_origin=first_submit - lead_s * speedup)
        run = _Running(clock, cluster, cluster_toml, policy, contention, catalog, db, round_s, forecast)
        try:
            await run.start(processes)
            await run.profile(jobs)
            offset = 0.0
            if clock.now() + START_MARGIN_WALL_S * speedup > first_submit:
                # The lead covers the agents' registration and the trace's profilings: the next one is what
                # this attempt measured of both, with a margin.
                ready_s = run.registered_s + run.profiled_s
                if lead_s < AGENT_WAIT_S:
                    lead_s = max(lead_s * (LEAD_MARGIN if processes else LEAD_GROWTH),
                                 LEAD_MARGIN * ready_s + START_MARGIN_WALL_S)
                    log.info("replay: agents registered or profiled late; starting again with a longer lead",
                             registered_s=round(run.registered_s, 3), profiled_s=round(run.profiled_s, 3),
                             lead_s=round(lead_s, 3))
                    continue
                log.warning("replay: agents registered or profiled late; the trace starts at the next whole round",
                            lead_s=lead_s, registered_s=round(run.registered_s, 3),
                            profiled_s=round(run.profiled_s, 3))
                offset = math.ceil((clock.now() + START_MARGIN_WALL_S * speedup) / round_s) * round_s
            return await run.play(jobs, offset, on_progress, watch)
        finally:
            await run.stop()


class _Running:
    """One control plane, its gRPC server and its agents, on one clock."""

    def __init__(self, clock: ScaledClock, cluster: Cluster, cluster_toml: str, policy: str, contention: str,
                 catalog: Catalog | None, db: str | Path, round_s: float,
                 forecast: ForecastSettings | None = None) -> None:
        self.clock = clock
        self.cluster = cluster
        self.cluster_toml = cluster_toml
        self.policy = policy
        self.round_s = round_s
        scheduler = make_policy(policy)
        # The agents below share it: same model, same settings.
        self.perf = performance_model_for(scheduler, contention=contention, catalog=catalog)
        self.cp = ControlPlane(cluster, scheduler, self.perf, clock, SqliteStore(db), cluster_toml=cluster_toml,
                               round_s=round_s, lockstep=True)
        self.timeline = TimelineRecorder(self.cp.core)
        self.server = ControlPlaneServer(self.cp, listen="127.0.0.1:0", forecast=forecast)
        self.agents: list[EmulatedAgent] = []
        self.procs: list[subprocess.Popen[bytes]] = []
        self.started = False
        self.registered_s = 0.0  # wall seconds from start() to the last agent's registration
        self.profiled_s = 0.0  # wall seconds profile() took (Crius' stage profilings through the agents)

    async def start(self, processes: bool) -> None:
        """Serve, start the agents and wait until every one has registered."""
        cp, cluster = self.cp, self.cluster
        began = time.perf_counter()
        await self.server.start()
        self.started = True
        if processes:
            self.procs = _agent_processes(self.server.address, self.cluster_toml, [n.name for n in cluster.nodes])
        else:
            # One parse for all agents: node-scoped registration checks each agent's copy by digest.
            copy = ClusterCopy(cluster, self.cluster_toml, cp.cluster_digest)
            for node in cluster.nodes:
                agent = EmulatedAgent(self.server.address, node, perf=self.perf, cluster=copy)
                agent.start()
                self.agents.append(agent)
        deadline = time.monotonic() + AGENT_WAIT_S
        while len(cp.sessions) < len(cluster.nodes):
            if time.monotonic() > deadline:
                raise ReplayError(f"only {len(cp.sessions)} of {len(cluster.nodes)} agents registered "
                                  f"within {AGENT_WAIT_S:g} s")
            await asyncio.sleep(POLL_S)
        self.registered_s = time.perf_counter() - began

    async def profile(self, jobs: Sequence[JobSpec]) -> None:
        """Take the trace's stage profilings (Crius §5.1) through the agents before its first arrival.

        The simulator profiles in no time (the paper's profiling time is not modelled); here each
        submission would otherwise spend wall time on its exchange, which the accelerated clock turns
        into up to thousands of cluster seconds and lockstep then has to catch up on. The exchange is
        the real one (Profile / ProfileResult over the agents' streams); SubmitJob's own then finds the
        answers cached. A policy that does not declare ``NeedsProfiles`` profiles nothing."""
        if not self.cp.core.prepares:
            return
        began = time.perf_counter()
        distinct = {profiling_key(pb): pb for pb in map(spec_to_pb, jobs)}  # one per kind of job
        await asyncio.gather(*(self.cp.prepare_profiles(spec) for spec in distinct.values()))
        self.profiled_s = time.perf_counter() - began

    async def play(self, jobs: Sequence[JobSpec], offset: float,
                   on_progress: Callable[[int, int, float], None] | None, watch: Watcher | None = None) -> ReplayRun:
        """Submit the trace ``offset`` seconds on and wait until every job has ended."""
        cp, clock = self.cp, self.clock
        cp.set_time_origin(offset)  # phases and seeded draws as the simulator's, whose trace starts at 0
        wall_start = time.perf_counter()
        rejected: list[Rejected] = []
        watching = asyncio.create_task(watch(self.server, clock), name="replay-watch") if watch else None
        try:
            async with grpc.aio.insecure_channel(self.server.address) as channel:
                await _submit_all(jgrpc.JobServiceStub(channel), jobs, clock, cp, on_progress, offset, rejected)
                while any(not r.state.terminal for r in cp.core.records.values()):
                    if cp.failed is not None:
                        raise _store_failed(cp, f"{sum(not r.state.terminal for r in cp.core.records.values())} "
                                                "jobs had not ended")
                    if watching is not None and watching.done():
                        watching.result()  # a watcher that failed stops the replay with its error
                    if on_progress is not None:
                        on_progress(_ended(cp) + len(rejected), len(jobs), clock.now())
                    await asyncio.sleep(POLL_S)
        finally:
            if watching is not None:
                watching.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watching
        wall_s = time.perf_counter() - wall_start
        await self.stop()
        result = summarize(cp.core, policy=self.policy, trace_jobs=len(jobs), rejected=len(rejected), wall_s=wall_s)
        first = offset + min((j.submit_time for j in jobs), default=0.0)
        last = max((r.end_time or 0.0 for r in cp.core.records.values()), default=first)
        result["speedup_achieved"] = (last - first) / wall_s if wall_s > 0 else 0.0
        result["speedup"] = clock.speedup
        # Tables in trace time (the trace starts at `offset` on the control plane's clock), as simulate has them.
        tables = RunTables(result, job_columns(cp.core, origin=offset, now=last), self.timeline.columns(origin=offset))
        return ReplayRun(result, cp.core, tables, rejected)

    async def stop(self) -> None:
        """Stop the agents (tasks or processes) and the server; a second call does nothing."""
        agents, procs, self.agents, self.procs = self.agents, self.procs, [], []
        # Leave, as a daemon agent does on SIGTERM: the control plane logs a clean exit ("agent left",
        # info), not eight "agent disconnected" warnings at the end of a successful replay.
        await asyncio.gather(*(agent.leave() for agent in agents))
        for proc in procs:
            proc.terminate()
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        if self.started:
            self.started = False
            await self.server.stop(grace=0)


class ReplayError(HalyardError):
    """The replay could not run (e.g. its agents did not come up)."""


@dataclass
class ReplayRun:
    summary: Mapping[str, object]  # simulate's keys plus speedup_achieved
    core: SchedulingCore  # the control plane's state at the end (event log, records)
    tables: RunTables  # the summary, per-job table and timeline, times from the trace's start
    # Jobs SubmitJob refused with INVALID_ARGUMENT (the simulator's rejections at submission: e.g. a
    # GPU type no model has a profile for), in trace order; the replay goes on without them.
    rejected: list[Rejected] = field(default_factory=list)


async def _submit_all(stub: jgrpc.JobServiceStub, jobs: Sequence[JobSpec], clock: ScaledClock, cp: ControlPlane,
                      on_progress: Callable[[int, int, float], None] | None, offset: float,
                      rejected: list[Rejected]) -> None:
    arrivals = [offset + spec.submit_time for spec in jobs]
    for i, spec in enumerate(jobs):
        arrival = arrivals[i]
        then = arrivals[i + 1] if i + 1 < len(arrivals) else math.inf
        cp.set_arrival_horizon(arrival, then=then)  # lockstep: nothing after it happens before it is in
        await clock.sleep_until(arrival)
        request = jpb.SubmitJobRequest(spec=spec_to_pb(spec), submit_time=arrival)
        while True:
            try:
                await stub.SubmitJob(request)
                break
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.ALREADY_EXISTS:
                    break  # accepted before, the reply was lost
                if exc.code() == grpc.StatusCode.INVALID_ARGUMENT:  # the simulator's Rejected, over gRPC
                    rejected.append(Rejected(spec.job_id, exc.details() or "invalid argument"))
                    break
                if exc.code() != grpc.StatusCode.UNAVAILABLE:
                    raise
                if cp.failed is not None:
                    left = len(jobs) - i - 1
                    raise _store_failed(cp, f"job {spec.job_id} and the {left} after it were not submitted") from exc
                await asyncio.sleep(SUBMIT_RETRY_S)
        if on_progress is not None:
            on_progress(_ended(cp) + len(rejected), len(jobs), clock.now())
    cp.set_arrival_horizon(math.inf)


def _store_failed(cp: ControlPlane, what: str) -> ReplayError:
    """A control plane whose store failed refuses every change until it restarts, which a replay's in-process
    one never does: the replay stops with the store's error and ``what`` was left undone, rather than wait
    (UNAVAILABLE is retried otherwise)."""
    return ReplayError(f"the control plane's state store failed ({cp.failed}); {what}")


def _ended(cp: ControlPlane) -> int:
    return sum(1 for r in cp.core.records.values() if r.state.terminal)


async def _process_lead_s(agents: int) -> float:
    """The first lead for ``agents`` agent processes: one process's start-up (Python, gRPC and the
    agent's imports), measured now, for every round of as many processes as there are cores, with
    :data:`LEAD_MARGIN`; at least :data:`REGISTER_LEAD_WALL_S`."""
    began = time.perf_counter()
    probe = await asyncio.create_subprocess_exec(sys.executable, "-c", "import halyard.cli.agent",
                                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    await probe.wait()
    one = time.perf_counter() - began
    return max(REGISTER_LEAD_WALL_S, LEAD_MARGIN * one * math.ceil(agents / (os.cpu_count() or 1)))


def _agent_processes(address: str, cluster_toml: str, nodes: list[str]) -> list[subprocess.Popen[bytes]]:
    """One ``halyard agent`` process per node, reading the cluster from a temp file."""
    folder = Path(tempfile.mkdtemp(prefix="halyard-replay-"))
    path = folder / "cluster.toml"
    path.write_text(cluster_toml, encoding="utf-8")
    env = os.environ | {"PYTHONUNBUFFERED": "1"}
    return [subprocess.Popen([sys.executable, "-m", "halyard.cli", "agent", "--control-plane", address,
                              "--backend", "emulated", "--node", node, "--cluster", str(path),
                              "--insecure"],  # loopback, in-process control plane
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for node in nodes]
