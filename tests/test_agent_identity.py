"""Agents over mutual TLS (issue 16, item 1): certificates, impersonation, a second agent for a node.

On the main before this change any process could register as any node (an impostor
got another tenant's Launch and reported its completion), and two agents with the
same --node replaced each other about once a second.
"""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, padding, rsa

from halyard.agent.emulated import EmulatedAgent
from halyard.datamodel import EventKind, JobState
from halyard.testing import TestCluster
from halyard.tls import (
    ROLE_AGENT,
    ROLE_OPERATOR,
    ROLE_TENANT_USER,
    CertificateError,
    ClientTLS,
    identity_from_pem,
    init_ca,
    issue,
)
from halyard.v1 import cluster_service_pb2 as cpb
from halyard.v1 import cluster_service_pb2_grpc as cgrpc
from halyard.v1 import job_service_pb2 as jpb
from halyard.v1 import job_service_pb2_grpc as jgrpc
from halyard.v1 import types_pb2 as tpb


def spec(job_id: str, gpus: int = 8, iterations: int = 10**6, **kw) -> tpb.JobSpec:
    return tpb.JobSpec(job_id=job_id, model="resnet50", num_gpus=gpus, iterations=iterations, **kw)


def test_certificates_name_their_holder(tmp_path):
    made = init_ca(tmp_path, cluster="c1", server_names=("cp.example", "10.0.0.5"))
    assert {p.name for p in made} == {"ca.crt", "ca.key", "controlplane.crt", "controlplane.key"}
    assert (tmp_path / "ca.key").stat().st_mode & 0o777 == 0o600
    issue(tmp_path, "node", "r0-n0")
    issue(tmp_path, "operator", "olga")
    issue(tmp_path, "user", "ulf", tenant="team-a")
    node = identity_from_pem((tmp_path / "node-r0-n0.crt").read_bytes())
    assert (node.role, node.node) == (ROLE_AGENT, "r0-n0")
    assert identity_from_pem((tmp_path / "operator-olga.crt").read_bytes()).role == ROLE_OPERATOR
    user = identity_from_pem((tmp_path / "user-team-a-ulf.crt").read_bytes())
    assert (user.role, user.tenant, user.name) == (ROLE_TENANT_USER, "team-a", "ulf")
    cert = x509.load_pem_x509_certificate((tmp_path / "node-r0-n0.crt").read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["r0-n0"]  # the node's name in the SAN
    server = x509.load_pem_x509_certificate((tmp_path / "controlplane.crt").read_bytes())
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "cp.example" in names.get_values_for_type(x509.DNSName)
    assert identity_from_pem((tmp_path / "controlplane.crt").read_bytes()) is None  # a server is nobody's client
    with pytest.raises(CertificateError, match="already holds a CA"):
        init_ca(tmp_path)


def test_an_operators_rsa_ca_signs_and_a_key_of_another_kind_is_named(tmp_path):
    """The CA `halyard certs init` makes is ECDSA P-256 (docs/security.md); an operator's own RSA CA key signs
    too; a key of another kind (here Ed25519, which takes no hash) is refused, naming its type."""
    init_ca(tmp_path, cluster="c1")
    ca_cert = x509.load_pem_x509_certificate((tmp_path / "ca.crt").read_bytes())
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _put_ca_key(tmp_path, rsa_key)
    crt, _ = issue(tmp_path, "node", "r0-n0")
    leaf = x509.load_pem_x509_certificate(crt.read_bytes())
    assert leaf.issuer == ca_cert.subject
    rsa_key.public_key().verify(leaf.signature, leaf.tbs_certificate_bytes, padding.PKCS1v15(), hashes.SHA256())
    _put_ca_key(tmp_path, ed25519.Ed25519PrivateKey.generate())
    with pytest.raises(CertificateError, match=r"ca\.key: the CA key is of type Ed25519PrivateKey"):
        issue(tmp_path, "node", "r0-n1")


def _put_ca_key(folder, key) -> None:
    (folder / "ca.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                      serialization.NoEncryption()))


async def test_the_whole_path_runs_over_mutual_tls():
    async with TestCluster(nodes=2, tls=True) as tc:
        assert tc.address != tc.agent_address  # agents and clients do not share a port
        jobs = jgrpc.JobServiceStub(tc.channel)
        await jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec("a", iterations=100)))
        await tc.wait_for(lambda: tc.job("a").state is JobState.RUNNING)
        await tc.advance(tc.job("a").finish_time() + 1)
        await tc.wait_for(lambda: tc.job("a").state is JobState.COMPLETED)


