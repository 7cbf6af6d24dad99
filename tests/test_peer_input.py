"""What peers send is checked like client input (issue 32, defects 3 and 4), over real gRPC streams.

* An enum value this build does not know, from any peer, is logged, counted
  (``halyard_unknown_enum_total{message,field}``) and read as the default docs/api.md names:
  an agent's ``Exited(status=99)`` requeues the job (on the main before this change it removed
  the placement, then ``ExitStatus.Name(99)`` raised, the stream ended and the job stayed RUNNING
  with its GPUs held), a client's ``ListJobs(states=[99])`` matches no job (it was refused), a
  control plane's ``ClockKind`` 99 is read as ACCELERATED by the agent.
* Every agent report is range-checked: a heartbeat's numbers are finite and in range, its detail
  cleaned of escape sequences and cut (a 900 KB detail full of ANSI escapes became a 900,015-character
  drain reason), a Register's running job ids are length-limited.
"""

from __future__ import annotations

import asyncio
import math

import grpc
import pytest

from halyard.agent.cluster_copy import ClusterCopy
from halyard.agent.emulated import EmulatedAgent
from halyard.datamodel import JobState
from halyard.datamodel import limits as lim
from halyard.peer_enums import enum_name
from halyard.testing.cluster import WAIT_TIMEOUT_S, TestCluster, small_cluster_toml
from halyard.v1 import agent_service_pb2 as apb
from halyard.v1 import agent_service_pb2_grpc as agrpc
from halyard.v1 import cluster_service_pb2 as cpb
from halyard.v1 import cluster_service_pb2_grpc as cgrpc
from halyard.v1 import job_service_pb2 as jpb
from halyard.v1 import job_service_pb2_grpc as jgrpc
from halyard.v1 import types_pb2 as tpb
from halyard.v1.types_pb2 import NodeSpec
from halyard.wire import node_to_pb

pytest_plugins = ["halyard.testing.pytest_plugin"]

UNKNOWN = 99  # an enum value no copy of halyard.v1 has (yet)


class RawAgent:
    """An agent of another build: one real AgentService.Connect stream, messages written by hand."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.call = agrpc.AgentServiceStub(channel).Connect()

    async def register(self, node: str, running: list[apb.RunningJob] = ()) -> apb.Registered:
        await self.call.write(apb.AgentMessage(register=apb.Register(node=NodeSpec(name=node), backend="emulated",
                                                                     running=running, instance="raw")))
        reply = await asyncio.wait_for(self.call.read(), WAIT_TIMEOUT_S)
        assert reply is not grpc.aio.EOF and reply.WhichOneof("body") == "registered", reply
        return reply.registered

    async def read_until(self, kind: str) -> apb.ControlMessage:
        """The next command of ``kind``; fails if the stream ends first."""
        while True:
            reply = await asyncio.wait_for(self.call.read(), WAIT_TIMEOUT_S)
            assert reply is not grpc.aio.EOF, f"the control plane ended the stream before a {kind}"
            if reply.WhichOneof("body") == kind:
                return reply


def scraped(tc: TestCluster) -> str:
    return tc.server.metrics.render().decode()


def counted(tc: TestCluster, line_start: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in scraped(tc).splitlines() if line.startswith(line_start))


async def running_on(tc: TestCluster, job_id: str) -> tuple[str, int]:
    await tc.wait_for(lambda: tc.job(job_id).state is JobState.RUNNING)
    return tc.control_plane.placed[job_id][0], tc.job(job_id).attempt


async def take_over(tc: TestCluster, node: str) -> None:
    """Stop ``node``'s emulated agent, so a raw one can register for it."""
    await tc.stop_agent(node)
    await tc.wait_for(lambda: node not in tc.control_plane.sessions)


# --- unknown enum values ---------------------------------------------------------------------

