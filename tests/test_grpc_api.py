"""The control plane over real gRPC on loopback (the client test kit's own test)."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from google.protobuf import descriptor_pool, message_factory
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from halyard.datamodel import JobState
from halyard.testing import TestCluster
from halyard.v1 import cluster_service_pb2 as cpb
from halyard.v1 import cluster_service_pb2_grpc as cgrpc
from halyard.v1 import job_service_pb2 as jpb
from halyard.v1 import job_service_pb2_grpc as jgrpc
from halyard.v1 import types_pb2 as tpb

pytest_plugins = ["halyard.testing.pytest_plugin"]


def spec(job_id: str, gpus: int = 1, iterations: int = 1000, **kw) -> tpb.JobSpec:
    return tpb.JobSpec(job_id=job_id, model="resnet50", num_gpus=gpus, iterations=iterations, **kw)


async def test_job_runs_to_completion_on_cluster_time(halyard_cluster: TestCluster):
    tc = halyard_cluster
    jobs = jgrpc.JobServiceStub(tc.channel)
    job = await jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec("a", gpus=4)))
    assert job.state == tpb.PENDING and job.iterations_total == 1000
    await tc.wait_for(lambda: tc.job("a").state is JobState.RUNNING)
    finish = tc.job("a").finish_time()
    await tc.advance(finish / 2)
    half = await jobs.GetJob(jpb.GetJobRequest(job_id="a"))
    assert half.state == tpb.RUNNING and half.iterations_done == pytest.approx(500, abs=1)
    assert [n.node for n in half.allocation.nodes] == ["r0-n0"]
    await tc.advance(finish)
    await tc.wait_for(lambda: tc.job("a").state is JobState.COMPLETED)
    done = await jobs.GetJob(jpb.GetJobRequest(job_id="a"))
    assert done.end_time == pytest.approx(finish)  # the agent reports the model's finish instant


async def test_bad_requests_name_the_field_and_change_nothing(halyard_cluster: TestCluster):
    jobs = jgrpc.JobServiceStub(halyard_cluster.channel)
    cases = [
        (spec("x", gpus=0), grpc.StatusCode.INVALID_ARGUMENT, "spec.num_gpus"),
        (spec("", gpus=1), grpc.StatusCode.INVALID_ARGUMENT, "spec.job_id"),
        (tpb.JobSpec(job_id="y", model="nosuchnet", num_gpus=1, iterations=5), grpc.StatusCode.INVALID_ARGUMENT,
         "unknown model 'nosuchnet'"),
        (spec("z", gpus=1, iterations=0), grpc.StatusCode.INVALID_ARGUMENT, "spec.iterations"),
        (spec("big", gpus=64), grpc.StatusCode.INVALID_ARGUMENT, "asks for 64 GPUs"),
    ]
    for bad, code, words in cases:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await jobs.SubmitJob(jpb.SubmitJobRequest(spec=bad))
        assert err.value.code() == code and words in err.value.details()
    assert halyard_cluster.control_plane.core.records == {}
    assert len(halyard_cluster.control_plane.core.log) == 0
    await jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec("dup")))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec("dup")))
    assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
    for call, code in [(jobs.GetJob(jpb.GetJobRequest(job_id="nope")), grpc.StatusCode.NOT_FOUND),
                       (jobs.GetJob(jpb.GetJobRequest()), grpc.StatusCode.INVALID_ARGUMENT),
                       (jobs.ListJobs(jpb.ListJobsRequest(page_size=5000)), grpc.StatusCode.INVALID_ARGUMENT),
                       (jobs.ListJobs(jpb.ListJobsRequest(page_token="abc")), grpc.StatusCode.INVALID_ARGUMENT)]:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call
        assert err.value.code() == code


async def test_list_pages_filters_and_cancel(halyard_cluster: TestCluster):
    tc = halyard_cluster
    jobs = jgrpc.JobServiceStub(tc.channel)
    for i in range(5):
        await jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec(f"w{i}", gpus=8, iterations=10**6)))
    await tc.wait_for(lambda: len(tc.control_plane.core.running) == 4)  # 4 nodes x 8 GPUs
    first = await jobs.ListJobs(jpb.ListJobsRequest(page_size=3))
    rest = await jobs.ListJobs(jpb.ListJobsRequest(page_size=3, page_token=first.next_page_token))
    assert [j.spec.job_id for j in (*first.jobs, *rest.jobs)] == [f"w{i}" for i in range(5)]
    assert rest.next_page_token == ""
    pending = await jobs.ListJobs(jpb.ListJobsRequest(states=[tpb.PENDING]))
    assert [j.spec.job_id for j in pending.jobs] == ["w4"]
    cancelled = await jobs.CancelJob(jpb.CancelJobRequest(job_id="w0"))
    assert cancelled.state == tpb.CANCELLED
    await tc.wait_for(lambda: tc.job("w4").state is JobState.RUNNING)  # took the freed GPUs
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await jobs.CancelJob(jpb.CancelJobRequest(job_id="w0"))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_watch_resumes_from_a_sequence_number(halyard_cluster: TestCluster):
    jobs = jgrpc.JobServiceStub(halyard_cluster.channel)
    await jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec("a")))
    await halyard_cluster.wait_for(lambda: halyard_cluster.job("a").state is JobState.RUNNING)
    stream = jobs.WatchEvents(jpb.WatchEventsRequest(after_seq=0))
    seen = [await stream.read(), await stream.read()]
    assert [(e.seq, e.kind) for e in seen] == [(1, "SUBMITTED"), (2, "STARTED")]
    await jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec("b")))
    live = await stream.read()
    assert (live.seq, live.job_id, live.kind) == (3, "b", "SUBMITTED")
    stream.cancel()
    resumed = jobs.WatchEvents(jpb.WatchEventsRequest(after_seq=2))
    assert (await resumed.read()).seq == 3
    resumed.cancel()


async def test_drain_keeps_new_work_off_a_node(halyard_cluster: TestCluster):
    tc = halyard_cluster
    cluster = cgrpc.ClusterServiceStub(tc.channel)
    jobs = jgrpc.JobServiceStub(tc.channel)
    status = await cluster.DrainNode(cpb.NodeRequest(node="r0-n0"))
    assert status.drained and status.connected
    await jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec("a", gpus=8)))
    await tc.wait_for(lambda: tc.job("a").state is JobState.RUNNING)
    assert tc.job("a").allocation.node_names != ("r0-n0",)
    await cluster.UndrainNode(cpb.NodeRequest(node="r0-n0"))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await cluster.DrainNode(cpb.NodeRequest(node="r9-n9"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    info = await cluster.GetPolicy(cpb.GetPolicyRequest())
    assert info.name == "fifo" and {(s.stage, s.choice) for s in info.stages} >= {("ordering", "fifo")}
    view = await cluster.GetCluster(cpb.GetClusterRequest())
    assert view.total_gpus == 32 and view.free_gpus == 24 and view.running_jobs == 1
    assert all(n.connected for n in view.nodes)


async def test_health_and_reflection_for_stock_clients(halyard_cluster: TestCluster):
    tc = halyard_cluster
    health = health_pb2_grpc.HealthStub(tc.channel)
    reply = await health.Check(health_pb2.HealthCheckRequest(service=""))
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    watch = health.Watch(health_pb2.HealthCheckRequest(service=""))  # a stream the servicer writes to
    assert (await watch.read()).status == health_pb2.HealthCheckResponse.SERVING
    watch.cancel()
    services, answer = await asyncio.to_thread(get_cluster_by_reflection, tc.address)
    assert {"halyard.v1.JobService", "halyard.v1.ClusterService", "halyard.v1.AgentService"} <= services
    assert answer.total_gpus == 32 and len(answer.nodes) == 4


def get_cluster_by_reflection(address: str):
    """A client that knows nothing of Halyard: discover the services, call GetCluster by name."""
    with grpc.insecure_channel(address) as channel:
        db = ProtoReflectionDescriptorDatabase(channel)
        services = set(db.get_services())
        pool = descriptor_pool.DescriptorPool(db)
        method = pool.FindServiceByName("halyard.v1.ClusterService").FindMethodByName("GetCluster")
        request_cls = message_factory.GetMessageClass(method.input_type)
        response_cls = message_factory.GetMessageClass(method.output_type)
        call = channel.unary_unary("/halyard.v1.ClusterService/GetCluster",
                                   request_serializer=request_cls.SerializeToString,
                                   response_deserializer=response_cls.FromString)
        return services, call(request_cls(), timeout=5)


async def test_drain_survives_a_control_plane_restart(tmp_path):
    db = tmp_path / "state.db"
    async with TestCluster(nodes=2, db=db) as tc:
        await cgrpc.ClusterServiceStub(tc.channel).DrainNode(cpb.NodeRequest(node="r0-n1"))
    async with TestCluster(nodes=2, db=db) as tc:
        view = await cgrpc.ClusterServiceStub(tc.channel).GetCluster(cpb.GetClusterRequest())
        assert {n.spec.name: n.drained for n in view.nodes} == {"r0-n0": False, "r0-n1": True}