async def test_an_agent_may_speak_only_for_the_node_in_its_certificate():
    async with TestCluster(nodes=2, tls=True) as tc:
        await tc.stop_agent("r0-n1")
        await tc.wait_for(lambda: "r0-n1" not in tc.control_plane.sessions)
        # r0-n0's certificate, registering as r0-n1 (the issue's impostor)
        impostor = EmulatedAgent(tc.agent_address, tc.cluster.node("r0-n1"), shared_clock=tc.clock,
                                 tls=ClientTLS.for_node(tc.certs, "r0-n0"))
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await asyncio.wait_for(impostor.run(), 10)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "certificate is for node 'r0-n0'" in err.value.details()
        assert "r0-n1" not in tc.control_plane.sessions
        assert tc.control_plane.sessions["r0-n0"].instance == tc.agents["r0-n0"].instance  # untouched


async def test_an_agent_without_a_node_certificate_gets_nowhere():
    async with TestCluster(nodes=1, tls=True) as tc:
        # On the client port (TLS without client certificates) an agent has no identity.
        plain = EmulatedAgent(tc.address, tc.cluster.node("r0-n0"), tls=ClientTLS.from_files(tc.certs / "ca.crt"))
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await asyncio.wait_for(plain.run(), 10)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED and "node certificate" in err.value.details()
        # An operator's certificate is not a node's.
        operator = EmulatedAgent(tc.agent_address, tc.cluster.node("r0-n0"),
                                 tls=ClientTLS.from_files(tc.certs / "ca.crt", tc.certs / "operator-test.crt",
                                                          tc.certs / "operator-test.key"))
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await asyncio.wait_for(operator.run(), 10)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        # No certificate at all on the agent port: the handshake itself fails.
        async with grpc.aio.secure_channel(tc.agent_address, ClientTLS.from_files(tc.certs / "ca.crt")
                                           .credentials()) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await cgrpc.ClusterServiceStub(channel).GetCluster(cpb.GetClusterRequest(), timeout=5)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        # A node certificate may use AgentService only.
        async with tc.client_channel("node-r0-n0") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await jgrpc.JobServiceStub(channel).ListJobs(jpb.ListJobsRequest())
            assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED and "AgentService only" in err.value.details()


@pytest.mark.parametrize("tls", [False, True])
async def test_a_second_agent_for_a_connected_node_is_refused_and_the_first_keeps_its_job(tls):
    async with TestCluster(nodes=1, tls=tls, heartbeat_s=0.1, heartbeat_timeout_s=1.0) as tc:
        jobs = jgrpc.JobServiceStub(tc.channel)
        await jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec("long")))
        await tc.wait_for(lambda: tc.job("long").state is JobState.RUNNING)
        first = tc.agents["r0-n0"].instance
        second = EmulatedAgent(tc.agent_address, tc.cluster.node("r0-n0"), shared_clock=tc.clock,
                               tls=ClientTLS.for_node(tc.certs, "r0-n0") if tls else None)
        refusals = tc.server.metrics.registry
        labels = {"service": "halyard.v1.AgentService", "method": "Connect", "code": "ALREADY_EXISTS"}
        past = time.monotonic() + 2 * tc.control_plane.agents.heartbeat_timeout_s  # two heartbeat timeouts from now
        counted_at_past: list[float] = []

        def refused_after_two_timeouts() -> bool:
            """A refusal of the second after two timeouts (had the first been declared lost, the second
            would have taken the node by then), or the second connected (which the asserts reject)."""
            count = refusals.get_sample_value("halyard_grpc_server_handled_total", labels) or 0.0
            if not counted_at_past and time.monotonic() > past:
                counted_at_past.append(count)
            return second.connected.is_set() or (bool(counted_at_past) and count > counted_at_past[0])

        second.start()
        try:
            await tc.wait_for(refused_after_two_timeouts)  # the first stays, the second keeps being refused
            assert tc.control_plane.sessions["r0-n0"].instance == first
            assert not second.connected.is_set()
            assert tc.job("long").state is JobState.RUNNING and tc.job("long").preemptions == 0
            assert tc.job("long").attempt == 1
        finally:
            await second.stop()