async def test_an_unknown_exit_status_requeues_the_job_and_is_counted():
    async with TestCluster(nodes=2) as tc:
        jobs = jgrpc.JobServiceStub(tc.channel)
        await jobs.SubmitJob(jpb.SubmitJobRequest(spec=tpb.JobSpec(job_id="j", model="resnet50", num_gpus=8,
                                                                   iterations=10**9)))
        node, attempt = await running_on(tc, "j")
        await take_over(tc, node)
        async with grpc.aio.insecure_channel(tc.address) as channel:
            agent = RawAgent(channel)
            await agent.register(node, [apb.RunningJob(job_id="j", attempt=attempt, leader=True)])
            assert tc.control_plane.placed.get("j") == (node,)  # reconciliation kept it: the agent runs it
            await agent.call.write(apb.AgentMessage(exited=apb.Exited(job_id="j", attempt=attempt, status=UNKNOWN,
                                                                      cluster_time=tc.now(), checkpoint_iteration=5)))
            ack = await agent.read_until("exit_ack")  # applied and stored: the stream goes on
            assert (ack.exit_ack.job_id, ack.exit_ack.attempt) == ("j", attempt)
            record = tc.job("j")
            assert record.attempt > attempt or record.state is JobState.PENDING  # requeued, not stranded
            assert record.attempt > attempt or "j" not in tc.control_plane.placed  # the old attempt holds no GPU
            requeued = [e for e in tc.control_plane.core.log.since(0) if e.job_id == "j" and "EXIT_LOST" in e.detail]
            assert requeued, "the requeue names the default the unknown status was read as"
            assert counted(tc, 'halyard_unknown_enum_total{field="status",message="Exited"}') == 1
            agent.call.cancel()


async def test_an_unknown_state_in_a_list_filter_matches_no_job_and_is_counted(halyard_cluster: TestCluster):
    tc = halyard_cluster
    jobs = jgrpc.JobServiceStub(tc.channel)
    await jobs.SubmitJob(jpb.SubmitJobRequest(spec=tpb.JobSpec(job_id="a", model="resnet50", num_gpus=1,
                                                               iterations=10**9)))
    await tc.wait_for(lambda: tc.job("a").state is JobState.RUNNING)
    only_unknown = await jobs.ListJobs(jpb.ListJobsRequest(states=[UNKNOWN]))
    assert list(only_unknown.jobs) == []  # not "no filter": a state this control plane has no job in
    mixed = await jobs.ListJobs(jpb.ListJobsRequest(states=[tpb.RUNNING, UNKNOWN]))
    assert [j.spec.job_id for j in mixed.jobs] == ["a"]
    assert counted(tc, 'halyard_unknown_enum_total{field="states",message="ListJobsRequest"}') == 2


async def test_an_unknown_clock_kind_from_the_control_plane_is_read_as_accelerated():
    toml = small_cluster_toml(1)
    copy = ClusterCopy.parse(toml, source="<test>")
    registered = apb.ControlMessage(registered=apb.Registered(
        node="r0-n0", node_spec=node_to_pb(copy.cluster.node("r0-n0")), cluster_digest=copy.digest,
        heartbeat_interval_s=60.0, clock=apb.ClockParams(kind=UNKNOWN, speedup=2.0, cluster_origin_s=100.0)))
    heard: asyncio.Queue[apb.AgentMessage] = asyncio.Queue()

    async def connect(requests, context):
        yield registered.SerializeToString()
        async for msg in requests:
            heard.put_nowait(msg)

    server = grpc.aio.server()
    handler = grpc.stream_stream_rpc_method_handler(connect, request_deserializer=apb.AgentMessage.FromString)
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("halyard.v1.AgentService",
                                                                          {"Connect": handler})])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    agent = EmulatedAgent(f"127.0.0.1:{port}", "r0-n0", cluster=copy)
    try:
        agent.start()
        await asyncio.wait_for(agent.connected.wait(), WAIT_TIMEOUT_S)
        assert agent.clock_params.kind == "scaled" and agent.clock_params.speedup == 2.0
        assert agent.unknown_enums.counts == {("Registered", "clock.kind"): 1}
        while (await asyncio.wait_for(heard.get(), WAIT_TIMEOUT_S)).WhichOneof("body") != "heartbeat":
            pass  # the agent runs on: it heartbeats
    finally:
        await agent.stop()
        await server.stop(None)


