"""Lockstep replay (note5 "not mended"): an instant whose last submission is refused still gets its pass;
one answered UNAVAILABLE (the replay client retries it) does not (note6 "not mended")."""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator

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


@contextlib.asynccontextmanager
async def _lockstep(store: SqliteStore) -> AsyncIterator[tuple[ControlPlane, jgrpc.JobServiceStub]]:
    """A lockstep control plane (fifo, one 8-GPU node) on a real socket, its emulated agent registered."""
    toml = small_cluster_toml(1)
    cluster = parse_cluster(toml)
    perf = PerformanceModel()
    clock = ManualClock(0.0)
    cp = ControlPlane(cluster, make_policy("fifo"), perf, clock, store, cluster_toml=toml, lockstep=True)
    server = ControlPlaneServer(cp, listen="127.0.0.1:0")
    await server.start()
    copy = ClusterCopy(cluster, toml, cluster_digest(toml))
    agents = [EmulatedAgent(server.address, node, shared_clock=clock, perf=perf, cluster=copy)
              for node in cluster.nodes]
    for agent in agents:
        agent.start()
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            await asyncio.gather(*(asyncio.wait_for(agent.connected.wait(), 60.0) for agent in agents))
            yield cp, jgrpc.JobServiceStub(channel)
    finally:
        for agent in agents:
            await agent.stop()
        await server.stop(0)


def _request(job_id: str, model: str = "resnet50") -> jpb.SubmitJobRequest:
    return jpb.SubmitJobRequest(spec=tpb.JobSpec(job_id=job_id, model=model, num_gpus=1, iterations=1000),
                                submit_time=10.0)


async def _first_of_two_at_ten(cp: ControlPlane, jobs: jgrpc.JobServiceStub) -> None:
    """Job a arrives at t = 10 with another arrival at that instant to come: it leaves the pass to it."""
    cp.set_arrival_horizon(10.0, then=10.0)
    await jobs.SubmitJob(_request("a"))
    assert cp.core.records["a"].state is JobState.PENDING  # its pass is the instant's last submit's


async def test_an_instant_whose_last_submit_is_refused_still_gets_its_pass():
    """Two arrivals at t = 10: the first leaves the instant's pass to the second (the simulator's order: all
    of an instant's events, then one pass); the second is refused (unknown model). The pass must still run
    at t = 10, so the first job starts there, not at the next event."""
    async with _lockstep(SqliteStore(":memory:")) as (cp, jobs):
        await _first_of_two_at_ten(cp, jobs)
        cp.set_arrival_horizon(10.0, then=math.inf)  # the instant's last arrival
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await jobs.SubmitJob(_request("b", model="nosuchnet"))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        record = cp.core.records["a"]
        assert record.state is JobState.RUNNING and record.first_start == 10.0


async def test_submit_jobs_whose_last_arrival_is_refused_still_gives_the_instant_its_pass():
    """The same through SubmitJobs (a batch answers a refusal in its result, not as the call's status): it
    did not call submit_refused, so job a waited past its instant for the next event."""
    async with _lockstep(SqliteStore(":memory:")) as (cp, jobs):
        await _first_of_two_at_ten(cp, jobs)
        cp.set_arrival_horizon(10.0, then=math.inf)
        out = await jobs.SubmitJobs(jpb.SubmitJobsRequest(jobs=[_request("b", model="nosuchnet")]))
        assert out.results[0].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        record = cp.core.records["a"]
        assert record.state is JobState.RUNNING and record.first_start == 10.0


async def test_a_submit_answered_unavailable_does_not_take_its_instants_pass(tmp_path):
    """Three arrivals at t = 10. After a, the state store fails (closed under the control plane): b's commit
    fails (UNAVAILABLE) and c, the instant's last, is answered UNAVAILABLE before it is submitted. The replay
    client retries UNAVAILABLE, so it is no refusal: no pass runs on state that can no longer be stored
    (job a stays PENDING). Counting it as one (the rule before 4fc4660) ran the owed pass and started a."""
    store = SqliteStore(tmp_path / "state.db")
    async with _lockstep(store) as (cp, jobs):
        await _first_of_two_at_ten(cp, jobs)
        store.close()
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await jobs.SubmitJob(_request("b"))  # another arrival at t = 10 still to come
        assert failed.value.code() == grpc.StatusCode.UNAVAILABLE and cp.failed is not None
        cp.set_arrival_horizon(10.0, then=math.inf)
        with pytest.raises(grpc.aio.AioRpcError) as unavailable:
            await jobs.SubmitJob(_request("c"))
        assert unavailable.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "c" not in cp.core.records and cp.core.records["a"].state is JobState.PENDING
