"""The lost-agent guard (controlplane/disruption.py): many agents silent at once are held, not
declared lost, as Kubernetes' node-lifecycle controller does in an unhealthy zone."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from halyard.agent.backoff import Backoff
from halyard.controlplane.disruption import Disruption, DisruptionSettings, LostAgentGuard
from halyard.datamodel import JobState, ValidationError
from halyard.testing import TestCluster
from halyard.v1 import agent_service_pb2 as apb
from halyard.v1 import agent_service_pb2_grpc as agrpc
from halyard.v1 import job_service_pb2 as jpb
from halyard.v1 import job_service_pb2_grpc as jgrpc
from halyard.v1 import types_pb2 as tpb

NODES = 8
HEARTBEAT_S, TIMEOUT_S = 0.1, 1.0  # the guard counts agents quiet for half the timeout


def test_zone_state_follows_kubernetes_rule():
    """nodelifecycle ComputeZoneState: unhealthy when more than 2 NotReady and >= the threshold share."""
    guard = LostAgentGuard()
    assert guard.classify(2, 2) is Disruption.NORMAL  # two silent never disrupt, even all of them
    assert guard.classify(5, 10) is Disruption.NORMAL  # 0.50 < 0.55
    assert guard.classify(6, 10) is Disruption.PARTIAL  # 0.60 >= 0.55
    assert guard.classify(10, 10) is Disruption.FULL
    assert LostAgentGuard(DisruptionSettings(unhealthy_threshold=0.3)).classify(3, 10) is Disruption.PARTIAL


def test_partial_disruption_admits_at_the_secondary_rate_in_a_large_cluster_only():
    names = [f"n{i}" for i in range(6)]
    large = LostAgentGuard(DisruptionSettings(secondary_rate=2.0, large_cluster_size=5))
    assert large.admit(names, 6, 10, now=0.0) == []  # the disruption starts with an empty bucket
    assert large.admit(names, 6, 10, now=0.25) == []  # half a token
    assert large.admit(names, 6, 10, now=0.5) == ["n0"]  # one node per 1/rate seconds, oldest first
    assert large.admit(names[1:], 6, 10, now=0.6) == []
    assert large.admit(names[1:], 6, 10, now=10.0) == ["n1"]  # burst 1: a long wait frees one node, not twenty
    small = LostAgentGuard(DisruptionSettings(secondary_rate=2.0, large_cluster_size=50))
    assert all(small.admit(names, 6, 10, now=t) == [] for t in (0.0, 1.0, 100.0))  # rate 0 in a small cluster
    full = LostAgentGuard(DisruptionSettings(secondary_rate=2.0, large_cluster_size=5))
    assert all(full.admit(names, 10, 10, now=t) == [] for t in (0.0, 1.0, 100.0))  # all silent: none lost
    assert full.admit(names[:2], 2, 10, now=101.0) == names[:2]  # healthy again: at once


@pytest.mark.parametrize(("kwargs", "flag"), [({"unhealthy_threshold": 1.5}, "--unhealthy-zone-threshold"),
                                              ({"unhealthy_threshold": 0.0}, "--unhealthy-zone-threshold"),
                                              ({"secondary_rate": -1.0}, "--secondary-node-eviction-rate"),
                                              ({"large_cluster_size": -1}, "--large-cluster-size-threshold")])
def test_bad_settings_name_the_flag(kwargs, flag):
    with pytest.raises(ValidationError, match=flag):
        DisruptionSettings(**kwargs)


async def _cluster_of_running_jobs(tc: TestCluster, count: int = NODES) -> None:
    """``count`` long 8-GPU jobs j0.. running, one per node (first fit: on the first ``count`` schedulable nodes)."""
    jobs = jgrpc.JobServiceStub(tc.channel)
    for i in range(count):
        await jobs.SubmitJob(jpb.SubmitJobRequest(spec=tpb.JobSpec(job_id=f"j{i}", model="resnet50", num_gpus=8,
                                                                   iterations=1_000_000)))
    await tc.wait_for(lambda: all(tc.job(f"j{i}").state is JobState.RUNNING for i in range(count)))


def _job_on(tc: TestCluster, node: str) -> str:
    return next(j for j, nodes in tc.control_plane.placed.items() if node in nodes)


async def test_many_frozen_agents_are_held_then_resume_without_a_requeue():
    async with TestCluster(nodes=NODES, heartbeat_s=HEARTBEAT_S, heartbeat_timeout_s=TIMEOUT_S) as tc:
        await _cluster_of_running_jobs(tc)
        cp = tc.control_plane
        frozen = [n.name for n in tc.cluster.nodes[:5]]  # 5 of 8: 62% >= 55%
        for node in frozen:
            tc.freeze_agent(node)
        await tc.wait_for(lambda: cp.agents.guard.state is Disruption.PARTIAL)
        # Each is marked silent by the liveness check that finds it past the timeout and holds it: the check
        # that, without the guard, declares it lost (at <= 50 nodes the guard then admits none).
        await tc.wait_for(lambda: all(node not in cp.sessions or cp.sessions[node].silent for node in frozen))
        assert all(tc.job(f"j{i}").preemptions == 0 for i in range(NODES))
        assert all(node in cp.sessions and cp.sessions[node].silent for node in frozen)
        held = [tc.cluster.node(n).index for n in frozen]
        assert not cp.core.free.schedulable[held].any()  # held nodes take no new work
        for node in frozen:
            tc.freeze_agent(node, False)
        await tc.wait_for(lambda: cp.agents.guard.state is Disruption.NORMAL and not any(s.silent for s in
                                                                                 cp.sessions.values()))
        assert cp.core.free.schedulable[held].all()
        assert all(tc.job(f"j{i}").state is JobState.RUNNING and tc.job(f"j{i}").preemptions == 0
                   for i in range(NODES))


async def test_once_few_are_silent_the_rest_are_declared_lost():
    async with TestCluster(nodes=NODES, heartbeat_s=HEARTBEAT_S, heartbeat_timeout_s=TIMEOUT_S) as tc:
        await _cluster_of_running_jobs(tc)
        cp = tc.control_plane
        frozen = [n.name for n in tc.cluster.nodes[:5]]
        lost_jobs = {_job_on(tc, n) for n in frozen[2:]}
        for node in frozen:
            tc.freeze_agent(node)
        await tc.wait_for(lambda: cp.agents.guard.state is Disruption.PARTIAL)
        for node in frozen[:2]:  # 3 of 8 silent now: 37% < 55%, the cluster is healthy again
            tc.freeze_agent(node, False)
        await tc.wait_for(lambda: all(tc.job(j).preemptions == 1 for j in lost_jobs))
        assert all(n not in cp.sessions for n in frozen[2:])
        kept = {f"j{i}" for i in range(NODES)} - lost_jobs
        assert all(tc.job(j).state is JobState.RUNNING and tc.job(j).preemptions == 0 for j in kept)


async def test_agents_heard_again_one_by_one_after_a_disruption_are_not_declared_lost():
    """A partition heals over a heartbeat or so: the first agents heard end the disruption (4 of 8 silent
    is under 55%), and the ones still silent get one more timeout from then (Kubernetes updates every
    node's probe timestamp when it leaves disruption mode) instead of being declared lost in the same
    check, just before they speak. One that stays silent through it is declared lost. Before, the last
    four were requeued the moment the first came back."""
    async with TestCluster(nodes=NODES, heartbeat_s=HEARTBEAT_S, heartbeat_timeout_s=TIMEOUT_S) as tc:
        await _cluster_of_running_jobs(tc)
        cp = tc.control_plane
        frozen = [n.name for n in tc.cluster.nodes[:5]]
        for node in frozen:
            tc.freeze_agent(node)
        await tc.wait_for(lambda: cp.agents.guard.state is Disruption.PARTIAL)
        await tc.wait_for(lambda: all(node in cp.sessions and cp.sessions[node].silent for node in frozen))
        tc.freeze_agent(frozen[0], False)
        await tc.wait_for(lambda: cp.agents.guard.state is Disruption.NORMAL)
        for node in frozen[1:4]:  # after the check that ended the disruption
            tc.freeze_agent(node, False)
        await tc.wait_for(lambda: not any(cp.sessions[n].silent for n in frozen[:4]))
        assert all(tc.job(f"j{i}").preemptions == 0 for i in range(NODES))
        stays_silent = _job_on(tc, frozen[4])
        await tc.wait_for(lambda: tc.job(stays_silent).preemptions == 1)  # one more timeout, then lost
        assert sum(tc.job(f"j{i}").preemptions for i in range(NODES)) == 1


async def test_a_starved_control_plane_does_not_charge_its_stall_to_the_agents():
    """The event loop blocked for longer than the timeout: heartbeats wait in gRPC meanwhile, so
    the late liveness check must not declare the agents lost."""
    async with TestCluster(nodes=2, heartbeat_s=HEARTBEAT_S, heartbeat_timeout_s=TIMEOUT_S) as tc:
        jobs = jgrpc.JobServiceStub(tc.channel)
        await jobs.SubmitJob(jpb.SubmitJobRequest(spec=tpb.JobSpec(job_id="a", model="resnet50", num_gpus=16,
                                                                   iterations=1_000_000)))
        await tc.wait_for(lambda: tc.job("a").state is JobState.RUNNING)
        starved_from = time.monotonic()
        time.sleep(1.5)  # the whole process starved: no task runs
        cp = tc.control_plane
        await tc.wait_for(lambda: cp.agents._judged_from > starved_from)  # the late liveness check has run
        assert tc.job("a").state is JobState.RUNNING and tc.job("a").preemptions == 0
        assert len(tc.control_plane.sessions) == 2


async def _one_frozen_agent_is_declared_lost(tc: TestCluster) -> None:
    """Freeze the first node's agent: it is declared lost and its job requeued (the guard does not hold it)."""
    first = tc.cluster.nodes[0].name
    job = _job_on(tc, first)
    tc.freeze_agent(first)
    await tc.wait_for(lambda: tc.job(job).preemptions == 1, timeout=10)
    assert tc.control_plane.agents.guard.state is Disruption.NORMAL


async def test_agents_that_left_cleanly_are_not_counted_silent():
    """note5 "not mended" 4: four of eight agents leave (a graceful shutdown, holding no jobs); one more then
    freezes. It is one silent node of four, so it is declared lost and its job requeued; counting the four
    that left as silent (5 of 8) held it for ever (rate 0 at <= 50 nodes)."""
    async with TestCluster(nodes=NODES, heartbeat_s=HEARTBEAT_S, heartbeat_timeout_s=TIMEOUT_S) as tc:
        await _cluster_of_running_jobs(tc, 4)
        cp = tc.control_plane
        leaving = [n.name for n in tc.cluster.nodes[4:]]
        assert not any(n in nodes for nodes in cp.placed.values() for n in leaving)
        await asyncio.gather(*(tc.agents[n].leave() for n in leaving))
        await tc.wait_for(lambda: not any(n in cp.sessions for n in leaving))
        await _one_frozen_agent_is_declared_lost(tc)


async def test_a_cut_stream_is_not_a_clean_leave():
    """An agent whose call is cut (a crash, a network fault) stays silent to the guard: only a half-close leaves."""
    async with TestCluster(nodes=2, heartbeat_s=HEARTBEAT_S, heartbeat_timeout_s=TIMEOUT_S) as tc:
        cp = tc.control_plane
        node = tc.cluster.nodes[1].name
        await tc.agents[node].stop()  # like a killed process
        await tc.wait_for(lambda: node not in cp.sessions)
        assert node in cp.agents._known and node in cp.agents._absent_since


async def test_drained_nodes_are_not_counted_silent():
    """note5 "not mended" 4: four of eight nodes are drained and their agents stopped for maintenance; one more
    freezes. The drained nodes are out of service by choice, so the frozen one is one silent node of four and is
    declared lost (its job requeued), not held for ever as 5 of 8 silent."""
    from halyard.v1 import cluster_service_pb2 as cpb
    from halyard.v1 import cluster_service_pb2_grpc as cgrpc

    async with TestCluster(nodes=NODES, heartbeat_s=HEARTBEAT_S, heartbeat_timeout_s=TIMEOUT_S) as tc:
        cluster = cgrpc.ClusterServiceStub(tc.channel)
        drained = [n.name for n in tc.cluster.nodes[4:]]
        for node in drained:
            await cluster.DrainNode(cpb.NodeRequest(node=node, reason="maintenance"))
        await _cluster_of_running_jobs(tc, 4)
        cp = tc.control_plane
        for node in drained:
            await tc.agents[node].stop()
        await tc.wait_for(lambda: not any(n in cp.sessions for n in drained))
        await _one_frozen_agent_is_declared_lost(tc)


async def test_jobs_of_agents_that_leave_are_requeued_at_once():
    """Five of eight agents leave while each runs a job: they stopped those jobs, so the jobs are requeued as soon as
    the streams close. Before, the nodes counted as silent while holding jobs, 5 of 8 made the guard hold them, and
    the jobs stayed RUNNING on agents that had gone."""
    async with TestCluster(nodes=NODES, heartbeat_s=HEARTBEAT_S, heartbeat_timeout_s=TIMEOUT_S) as tc:
        await _cluster_of_running_jobs(tc, 5)
        cp = tc.control_plane
        leaving = sorted({n for nodes in cp.placed.values() for n in nodes})
        assert len(leaving) == 5
        await asyncio.gather(*(tc.agents[n].leave() for n in leaving))
        await tc.wait_for(lambda: all(tc.job(f"j{i}").preemptions == 1 for i in range(5)), timeout=TIMEOUT_S)
        assert not any(n in nodes for nodes in cp.placed.values() for n in leaving)  # nothing placed on them again


async def test_a_leaving_node_takes_no_new_work():
    """Between Leaving and the stream closing the node is stopping: a pass must not place work on it."""
    async with TestCluster(nodes=1, heartbeat_s=HEARTBEAT_S, heartbeat_timeout_s=TIMEOUT_S) as tc:
        cp = tc.control_plane
        node = tc.cluster.nodes[0].name
        index = tc.cluster.node(node).index
        tc.agents[node]._outbox.put_nowait(apb.AgentMessage(leaving=apb.Leaving(reason="test")))  # stream kept open
        await tc.wait_for(lambda: cp.sessions[node].left)
        assert not cp.core.free.schedulable[index]


async def test_a_leaving_agent_whose_stream_fails_does_not_reconnect():
    """The stream is cut as the agent leaves: it must end there, not register its node again and run on until
    leave() gives up waiting and cancels it."""
    async with TestCluster(nodes=2, heartbeat_s=HEARTBEAT_S, heartbeat_timeout_s=TIMEOUT_S) as tc:
        agent = tc.agents[tc.cluster.nodes[1].name]
        runner = agent._runner
        agent.break_stream()
        await agent.leave(timeout=2.0)
        assert runner.done() and not runner.cancelled()  # it returned by itself


async def test_an_agent_told_to_leave_between_connections_says_so_on_one_more_call():
    """note6 "not mended": an agent whose stream was cut waits to reconnect (a minute here) when it is told to
    leave. It must not wait out the backoff nor come back for work: it connects at once, sends Register,
    Leaving and the end of its stream, and stops. Its job is requeued before leave() returns, as for a leave
    on an open stream. The old leave() stopped without a word: the job stayed RUNNING on the gone node until
    the heartbeat timeout (30 s here) and the guard."""
    async with TestCluster(nodes=2, heartbeat_s=HEARTBEAT_S, heartbeat_timeout_s=30.0) as tc:
        await _cluster_of_running_jobs(tc, 1)
        cp = tc.control_plane
        (node,) = cp.placed["j0"]
        agent = tc.agents[node]
        # RUNNING at the control plane once the Launch is sent; cut before the agent had it, the stream would
        # leave the agent without the job, which its Register then says (requeued: "no longer runs it").
        await tc.wait_for(lambda: any(r.job_id == "j0" for r in agent.running_jobs()))
        agent.backoff = Backoff(start_s=60.0, max_s=60.0)
        agent.break_stream()
        await tc.wait_for(lambda: node not in cp.sessions and not agent.connected.is_set())
        assert tc.job("j0").state is JobState.RUNNING and node in cp.placed["j0"]  # between connections
        await agent.leave(timeout=TIMEOUT_S * 30)
        assert agent._runner.done() and not agent._runner.cancelled()  # it ended by itself, not by the timeout
        assert tc.job("j0").preemptions == 1
        assert [e.detail for e in cp.core.log if e.job_id == "j0" and "left" in e.detail] == [f"agent {node} left"]
        assert node not in cp.sessions and not cp.core.free.schedulable[tc.cluster.node(node).index]


async def test_an_agent_that_registers_to_leave_takes_no_work_from_its_registration():
    """Register.leaving: an agent told to leave between connections registers only to say so, and its Leaving
    follows on the same stream. Before the flag, a pass run between the two could place a job on the node
    (a requeued job, first fit), which Leaving then preempted again: its node is unschedulable from the
    Register on, and no Launch reaches it."""
    async with TestCluster(nodes=2, heartbeat_s=HEARTBEAT_S, heartbeat_timeout_s=30.0) as tc:
        cp = tc.control_plane
        node = tc.cluster.nodes[0].name
        await tc.agents.pop(node).stop()
        await tc.wait_for(lambda: node not in cp.sessions)
        async with grpc.aio.insecure_channel(tc.address) as channel:
            call = agrpc.AgentServiceStub(channel).Connect()
            await call.write(apb.AgentMessage(register=apb.Register(node=tpb.NodeSpec(name=node), backend="emulated",
                                                                     leaving=True)))
            assert (await call.read()).WhichOneof("body") == "registered"
            assert cp.sessions[node].left and not cp.core.free.schedulable[tc.cluster.node(node).index]
            await _cluster_of_running_jobs(tc, 1)  # first fit would take the first node
            assert cp.placed["j0"] == (tc.cluster.nodes[1].name,)
            call.cancel()