def test_the_cli_names_a_state_or_code_it_does_not_know():
    assert enum_name(tpb.JobState, tpb.RUNNING) == "RUNNING"
    assert enum_name(tpb.JobState, UNKNOWN) == "JobState(99)"
    assert enum_name(jpb.WaitCode, UNKNOWN) == "WaitCode(99)"


# --- range checks on agent reports ------------------------------------------------------------

@pytest.mark.parametrize("utilization", [math.nan, math.inf, -math.inf, -0.5, 1.5])
async def test_a_heartbeat_out_of_range_is_refused_naming_the_field(utilization):
    async with TestCluster(nodes=2) as tc:
        await take_over(tc, "r0-n1")
        async with grpc.aio.insecure_channel(tc.address) as channel:
            agent = RawAgent(channel)
            await agent.register("r0-n1")
            await agent.call.write(apb.AgentMessage(heartbeat=apb.Heartbeat(cluster_time=tc.now(), healthy=True,
                                                                            gpu_utilization=0.25)))
            await agent.call.write(apb.AgentMessage(heartbeat=apb.Heartbeat(cluster_time=tc.now(), healthy=True,
                                                                            gpu_utilization=utilization)))
            field = 'halyard_agent_reports_refused_total{field="heartbeat.gpu_utilization"}'
            await tc.wait_for(lambda: counted(tc, field) == 1)
            session = tc.control_plane.sessions["r0-n1"]
            assert session.heartbeat.gpu_utilization == 0.25  # the refused report changed nothing
            assert 'halyard_node_gpu_utilization{node="r0-n1"} 0.25' in scraped(tc)
            assert not [line for line in scraped(tc).splitlines() if line.endswith((" NaN", " +Inf", " -Inf"))
                        and "_bucket" not in line]
            agent.call.cancel()


async def test_an_unhealthy_heartbeat_with_a_huge_escaped_detail_drains_with_a_short_clean_reason():
    async with TestCluster(nodes=2) as tc:
        await take_over(tc, "r0-n1")
        detail = "\x1b[31mXid 79\x1b[0m\n" + "\x1b[2J\x1b]0;pwned\x07" * 40_000 + "A" * 340_000
        assert 900_000 < len(detail) < lim.MAX_REQUEST_BYTES - 1000  # the 900 KB, under the message cap
        async with grpc.aio.insecure_channel(tc.address, options=[("grpc.max_send_message_length", 4 << 20)]) as ch:
            agent = RawAgent(ch)
            await agent.register("r0-n1")
            await agent.call.write(apb.AgentMessage(heartbeat=apb.Heartbeat(cluster_time=tc.now(), healthy=False,
                                                                            detail=detail)))
            await tc.wait_for(lambda: "r0-n1" in tc.control_plane.drained)
            status = await cgrpc.ClusterServiceStub(tc.channel).GetCluster(cpb.GetClusterRequest())
            reason = next(n.drain_reason for n in status.nodes if n.spec.name == "r0-n1")
            assert len(reason) <= lim.MAX_DRAIN_REASON, len(reason)
            assert reason.startswith("unhealthy: Xid 79 ") and reason.isprintable() and "pwned" not in reason
            kept = tc.control_plane.sessions["r0-n1"].heartbeat.detail
            assert len(kept) <= lim.MAX_HEALTH_DETAIL and kept.isprintable()
            agent.call.cancel()


@pytest.mark.parametrize(("running", "field"), [
    ([apb.RunningJob(job_id="x" * (lim.MAX_JOB_ID + 1), attempt=1)], "register.running[0].job_id"),
    ([apb.RunningJob(job_id="ok", attempt=1), apb.RunningJob(job_id="a\x1b[2Jb", attempt=1)],
     "register.running[1].job_id"),
    ([apb.RunningJob(job_id="ok", attempt=1, iterations_done=math.nan)], "register.running[0].iterations_done"),
])
async def test_a_register_with_a_bad_running_job_is_refused_naming_the_field(running, field):
    async with TestCluster(nodes=2) as tc:
        await take_over(tc, "r0-n1")
        async with grpc.aio.insecure_channel(tc.address) as channel:
            call = agrpc.AgentServiceStub(channel).Connect()
            await call.write(apb.AgentMessage(register=apb.Register(node=NodeSpec(name="r0-n1"), running=running)))
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call.read()
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert f"field '{field}'" in refused.value.details()
        assert "r0-n1" not in tc.control_plane.sessions  # nothing of it was kept


