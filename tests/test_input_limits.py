"""No input corrupts state (issue 16, item 5): every field has a range checked at SubmitJob.

Each case here answered UNKNOWN or was accepted on the main before the limits, and
the first two left the SQLite store out of step with memory for good.
"""

from __future__ import annotations

import asyncio
import math

import grpc
import pytest

from halyard.cli.controlplane import EXIT_STORE_FAILED, _serve
from halyard.clock import ManualClock
from halyard.controlplane.server import ControlPlaneServer
from halyard.controlplane.service import ControlPlane
from halyard.controlplane.store import SqliteStore
from halyard.datamodel import limits as lim
from halyard.policies import make_policy
from halyard.scheduling.state import StoreError
from halyard.scheduling.timing import performance_model_for
from halyard.testing import TestCluster
from halyard.v1 import job_service_pb2 as jpb
from halyard.v1 import job_service_pb2_grpc as jgrpc
from halyard.v1 import types_pb2 as tpb

pytest_plugins = ["halyard.testing.pytest_plugin"]


def spec(job_id: str = "ok", **kw) -> tpb.JobSpec:
    fields = {"model": "resnet50", "num_gpus": 1, "iterations": 1000} | kw
    return tpb.JobSpec(job_id=job_id, **fields)


BAD_SPECS = [
    ({"iterations": 2**63}, "spec.iterations"),
    ({"iterations": 2**64 - 1}, "spec.iterations"),
    ({"iterations": 0, "duration_s": 1e300}, "spec.duration_s"),
    ({"iterations": 0, "duration_s": math.inf}, "spec.duration_s"),
    ({"iterations": 0, "duration_s": math.nan}, "spec.duration_s"),
    ({"num_gpus": 2**32 - 1}, "spec.num_gpus"),
    ({"batch_size": 2**32 - 1}, "spec.batch_size"),
    ({"priority": 2**31 - 1}, "spec.priority"),
    ({"priority": -(2**31)}, "spec.priority"),
    ({"max_gpus": 2**32 - 1}, "spec.max_gpus"),
    ({"deadline": 1e300}, "spec.deadline"),
    ({"deadline": -1.0}, "spec.deadline"),
    ({"deadline": math.nan}, "spec.deadline"),
    ({"parallelism": tpb.Parallelism(data=2**32 - 1)}, "spec.parallelism.data"),
    # A model without layer figures runs data parallel only (found by tests/test_fuzz.py: INTERNAL before).
    ({"model": "vgg16", "num_gpus": 2, "parallelism": tpb.Parallelism(data=1, tensor=2)}, "parallelism"),
    ({"model": "vgg16", "num_gpus": 2, "parallelism": tpb.Parallelism(data=1, pipeline=2)}, "parallelism"),
    ({"job_id": "x" * (lim.MAX_JOB_ID + 1)}, "spec.job_id"),
    ({"job_id": "a\0b"}, "spec.job_id"),
    ({"job_id": "\x1b[31mred"}, "spec.job_id"),
    ({"job_id": "../../x"}, "spec.job_id"),
    ({"job_id": "a/b"}, "spec.job_id"),
    ({"job_id": ".."}, "spec.job_id"),
    ({"job_id": "with space"}, "spec.job_id"),
    ({"tenant": "t/../u"}, "spec.tenant"),
    ({"user": "u" * (lim.MAX_USER + 1)}, "spec.user"),
    ({"model": "m\nx"}, "spec.model"),
    ({"gpu_type": "V100\0"}, "spec.gpu_type"),
    ({"command": ["x"] * (lim.MAX_COMMAND_ARGS + 1)}, "spec.command"),
    ({"command": ["a" * (lim.MAX_COMMAND_BYTES + 1)]}, "spec.command"),
    ({"command": ["sh", "a\0b"]}, "spec.command[1]"),
    ({"env": {f"K{i}": "v" for i in range(lim.MAX_ENV_VARS + 1)}}, "spec.env"),
    ({"env": {"A=B": "v"}}, "spec.env"),
    ({"env": {"K": "v" * (lim.MAX_ENV_BYTES + 1)}}, "spec.env"),
    ({"env": {"K": "a\0b"}}, "spec.env[K]"),
]


@pytest.mark.parametrize("halyard_cluster", [{"nodes": 1}], indirect=True)
async def test_out_of_range_fields_are_refused_naming_the_field(halyard_cluster: TestCluster, tmp_path):
    jobs = jgrpc.JobServiceStub(halyard_cluster.channel)
    for i, (fields, field) in enumerate(BAD_SPECS):
        fields = {"job_id": f"bad{i}"} | fields
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec(**fields)))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (fields, err.value.details())
        assert f"field '{field}'" in err.value.details(), (fields, err.value.details())
    for bad_time in (math.nan, -1.0, 1e300):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec("t"), submit_time=bad_time))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "submit_time" in err.value.details()
    assert halyard_cluster.control_plane.core.records == {}
    await jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec("fine", env={"K": "v"}, command=["true"])))


