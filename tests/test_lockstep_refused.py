"""Lockstep replay (note5 "not mended"): an instant whose last submission is refused still gets its pass."""

from __future__ import annotations

import asyncio
import math

import grpc
import pytest

from halyard.agent.cluster_copy import ClusterCopy
from halyard.agent.emulated import EmulatedAgent
from halyard.clock import ManualClock
from halyard.controlplane.server import ControlPlaneServer
from halyard.controlplane.service import ControlPlane
from halyard.controlplane.store import SqliteStore
from halyard.datamodel import JobState, cluster_digest, parse_cluster
from halyard.emulator import PerformanceModel
from halyard.policies import make_policy
from halyard.testing.cluster import small_cluster_toml
from halyard.v1 import job_service_pb2 as jpb
from halyard.v1 import job_service_pb2_grpc as jgrpc
from halyard.v1 import types_pb2 as tpb


async def test_an_instant_whose_last_submit_is_refused_still_gets_its_pass():
    """Two arrivals at t = 10: the first leaves the instant's pass to the second (the simulator's order: all
    of an instant's events, then one pass); the second is refused (unknown model). The pass must still run
    at t = 10, so the first job starts there, not at the next event."""
    toml = small_cluster_toml(1)
    cluster = parse_cluster(toml)
    perf = PerformanceModel()
    clock = ManualClock(0.0)
    cp = ControlPlane(cluster, make_policy("fifo"), perf, clock, SqliteStore(":memory:"),
                      cluster_toml=toml, lockstep=True)
    server = ControlPlaneServer(cp, listen="127.0.0.1:0")
    await server.start()
    copy = ClusterCopy(cluster, toml, cluster_digest(toml))
    agents = [EmulatedAgent(server.address, node, shared_clock=clock, perf=perf, cluster=copy)
              for node in cluster.nodes]
    for agent in agents:
        agent.start()
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            while len(cp.sessions) < len(cluster.nodes):
                await asyncio.sleep(0.01)
            jobs = jgrpc.JobServiceStub(channel)
            cp.set_arrival_horizon(10.0, then=10.0)  # another arrival at this instant follows
            await jobs.SubmitJob(jpb.SubmitJobRequest(
                spec=tpb.JobSpec(job_id="a", model="resnet50", num_gpus=1, iterations=1000), submit_time=10.0))
            assert cp.core.records["a"].state is JobState.PENDING  # its pass is the instant's last submit's
            cp.set_arrival_horizon(10.0, then=math.inf)  # the instant's last arrival
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await jobs.SubmitJob(jpb.SubmitJobRequest(
                    spec=tpb.JobSpec(job_id="b", model="nosuchnet", num_gpus=1, iterations=1000), submit_time=10.0))
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            record = cp.core.records["a"]
            assert record.state is JobState.RUNNING and record.first_start == 10.0
    finally:
        for agent in agents:
            await agent.stop()
        await server.stop(0)