@pytest.mark.parametrize(("report", "field"), [
    (apb.AgentMessage(register=apb.Register(backend="b" * 100)), "register.backend"),
    (apb.AgentMessage(register=apb.Register(version="v\x00")), "register.version"),
    (apb.AgentMessage(register=apb.Register(cluster_digest="z" * 64)), "register.cluster_digest"),
])
async def test_a_register_with_bad_fields_is_refused_naming_the_field(report, field):
    async with TestCluster(nodes=2) as tc:
        await take_over(tc, "r0-n1")
        report.register.node.name = "r0-n1"
        async with grpc.aio.insecure_channel(tc.address) as channel:
            call = agrpc.AgentServiceStub(channel).Connect()
            await call.write(report)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call.read()
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert f"field '{field}'" in refused.value.details()


@pytest.mark.parametrize(("message", "field"), [
    (apb.AgentMessage(progress=apb.Progress(job_id="j" * 1000, attempt=1)), "progress.job_id"),
    (apb.AgentMessage(progress=apb.Progress(job_id="j", attempt=1, compute_s=math.nan)), "progress.compute_s"),
    (apb.AgentMessage(exited=apb.Exited(job_id="j" * 1000, attempt=1, status=apb.EXIT_FAILED)), "exited.job_id"),
    (apb.AgentMessage(heartbeat=apb.Heartbeat(cluster_time=math.inf)), "heartbeat.cluster_time"),
    (apb.AgentMessage(profile_result=apb.ProfileResult(job_id="p" * 1000)), "profile_result.job_id"),
])
async def test_other_reports_out_of_range_are_refused_and_the_stream_goes_on(message, field):
    async with TestCluster(nodes=2) as tc:
        await take_over(tc, "r0-n1")
        async with grpc.aio.insecure_channel(tc.address) as channel:
            agent = RawAgent(channel)
            await agent.register("r0-n1")
            await agent.call.write(message)
            await tc.wait_for(lambda: counted(tc, f'halyard_agent_reports_refused_total{{field="{field}"}}') == 1)
            await agent.call.write(apb.AgentMessage(heartbeat=apb.Heartbeat(cluster_time=tc.now(), healthy=True,
                                                                            gpu_utilization=0.5)))
            await tc.wait_for(lambda: (tc.control_plane.sessions["r0-n1"].heartbeat or apb.Heartbeat())
                              .gpu_utilization == 0.5)
            agent.call.cancel()


# --- a connect storm (issue 32: registration no longer starves heartbeats) ---------------------------

async def test_a_burst_of_registrations_shares_one_commit_and_pass():
    """Each Register used to make a commit and a scheduling pass of its own (each O(running jobs) on the event
    loop, while the storm's heartbeats waited); registrations within REGISTRATION_BATCH_S share them."""
    async with TestCluster(nodes=16) as tc:
        nodes = list(tc.agents)
        for node in nodes:
            await take_over(tc, node)
        jobs = jgrpc.JobServiceStub(tc.channel)
        await jobs.SubmitJobs(jpb.SubmitJobsRequest(jobs=[jpb.SubmitJobRequest(spec=tpb.JobSpec(
            job_id=f"j{i}", model="resnet50", num_gpus=8, iterations=10**9)) for i in range(32)]))
        await tc.wait_for(lambda: len(tc.control_plane.core.pending) == 32)
        passes: list[float] = []
        tc.control_plane.on_pass = passes.append
        async with grpc.aio.insecure_channel(tc.address) as channel:
            agents = [RawAgent(channel) for _ in nodes]
            await asyncio.gather(*(agent.register(node) for agent, node in zip(agents, nodes, strict=True)))
            await tc.wait_for(lambda: len(tc.control_plane.core.running) == 16)
            assert len(passes) <= 3, f"{len(passes)} passes for one burst of {len(nodes)} registrations"
            for agent in agents:
                agent.call.cancel()