async def test_a_second_agent_gives_up_and_stops_saying_another_agent_holds_the_node():
    """Issue 33: a second agent for a live node (the README's real-training block run after its emulated
    one) retried forever; it now stops once its retry window is over, with the refusal."""
    async with TestCluster(nodes=1, heartbeat_s=0.1, heartbeat_timeout_s=1.0) as tc:
        second = EmulatedAgent(tc.address, tc.cluster.node("r0-n0"), shared_clock=tc.clock, held_give_up_s=1.0)
        started = time.monotonic()
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await asyncio.wait_for(second.run(), 20)
        assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
        assert "already has a connected agent" in err.value.details()
        assert time.monotonic() - started >= 1.0  # it retried for its window first
        assert tc.control_plane.sessions["r0-n0"].instance == tc.agents["r0-n0"].instance


async def test_a_reconnect_of_the_same_agent_still_replaces_its_stream():
    async with TestCluster(nodes=1, tls=True) as tc:
        jobs = jgrpc.JobServiceStub(tc.channel)
        await jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec("kept")))
        await tc.wait_for(lambda: "kept" in tc.agents["r0-n0"].jobs)
        old = tc.control_plane.sessions["r0-n0"]
        tc.break_stream("r0-n0")
        await tc.wait_for(lambda: tc.control_plane.sessions.get("r0-n0") not in (None, old))
        assert tc.job("kept").state is JobState.RUNNING and tc.job("kept").preemptions == 0


async def test_an_exit_lost_in_flight_is_delivered_again_and_the_job_is_not_rerun():
    """Item 6: the issue's job that finished around a kill and ran a second time."""
    async with TestCluster(nodes=1) as tc:
        cp, agent = tc.control_plane, tc.agents["r0-n0"]
        await jgrpc.JobServiceStub(tc.channel).SubmitJob(jpb.SubmitJobRequest(spec=spec("once", iterations=100)))
        await tc.wait_for(lambda: "once" in agent.jobs)
        delivered, dropped = cp.agent_message, []

        def lossy(session, msg) -> None:  # the exit reaches a control plane that dies before storing it
            if msg.WhichOneof("body") == "exited":
                dropped.append(msg)
                return
            delivered(session, msg)

        cp.agent_message = lossy
        await tc.advance(tc.job("once").finish_time() + 1)
        await tc.wait_for(lambda: dropped)
        assert [e.job_id for e in agent.pending_exits()] == ["once"]  # kept until acknowledged
        cp.agent_message = delivered
        tc.break_stream("r0-n0")  # the reconnect (after a restart, in real life)
        await tc.wait_for(lambda: tc.job("once").state is JobState.COMPLETED)
        assert [e.kind for e in cp.core.log if e.job_id == "once"] == [
            EventKind.SUBMITTED, EventKind.STARTED, EventKind.COMPLETED]  # not requeued, not run again
        await tc.wait_for(lambda: not agent.pending_exits())  # the ack came


async def test_a_finished_non_leader_part_keeps_its_job_until_the_leaders_exit_lands():
    """The soak's re-run: a two-node job whose follower finished and reconnected before the leader's exit landed."""
    async with TestCluster(nodes=2) as tc:
        cp = tc.control_plane
        await jgrpc.JobServiceStub(tc.channel).SubmitJob(jpb.SubmitJobRequest(spec=spec("wide", gpus=16,
                                                                                         iterations=100)))
        await tc.wait_for(lambda: all("wide" in a.jobs for a in tc.agents.values()))
        leader, follower = tc.job("wide").allocation.node_names
        delivered, dropped = cp.agent_message, []

        def lossy(session, msg) -> None:
            if msg.WhichOneof("body") == "exited":
                dropped.append(msg)
                return
            delivered(session, msg)

        cp.agent_message = lossy
        await tc.advance(tc.job("wide").finish_time() + 1)
        await tc.wait_for(lambda: dropped and "wide" not in tc.agents[follower].jobs)
        old = cp.sessions[follower]
        tc.break_stream(follower)  # the follower reconnects first and lists its finished part
        await tc.wait_for(lambda: cp.sessions.get(follower) not in (None, old))
        assert tc.job("wide").state is JobState.RUNNING
        cp.agent_message = delivered
        tc.break_stream(leader)
        await tc.wait_for(lambda: tc.job("wide").state is JobState.COMPLETED)
        assert [e.kind for e in cp.core.log if e.job_id == "wide"] == [
            EventKind.SUBMITTED, EventKind.STARTED, EventKind.COMPLETED]
