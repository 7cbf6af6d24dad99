"""Agents at scale (issue 19, item 2): node-scoped registration checked by digest, jittered
reconnect backoff, the heartbeat timeout counted from registration, unknown control messages
ignored. Over real gRPC on loopback wherever a stream is involved."""

from __future__ import annotations

import asyncio
import hashlib
import random
import time

import grpc
import pytest
from structlog.testing import capture_logs

from halyard.agent.backoff import BACKOFF_JITTER, BACKOFF_MAX_S, BACKOFF_MULTIPLIER, BACKOFF_START_S, Backoff
from halyard.agent.cluster_copy import ClusterCopy, ClusterMismatch, StaleCluster
from halyard.agent.emulated import EmulatedAgent
from halyard.testing.cluster import WAIT_TIMEOUT_S, TestCluster, small_cluster_toml
from halyard.v1 import agent_service_pb2 as apb
from halyard.v1 import agent_service_pb2_grpc as agrpc
from halyard.v1.types_pb2 import NodeSpec
from halyard.wire import node_to_pb

TOML = small_cluster_toml(3, gpus_per_node=2)


async def _register_raw(address: str, node: str, digest: str) -> apb.Registered:
    """One Register on a fresh stream, as an agent of another build would send it; the reply."""
    async with grpc.aio.insecure_channel(address) as channel:
        call = agrpc.AgentServiceStub(channel).Connect()
        await call.write(apb.AgentMessage(register=apb.Register(node=NodeSpec(name=node), backend="emulated",
                                                                 cluster_digest=digest)))
        reply = await call.read()
        call.cancel()
        return reply.registered


async def _free_node(tc: TestCluster, node: str) -> None:
    await tc.agents.pop(node).stop()
    await tc.wait_for(lambda: node not in tc.control_plane.sessions)


async def test_registration_is_node_scoped_when_the_digest_matches():
    async with TestCluster(cluster_toml=TOML) as tc:
        await _free_node(tc, "r0-n1")
        want = hashlib.sha256(TOML.encode()).hexdigest()
        scoped = await _register_raw(tc.address, "r0-n1", want)
        assert scoped.cluster_toml == ""  # the agent holds the file: only its node and the digest come
        assert scoped.cluster_digest == want
        assert scoped.node_spec == node_to_pb(tc.cluster.node("r0-n1"))
        await tc.wait_for(lambda: "r0-n1" not in tc.control_plane.sessions)
        for digest in ("", "0" * 64):  # an agent of an older build, or with another cluster file
            full = await _register_raw(tc.address, "r0-n1", digest)
            assert full.cluster_toml == TOML
            assert hashlib.sha256(full.cluster_toml.encode()).hexdigest() == full.cluster_digest == want
            await tc.wait_for(lambda: "r0-n1" not in tc.control_plane.sessions)


async def test_agent_with_a_stale_cluster_file_is_sent_the_control_planes():
    stale = ClusterCopy.parse(TOML.replace("cpus = 24", "cpus = 32"), source="<stale>")
    async with TestCluster(cluster_toml=TOML) as tc:
        await _free_node(tc, "r0-n1")
        agent = EmulatedAgent(tc.agent_address, "r0-n1", shared_clock=tc.clock, perf=tc.perf, cluster=stale)
        agent.start()
        try:
            await asyncio.wait_for(agent.connected.wait(), WAIT_TIMEOUT_S)
            assert agent.cluster.node("r0-n1").cpus == 24  # the control plane's, not the stale copy's 32
            assert agent._copy.digest == tc.control_plane.cluster_digest
        finally:
            await agent.stop()


def _registered(copy: ClusterCopy, node: str, **fields) -> apb.Registered:
    msg = apb.Registered(node=node, node_spec=node_to_pb(copy.cluster.node(node)), cluster_digest=copy.digest)
    for name, value in fields.items():
        if hasattr(value, "CopyFrom"):  # a message field
            getattr(msg, name).CopyFrom(value)
        else:
            setattr(msg, name, value)
    return msg


@pytest.mark.parametrize("case", ["other digest", "file does not match its digest", "other node spec"])
def test_agent_checks_the_digest_and_its_node(case):
    copy = ClusterCopy.parse(TOML, source="<test>")
    agent = EmulatedAgent("127.0.0.1:1", "r0-n0", cluster=copy)  # handlers only, no stream
    agent._take_cluster(_registered(copy, "r0-n0"))  # the same file: accepted without one byte of it
    assert agent.cluster is copy.cluster
    bad = {"other digest": {"cluster_digest": "f" * 64},
           "file does not match its digest": {"cluster_digest": "f" * 64, "cluster_toml": TOML},
           "other node spec": {"node_spec": NodeSpec(name="r0-n0", gpus=8)}}[case]
    with pytest.raises(StaleCluster):
        agent._take_cluster(_registered(copy, "r0-n0", **bad))
    assert agent._copy is None  # the next Register sends no digest, so the control plane sends its file
    assert agent._register().cluster_digest == ""


