"""``halyard replay``: a trace through the real control plane, real gRPC and emulated agents.

The control plane runs with an accelerated clock (cluster time = ``speedup`` x
wall time); one emulated agent per node connects over its own gRPC channel (as
asyncio tasks here, or as separate ``halyard agent`` processes); a client
submits each job through JobService when the clock reaches its arrival time;
the run ends when every job has ended. The summary has the keys of
``halyard simulate`` plus ``speedup_achieved`` (cluster seconds per wall second).
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from halyard.agent.cluster_copy import ClusterCopy
from halyard.agent.emulated import EmulatedAgent
from halyard.clock import ScaledClock
from halyard.controlplane.core import SchedulingCore
from halyard.controlplane.metrics import summarize
from halyard.controlplane.runtables import RunTables, TimelineRecorder, job_table
from halyard.controlplane.server import ControlPlaneServer
from halyard.controlplane.service import ControlPlane
from halyard.controlplane.store import SqliteStore
from halyard.controlplane.timing import performance_model_for
from halyard.datamodel import Cluster, HalyardError, JobSpec
from halyard.emulator import Catalog
from halyard.policies import make_policy
from halyard.v1 import job_service_pb2 as jpb
from halyard.v1 import job_service_pb2_grpc as jgrpc
from halyard.wire import spec_to_pb

AGENT_WAIT_S = 60.0  # wall seconds the agents get to register (processes start slowly on a busy machine)
START_MARGIN_WALL_S = 0.05  # between the last registration and the first arrival
SUBMIT_RETRY_S = 0.05
POLL_S = 0.02


async def replay(jobs: Sequence[JobSpec], cluster: Cluster, cluster_toml: str, *, policy: str, speedup: float,
                 processes: bool = False, db: str | Path = ":memory:", round_s: float = 300.0,
                 contention: str = "fair",
                 on_progress: Callable[[int, int, float], None] | None = None,
                 catalog: Catalog | None = None) -> ReplayRun:
    clock = ScaledClock(speedup)
    scheduler = make_policy(policy)
    # The agents below share it: same model, same settings.
    perf = performance_model_for(scheduler, contention=contention, catalog=catalog)
    cp = ControlPlane(cluster, scheduler, perf, clock, SqliteStore(db), cluster_toml=cluster_toml,
                      round_s=round_s, lockstep=True)
    timeline = TimelineRecorder(cp.core)
    server = ControlPlaneServer(cp, listen="127.0.0.1:0")
    await server.start()
    agents: list[EmulatedAgent] = []
    procs: list[subprocess.Popen[bytes]] = []
    try:
        if processes:
            procs = _agent_processes(server.address, cluster_toml, [n.name for n in cluster.nodes])
        else:
            copy = ClusterCopy(cluster, cluster_toml, cp.cluster_digest)  # one parse for all: node-scoped registration
            for node in cluster.nodes:
                agent = EmulatedAgent(server.address, node, perf=perf, cluster=copy)
                agent.start()
                agents.append(agent)
        deadline = time.monotonic() + AGENT_WAIT_S
        while len(cp.sessions) < len(cluster.nodes):
            if time.monotonic() > deadline:
                raise ReplayError(f"only {len(cp.sessions)} of {len(cluster.nodes)} agents registered "
                                  f"within {AGENT_WAIT_S:g} s")
            await asyncio.sleep(POLL_S)
        # The trace starts once every agent is in, shifted by whole rounds so round
        # boundaries fall where the simulator has them (times are relative anyway).
        offset = math.ceil((clock.now() + START_MARGIN_WALL_S * speedup) / round_s) * round_s
        wall_start = time.perf_counter()
        async with grpc.aio.insecure_channel(server.address) as channel:
            await _submit_all(jgrpc.JobServiceStub(channel), jobs, clock, cp, on_progress, offset)
            while any(not r.state.terminal for r in cp.core.records.values()):
                if on_progress is not None:
                    on_progress(_ended(cp), len(jobs), clock.now())
                await asyncio.sleep(POLL_S)
        wall_s = time.perf_counter() - wall_start
    finally:
        for agent in agents:
            await agent.stop()
        for proc in procs:
            proc.terminate()
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        await server.stop(grace=0)
    result = summarize(cp.core, policy=policy, trace_jobs=len(jobs), rejected=0, wall_s=wall_s)
    first = offset + min((j.submit_time for j in jobs), default=0.0)
    last = max((r.end_time or 0.0 for r in cp.core.records.values()), default=first)
    result["speedup_achieved"] = (last - first) / wall_s if wall_s > 0 else 0.0
    result["speedup"] = speedup
    # Tables in trace time (the trace starts at `offset` on the control plane's clock), as simulate has them.
    tables = RunTables(result, job_table(cp.core, origin=offset, now=last), timeline.table(origin=offset))
    return ReplayRun(result, cp.core, tables)


class ReplayError(HalyardError):
    """The replay could not run (e.g. its agents did not come up)."""


@dataclass
class ReplayRun:
    summary: dict[str, object]  # simulate's keys plus speedup_achieved
    core: SchedulingCore  # the control plane's state at the end (event log, records)
    tables: RunTables  # the summary, per-job table and timeline, times from the trace's start


async def _submit_all(stub: jgrpc.JobServiceStub, jobs: Sequence[JobSpec], clock: ScaledClock, cp: ControlPlane,
                      on_progress: Callable[[int, int, float], None] | None, offset: float) -> None:
    for spec in jobs:
        arrival = offset + spec.submit_time
        cp.set_arrival_horizon(arrival)  # lockstep: nothing after it happens before it is in
        await clock.sleep_until(arrival)
        request = jpb.SubmitJobRequest(spec=spec_to_pb(spec), submit_time=arrival)
        while True:
            try:
                await stub.SubmitJob(request)
                break
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.ALREADY_EXISTS:
                    break  # accepted before, the reply was lost
                if exc.code() != grpc.StatusCode.UNAVAILABLE:
                    raise
                await asyncio.sleep(SUBMIT_RETRY_S)
        if on_progress is not None:
            on_progress(_ended(cp), len(jobs), clock.now())
    cp.set_arrival_horizon(math.inf)


def _ended(cp: ControlPlane) -> int:
    return sum(1 for r in cp.core.records.values() if r.state.terminal)


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
