"""An agent follows the newest leader (issue 36): it ignores a command from an older leadership epoch,
and drops a stream whose Registered comes from an older leader than one it has seen. Against a real gRPC
server that plays the control plane's side of AgentService.Connect (test_agent_registration's)."""

from __future__ import annotations

import asyncio

from structlog.testing import capture_logs
from test_agent_registration import TOML, _control_plane_that_sends, _registered

from halyard.agent.cluster_copy import ClusterCopy
from halyard.agent.emulated import EmulatedAgent
from halyard.testing.cluster import WAIT_TIMEOUT_S
from halyard.v1 import agent_service_pb2 as apb


def registered_at(copy: ClusterCopy, epoch: int) -> apb.ControlMessage:
    return apb.ControlMessage(leader_epoch=epoch, registered=_registered(
        copy, "r0-n0", heartbeat_interval_s=60.0, leader_epoch=epoch,
        clock=apb.ClockParams(kind=apb.ACCELERATED, speedup=1.0)))


def read_log(request_id: int, epoch: int) -> apb.ControlMessage:
    return apb.ControlMessage(leader_epoch=epoch, read_log=apb.ReadLog(request_id=request_id, job_id="j", attempt=1))


async def answers(got: asyncio.Queue[apb.AgentMessage], until: int) -> list[int]:
    """The request ids of the agent's LogData answers, until the one for ``until``."""
    seen: list[int] = []
    while until not in seen:
        msg = await asyncio.wait_for(got.get(), WAIT_TIMEOUT_S)
        if msg.WhichOneof("body") == "log_data":
            seen.append(msg.log_data.request_id)
    return seen


async def test_a_command_from_an_older_epoch_is_ignored():
    copy = ClusterCopy.parse(TOML, source="<test>")
    frames = [registered_at(copy, 7), read_log(1, 7), read_log(2, 6), read_log(3, 7)]
    got: asyncio.Queue[apb.AgentMessage] = asyncio.Queue()
    server, address = await _control_plane_that_sends([f.SerializeToString() for f in frames], got, [])
    agent = EmulatedAgent(address, "r0-n0", cluster=copy)
    try:
        with capture_logs() as logs:
            agent.start()
            assert await answers(got, 3) == [1, 3]  # #2, from epoch 6, was not obeyed
        assert agent.leader_epoch == 7
        assert any(e["event"] == "command from an older leader ignored" and e["epoch"] == 6 for e in logs)
    finally:
        await agent.stop()
        await server.stop(None)


async def test_a_registered_from_an_older_leader_drops_the_stream_for_the_next_address():
    copy = ClusterCopy.parse(TOML, source="<test>")
    got_old: asyncio.Queue[apb.AgentMessage] = asyncio.Queue()
    got_new: asyncio.Queue[apb.AgentMessage] = asyncio.Queue()
    old_connects: list[int] = []
    old, old_address = await _control_plane_that_sends(
        [f.SerializeToString() for f in (registered_at(copy, 4), read_log(9, 4))], got_old, old_connects)
    new, new_address = await _control_plane_that_sends(
        [f.SerializeToString() for f in (registered_at(copy, 5), read_log(1, 5))], got_new, [])
    agent = EmulatedAgent(f"{new_address},{old_address}", "r0-n0", cluster=copy)
    agent.leader_epoch = 5  # it has seen epoch 5 already
    try:
        with capture_logs():
            agent.target = old_address  # and now reaches the old leader first
            agent.start()
            assert await answers(got_new, 1) == [1]  # it moved on to the next address, the new leader
        assert old_connects and all(m.WhichOneof("body") != "log_data" for m in _drain(got_old))
        assert agent.target == new_address
    finally:
        await agent.stop()
        await old.stop(None)
        await new.stop(None)


def _drain(queue: asyncio.Queue[apb.AgentMessage]) -> list[apb.AgentMessage]:
    items = []
    while not queue.empty():
        items.append(queue.get_nowait())
    return items
