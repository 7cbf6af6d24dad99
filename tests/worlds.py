"""A control plane on a real (scaled) clock with in-process agents of either backend, on loopback.

The test cluster (halyard.testing) runs emulated agents on a manual clock;
real processes need a clock that moves by itself, so the process-backend tests
and the "same policy, both worlds" test use this small harness instead.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from halyard.agent.emulated import EmulatedAgent
from halyard.agent.process import ProcessAgent
from halyard.clock import ScaledClock
from halyard.controlplane.server import ControlPlaneServer
from halyard.controlplane.service import ControlPlane
from halyard.controlplane.store import SqliteStore
from halyard.datamodel import parse_cluster
from halyard.emulator import PerformanceModel
from halyard.policies import Migrate, Policy, Preempt, Resize, SetResources, SetTimeShift, Start, make_policy
from halyard.scheduling.records import JobRecord
from halyard.testing.cluster import WAIT_TIMEOUT_S, small_cluster_toml
from halyard.v1 import job_service_pb2 as jpb
from halyard.v1 import job_service_pb2_grpc as jgrpc
from halyard.v1 import types_pb2 as tpb

EXAMPLE = str(Path(__file__).resolve().parents[1] / "examples" / "train_numpy.py")


def train_spec(job_id: str, iterations: int, *, gpus: int = 8, pace_s: float = 0.005, every: int = 10,
               command: list[str] | None = None, **elastic: int) -> tpb.JobSpec:
    """resnet50 for the model; the example script (paced to ``pace_s`` per iteration) for the process."""
    if command is None:
        command = [sys.executable, EXAMPLE, "--min-iteration-s", str(pace_s), "--checkpoint-every", str(every),
                   "--samples", "4000", "--dim", "32"]
    return tpb.JobSpec(job_id=job_id, model="resnet50", num_gpus=gpus, iterations=iterations, command=command,
                       **elastic)


class World:
    """``async with World("process" | "gpu" | "emulated", tmp_path)``: ready (all agents registered) on entry.
    A tuple of backends, one per node (``("emulated", "process")``), makes a mixed cluster; ``pass_env`` names
    variables of this process that the real backends' jobs inherit (``halyard agent --pass-env``)."""

    def __init__(self, backend: str | tuple[str, ...], work_dir: Path, *, nodes: int = 1, policy: str | Policy = "fifo",
                 speedup: float = 1.0, round_s: float = 300.0, cluster_toml: str | None = None,
                 pass_env: tuple[str, ...] = ()) -> None:
        self.backend = backend
        self.work_dir = work_dir
        self.cluster_toml = cluster_toml or small_cluster_toml(nodes)
        self.cluster = parse_cluster(self.cluster_toml, source="<world>")
        self.clock = ScaledClock(speedup)
        self.policy = policy
        self.round_s = round_s
        self.pass_env = pass_env
        self.server: ControlPlaneServer | None = None
        self.agents: dict[str, ProcessAgent | EmulatedAgent] = {}
        self.channel: grpc.aio.Channel | None = None
        self.decisions: list[tuple] = []  # (action, job, nodes or detail), in dispatch order

    async def __aenter__(self) -> World:
        policy = make_policy(self.policy) if isinstance(self.policy, str) else self.policy
        cp = ControlPlane(self.cluster, policy, PerformanceModel(), self.clock,
                          SqliteStore(":memory:"), cluster_toml=self.cluster_toml, heartbeat_s=0.05,
                          heartbeat_timeout_s=5.0, round_s=self.round_s)

        def record(action) -> None:
            job = cp.core.records[action.job_id]
            if isinstance(action, Start | Migrate | Resize):
                self.decisions.append((type(action).__name__, action.job_id, job.allocation.node_names))
            elif isinstance(action, SetResources):
                self.decisions.append(("SetResources", action.job_id, (action.node, action.cpus, action.memory_mb)))
            elif isinstance(action, SetTimeShift | Preempt):
                self.decisions.append((type(action).__name__, action.job_id, ()))

        cp.on_action = record
        self.server = ControlPlaneServer(cp, listen="127.0.0.1:0")
        await self.server.start()
        for i, node in enumerate(self.cluster.nodes):
            backend = self.backend if isinstance(self.backend, str) else self.backend[i]
            hosts = {n.name: "127.0.0.1" for n in self.cluster.nodes}
            if backend == "process":
                agent = ProcessAgent(self.server.address, node, work_dir=self.work_dir, hosts=hosts,
                                     pass_env=self.pass_env)
            elif backend == "gpu":
                from halyard.agent.gpu import GpuAgent  # NVML: only where a test asks for real GPUs

                agent = GpuAgent(self.server.address, node, work_dir=self.work_dir, hosts=hosts,
                                 pass_env=self.pass_env)
            else:
                agent = EmulatedAgent(self.server.address, node)
            agent.start()
            self.agents[node.name] = agent
        await self.wait_for(lambda: len(cp.sessions) == len(self.agents))
        self.channel = grpc.aio.insecure_channel(self.server.address)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.channel is not None:
            await self.channel.close()
        for agent in self.agents.values():
            await agent.stop()
        if self.server is not None:
            await self.server.stop(grace=0)

    @property
    def cp(self) -> ControlPlane:
        return self.server.cp

    async def submit(self, spec: tpb.JobSpec) -> None:
        await jgrpc.JobServiceStub(self.channel).SubmitJob(jpb.SubmitJobRequest(spec=spec))

    def job(self, job_id: str) -> JobRecord:
        return self.cp.job(job_id)

    def done(self, job_id: str) -> float:
        return self.job(job_id).iterations_done(self.cp.now())

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = WAIT_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met within {timeout} s")
            await asyncio.sleep(0.01)