def test_a_file_that_disagrees_with_itself_stops_the_agent_instead_of_a_retry_loop():
    """Registering again would bring the same file: a mismatch in what was sent is not retried."""
    copy = ClusterCopy.parse(TOML, source="<test>")
    agent = EmulatedAgent("127.0.0.1:1", "r0-n0")  # no copy: the control plane sends its file
    with pytest.raises(ClusterMismatch):
        agent._take_cluster(_registered(copy, "r0-n0", cluster_toml=TOML, node_spec=NodeSpec(name="r0-n0", gpus=8)))
    with pytest.raises(StaleCluster) as own_copy:  # the agent's own copy is stale: retried for the file
        EmulatedAgent("127.0.0.1:1", "r0-n0", cluster=copy)._take_cluster(
            _registered(copy, "r0-n0", node_spec=NodeSpec(name="r0-n0", gpus=8)))
    assert not isinstance(own_copy.value, ClusterMismatch)


def test_backoff_delays_stay_within_the_jitter_of_a_capped_exponential():
    """gRPC connection-backoff.md: delay_k = min(max, start x multiplier^k) x U(1 - jitter, 1 + jitter)."""
    backoff = Backoff(rng=random.Random(7))
    step = BACKOFF_START_S
    for _ in range(12):
        delay = backoff.next_delay()
        assert step * (1 - BACKOFF_JITTER) <= delay <= step * (1 + BACKOFF_JITTER)
        step = min(BACKOFF_MAX_S, step * BACKOFF_MULTIPLIER)
    assert step == BACKOFF_MAX_S  # the cap was reached within the attempts above
    backoff.reset()
    assert backoff.next_delay() <= BACKOFF_START_S * (1 + BACKOFF_JITTER)


def test_backoff_jitter_spreads_a_fleet_that_fails_together():
    firsts = [Backoff(rng=random.Random(seed)).next_delay() for seed in range(1000)]
    spread = max(firsts) - min(firsts)
    assert spread > 0.8 * 2 * BACKOFF_JITTER * BACKOFF_START_S  # near the whole +-jitter band is used
    assert len({round(d, 9) for d in firsts}) > 990  # no two agents retry in lockstep


@pytest.mark.parametrize("bad", [{"jitter": 1.0}, {"jitter": -0.1}, {"start_s": 0.0}, {"max_s": 0.01},
                                 {"multiplier": 0.5}])
def test_backoff_refuses_parameters_that_would_not_back_off(bad):
    with pytest.raises(ValueError, match="backoff"):
        Backoff(**bad)


async def test_heartbeat_timeout_counts_from_registration():
    """A registration the control plane took long to deliver is not charged to the agent."""
    async with TestCluster(cluster_toml=TOML, heartbeat_s=0.05, heartbeat_timeout_s=0.5) as tc:
        session = tc.control_plane.sessions["r0-n0"]
        before = time.monotonic()
        session.last_seen = before - 10.0  # as if the agents.register call had happened long ago
        tc.control_plane.agents.registered(session)  # the Registered reply reaches the stream now
        after = time.monotonic()  # nothing yields in between: no heartbeat moves last_seen
        # Judged from the instants around the call, not a later clock reading that a busy machine delays.
        assert session not in tc.control_plane.agents.silent(before + 0.4)
        assert session in tc.control_plane.agents.silent(after + 0.6)


async def _control_plane_that_sends(frames: list[bytes], got: asyncio.Queue[apb.AgentMessage], connects: list[int]):
    """A real gRPC server for AgentService.Connect that replies with raw frames (fields this build may not know)."""
    async def connect(requests, context):
        connects.append(1)
        reader = asyncio.create_task(_forward(requests, got))
        try:
            for frame in frames:
                yield frame
            await reader
        finally:
            reader.cancel()

    handler = grpc.stream_stream_rpc_method_handler(connect, request_deserializer=apb.AgentMessage.FromString,
                                                    response_serializer=None)
    server = grpc.aio.server()
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("halyard.v1.AgentService",
                                                                          {"Connect": handler})])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


async def _forward(requests, got: asyncio.Queue[apb.AgentMessage]) -> None:
    async for msg in requests:
        got.put_nowait(msg)


async def test_unknown_control_message_is_logged_and_ignored():
    copy = ClusterCopy.parse(TOML, source="<test>")
    registered = apb.ControlMessage(registered=_registered(copy, "r0-n0", heartbeat_interval_s=60.0,
                                                           clock=apb.ClockParams(kind=apb.ACCELERATED, speedup=1.0)))
    unknown = bytes([0x92, 0x03, 3]) + b"new"  # field 50 (tag varint 50 << 3 | 2 = 402), 3 bytes: a newer command
    read_log = apb.ControlMessage(read_log=apb.ReadLog(request_id=7, job_id="j", attempt=1))
    got: asyncio.Queue[apb.AgentMessage] = asyncio.Queue()
    connects: list[int] = []
    server, address = await _control_plane_that_sends(
        [registered.SerializeToString(), unknown, read_log.SerializeToString()], got, connects)
    agent = EmulatedAgent(address, "r0-n0", cluster=copy)
    try:
        with capture_logs() as logs:
            agent.start()
            kinds = []
            while "log_data" not in kinds:  # the command after the unknown one is still handled
                kinds.append((await asyncio.wait_for(got.get(), WAIT_TIMEOUT_S)).WhichOneof("body"))
        assert kinds[0] == "register" and "log_data" in kinds
        assert agent.connected.is_set() and len(connects) == 1  # same stream: nothing crashed or reconnected
        assert any(e["event"] == "unknown control message ignored" for e in logs)
    finally:
        await agent.stop()
        await server.stop(None)
