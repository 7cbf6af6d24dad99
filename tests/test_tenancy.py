"""Clients authenticate with tokens and see only their tenant (issue 16, item 2).

On the main before this change any client read every tenant's jobs and their env,
cancelled any job and drained any node, and chose the tenant of its own jobs.
"""

from __future__ import annotations

import grpc
import pytest

from halyard.controlplane.auth import TokenFile
from halyard.datamodel import JobState
from halyard.testing import TestCluster
from halyard.tls import issue
from halyard.v1 import cluster_service_pb2 as cpb
from halyard.v1 import cluster_service_pb2_grpc as cgrpc
from halyard.v1 import job_service_pb2 as jpb
from halyard.v1 import job_service_pb2_grpc as jgrpc
from halyard.v1 import types_pb2 as tpb


def spec(job_id: str, **kw) -> tpb.JobSpec:
    return tpb.JobSpec(job_id=job_id, model="resnet50", num_gpus=1, iterations=10**6, **kw)


def bearer(token: str) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {token}"),)


async def refused(call, code: grpc.StatusCode) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    assert err.value.code() == code, err.value.details()
    return err.value.details()


def test_the_token_file_holds_hashes_only(tmp_path):
    tokens = TokenFile(tmp_path / "tokens.json")
    token, entry = tokens.create("alice", "tenant-user", "team-a")
    text = (tmp_path / "tokens.json").read_text()
    assert token.split("_", 2)[2] not in text and entry.sha256 in text
    assert (tmp_path / "tokens.json").stat().st_mode & 0o777 == 0o600
    assert tokens.check(token).tenant == "team-a"
    with pytest.raises(ValueError, match="exists"):
        tokens.create("alice", "operator")
    with pytest.raises(ValueError, match="agents use node certificates"):
        tokens.create("node", "agent")


@pytest.fixture
def token_file(tmp_path):
    tokens = TokenFile(tmp_path / "tokens.json")
    made = {name: tokens.create(name, role, tenant)[0]
            for name, role, tenant in [("alice", "tenant-user", "team-a"), ("bob", "tenant-user", "team-b"),
                                       ("olga", "operator", "")]}
    return tokens, made


async def test_tenants_see_watch_and_cancel_only_their_own_jobs(token_file):
    tokens, made = token_file
    async with TestCluster(nodes=2, tls=True, tokens=tokens.path) as tc, tc.client_channel() as channel:
        jobs, cluster = jgrpc.JobServiceStub(channel), cgrpc.ClusterServiceStub(channel)
        alice, bob, olga = bearer(made["alice"]), bearer(made["bob"]), bearer(made["olga"])
        job = await jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec("a1", env={"API_KEY": "secret-a"})),
                                   metadata=alice)
        assert (job.spec.tenant, job.spec.user) == ("team-a", "alice")  # the caller's, not a field it fills in
        details = await refused(jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec("a2", tenant="team-b")),
                                               metadata=alice), grpc.StatusCode.PERMISSION_DENIED)
        assert "spec.tenant" in details
        await jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec("b1", env={"API_KEY": "secret-b"})), metadata=bob)
        # bob: another tenant's job is neither visible nor cancellable; its env never reaches him
        for call in (jobs.GetJob(jpb.GetJobRequest(job_id="a1"), metadata=bob),
                     jobs.CancelJob(jpb.CancelJobRequest(job_id="a1"), metadata=bob),
                     jobs.ListJobs(jpb.ListJobsRequest(tenant="team-a"), metadata=bob)):
            assert "tenant" in await refused(call, grpc.StatusCode.PERMISSION_DENIED)
        listed = await jobs.ListJobs(jpb.ListJobsRequest(), metadata=bob)
        assert [j.spec.job_id for j in listed.jobs] == ["b1"]
        assert "secret-a" not in str(listed)
        events = []
        async for event in jobs.WatchEvents(jpb.WatchEventsRequest(), metadata=bob):
            events.append(event.job_id)
            if len(events) == 2:
                break
        assert set(events) == {"b1"}
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in jobs.WatchEvents(jpb.WatchEventsRequest(job_id="a1"), metadata=bob):
                pass
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert tc.job("a1").state is not JobState.CANCELLED
        # only an operator drains nodes; an operator sees everything
        await refused(cluster.DrainNode(cpb.NodeRequest(node="r0-n1"), metadata=bob),
                      grpc.StatusCode.PERMISSION_DENIED)
        await cluster.GetCluster(cpb.GetClusterRequest(), metadata=bob)  # reading the cluster is fine
        await cluster.DrainNode(cpb.NodeRequest(node="r0-n1"), metadata=olga)
        everything = await jobs.ListJobs(jpb.ListJobsRequest(), metadata=olga)
        assert sorted(j.spec.job_id for j in everything.jobs) == ["a1", "b1"]
        cancelled = await jobs.CancelJob(jpb.CancelJobRequest(job_id="a1"), metadata=alice)
        assert cancelled.state == tpb.CANCELLED


async def test_missing_bad_and_revoked_tokens_are_unauthenticated(token_file):
    tokens, made = token_file
    async with TestCluster(nodes=1, tls=True, tokens=tokens.path) as tc, tc.client_channel() as channel:
        jobs = jgrpc.JobServiceStub(channel)
        assert "no credentials" in await refused(jobs.ListJobs(jpb.ListJobsRequest()),
                                                 grpc.StatusCode.UNAUTHENTICATED)
        forged = made["alice"][:-4] + "AAAA"
        for metadata in (bearer(forged), bearer("nonsense"), (("authorization", "Basic x"),)):
            await refused(jobs.ListJobs(jpb.ListJobsRequest(), metadata=metadata),
                          grpc.StatusCode.UNAUTHENTICATED)
        await jobs.ListJobs(jpb.ListJobsRequest(), metadata=bearer(made["alice"]))
        TokenFile(tokens.path).revoke("alice")  # the operator's command, another process in real life
        assert "revoked" in await refused(jobs.ListJobs(jpb.ListJobsRequest(), metadata=bearer(made["alice"])),
                                          grpc.StatusCode.UNAUTHENTICATED)
        await jobs.ListJobs(jpb.ListJobsRequest(), metadata=bearer(made["bob"]))  # the others still work


async def test_a_tenant_users_certificate_scopes_like_its_token():
    async with TestCluster(nodes=1, tls=True) as tc:
        issue(tc.certs, "user", "carol", tenant="team-c")
        async with tc.client_channel("user-team-c-carol") as channel:
            jobs = jgrpc.JobServiceStub(channel)
            job = await jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec("c1")))
            assert job.spec.tenant == "team-c"
        await jgrpc.JobServiceStub(tc.channel).SubmitJob(jpb.SubmitJobRequest(spec=spec("op1", tenant="ops")))
        async with tc.client_channel("user-team-c-carol") as channel:
            listed = await jgrpc.JobServiceStub(channel).ListJobs(jpb.ListJobsRequest())
            assert [j.spec.job_id for j in listed.jobs] == ["c1"]