async def test_store_stays_in_step_after_every_refused_request(tmp_path):
    """The attack of the issue: iterations >= 2^63 and duration_s = 1e300, then ordinary work."""
    db = tmp_path / "state.db"
    async with TestCluster(nodes=1, db=db) as tc:
        jobs = jgrpc.JobServiceStub(tc.channel)
        for fields in ({"iterations": 2**63}, {"iterations": 0, "duration_s": 1e300}):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec("poison", **fields)))
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        await jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec("a")))
        await jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec("b")))
        await jobs.CancelJob(jpb.CancelJobRequest(job_id="b"))
        in_memory = {r.job_id: r.state for r in tc.control_plane.core.records.values()}
        events = len(tc.control_plane.core.log)
    with SqliteStore(db) as store:
        state = store.load()
    assert {r.job_id: r.state for r in state.records} == in_memory
    assert len(state.events) == events


@pytest.mark.parametrize("halyard_cluster", [{"nodes": 1}], indirect=True)
async def test_bad_page_tokens_and_undecodable_messages_are_invalid_argument(halyard_cluster: TestCluster):
    tc = halyard_cluster
    jobs = jgrpc.JobServiceStub(tc.channel)
    for i in range(3):
        await jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec(f"j{i}")))
    for token in ("-1", "+1", "1e3", "99", " 1", "١", "9" * 40):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await jobs.ListJobs(jpb.ListJobsRequest(page_size=1, page_token=token))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, token
        assert "page_token" in err.value.details()
    pages, token = [], ""
    while True:
        page = await jobs.ListJobs(jpb.ListJobsRequest(page_size=1, page_token=token))
        pages += [j.spec.job_id for j in page.jobs]
        if not (token := page.next_page_token):
            break
    assert pages == ["j0", "j1", "j2"]
    raw = tc.channel.unary_unary("/halyard.v1.JobService/SubmitJob")
    for garbage in (b"\xff\xff\xff", b"\x0a\x05abc", b"\x08" + b"\xff" * 11):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await raw(garbage)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, garbage
        assert "does not decode" in err.value.details()
    watch = tc.channel.unary_stream("/halyard.v1.JobService/WatchEvents")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in watch(b"\xff\xff"):
            pass
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize("halyard_cluster", [{"nodes": 1}], indirect=True)
async def test_an_agent_stream_message_that_does_not_decode_is_invalid_argument(halyard_cluster: TestCluster):
    """Connect checks its own requests (calls.CallWrapper's checks_own_requests): first or later message."""
    from halyard.v1 import agent_service_pb2 as apb

    await halyard_cluster.stop_agent("r0-n0")  # the node is free for the raw stream's Register
    await halyard_cluster.wait_for(lambda: not halyard_cluster.control_plane.sessions)
    register = apb.AgentMessage(register=apb.Register(node=tpb.NodeSpec(name="r0-n0"), instance="x"))
    connect = halyard_cluster.channel.stream_stream("/halyard.v1.AgentService/Connect")
    for messages in ([b"\xff\xff\xff"], [register.SerializeToString(), b"\xff\xff\xff"]):
        call = connect(iter(messages))
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in call:
                pass
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, messages
        assert "does not decode" in err.value.details()


@pytest.mark.parametrize("halyard_cluster", [{"nodes": 1}], indirect=True)
async def test_a_request_larger_than_the_limit_is_refused_at_the_door(halyard_cluster: TestCluster):
    jobs = jgrpc.JobServiceStub(halyard_cluster.channel)
    with pytest.raises(grpc.aio.AioRpcError) as err:  # the 3 MB job id
        await jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec("x" * 3_000_000)))
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert halyard_cluster.control_plane.core.records == {}


class FailingStore(SqliteStore):
    """A store whose disk fails after ``good`` saves."""

    def __init__(self, good: int) -> None:
        super().__init__(":memory:")
        self.good = good

    def save(self, records, events) -> None:
        records, events = list(records), list(events)
        if not records and not events:
            return
        if self.good <= 0:
            raise StoreError(":memory:: save failed, nothing was written: disk I/O error")
        self.good -= 1
        super().save(records, events)


async def test_a_store_failure_stops_writes_and_the_daemon_exits_non_zero():
    tc = TestCluster(nodes=1)
    async with tc:
        cp = tc.control_plane
        cp.store = FailingStore(good=1)
        jobs = jgrpc.JobServiceStub(tc.channel)
        await jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec("saved")))
        await tc.wait_for(lambda: cp.failed is not None or cp.core.records["saved"].state.value == "RUNNING")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec("lost")))
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert cp.failed is not None and cp.fatal.is_set()
        with pytest.raises(grpc.aio.AioRpcError) as err:  # every later write is refused too
            await jobs.CancelJob(jpb.CancelJobRequest(job_id="saved"))
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE and "store failed" in err.value.details()


async def test_serve_returns_the_store_failure_exit_status():
    tc = TestCluster(nodes=1)  # not started: only its cluster is used
    policy = make_policy("fifo")
    cp = ControlPlane(tc.cluster, policy, performance_model_for(policy), ManualClock(0.0), FailingStore(good=0),
                      cluster_toml=tc.cluster_toml)
    server = ControlPlaneServer(cp, listen="127.0.0.1:0")
    serving = asyncio.create_task(_serve(server))
    while server.port == 0:
        await asyncio.sleep(0.01)
    async with grpc.aio.insecure_channel(server.address) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await jgrpc.JobServiceStub(channel).SubmitJob(jpb.SubmitJobRequest(spec=spec("x")))
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert await asyncio.wait_for(serving, 10) == EXIT_STORE_FAILED
