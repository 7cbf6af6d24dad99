"""Job output through the control plane: JobService.StreamLogs, read from the node agents.

A job's output stays on the nodes that ran it (the process agent's capped per-attempt
files, :mod:`halyard.agent.joblogs`). :class:`LogRelay` asks a node's agent for a piece
of it over the agent's own stream (``ReadLog``, answered by ``LogData``) and
:func:`stream_logs` turns those pieces into the client's stream: all there is, then, with
``follow``, new output every :data:`FOLLOW_POLL_S` until the attempt has ended.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator

from halyard.controlplane.errors import FailedPrecondition, NotFound, Unavailable
from halyard.controlplane.service import ControlPlane
from halyard.datamodel import EventKind, ValidationError
from halyard.datamodel import limits as lim
from halyard.policies import Unplaced
from halyard.scheduling.records import JobRecord
from halyard.v1 import agent_service_pb2 as apb
from halyard.v1 import job_service_pb2 as jpb

AGENT_ANSWER_S = 10.0  # wall seconds an agent has to answer a ReadLog
FOLLOW_POLL_S = 0.5  # how often a followed attempt is asked for new output
CHUNK_BYTES = 256 << 10
_PLACED = (EventKind.STARTED, EventKind.MIGRATED, EventKind.RESIZED)
_NO_OUTPUT = "job {job!r} {why}: emulated jobs have no output (only process and gpu agents keep a job's output)"


class LogRelay:
    """ReadLog requests to agents and their answers, matched by request id and node."""

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self._ids = itertools.count(1)
        self._waiting: dict[int, tuple[str, asyncio.Future[apb.LogData]]] = {}

    async def read(self, node: str, job_id: str, attempt: int, offset: int, max_bytes: int) -> apb.LogData:
        session = self.cp.sessions.get(node)
        if session is None or session.closed:
            raise Unavailable(f"node {node!r} has no connected agent; the job's output stays on that node "
                              "(--work-dir/logs) until its agent is back")
        request_id = next(self._ids)
        answer: asyncio.Future[apb.LogData] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = (node, answer)
        try:
            session.send(read_log=apb.ReadLog(request_id=request_id, job_id=job_id, attempt=attempt, offset=offset,
                                              max_bytes=max_bytes))
            async with asyncio.timeout(AGENT_ANSWER_S):
                return await answer
        except TimeoutError:
            raise Unavailable(f"node {node!r}'s agent did not answer for the job's output within "
                              f"{AGENT_ANSWER_S:g} s (an agent older than the control plane keeps none)") from None
        finally:
            self._waiting.pop(request_id, None)

    def deliver(self, node: str, data: apb.LogData) -> None:
        """An agent's answer; one for a request sent to another node, or no longer awaited, is dropped."""
        waiting = self._waiting.get(data.request_id)
        if waiting is not None and waiting[0] == node and not waiting[1].done():
            waiting[1].set_result(data)

    async def find(self, record: JobRecord, attempt: int) -> str:
        """The node holding the attempt's output: the leader where it is known, else whichever agent has it."""
        if attempt == record.attempt and record.allocation is not None and record.allocation.nodes:
            return record.allocation.nodes[0].node
        nodes = [n for n in self.cp.sessions if not self.cp.sessions[n].closed]
        answers = await asyncio.gather(*(self.read(n, record.job_id, attempt, 0, 0) for n in nodes),
                                       return_exceptions=True)
        holding = [n for n, a in zip(nodes, answers, strict=True) if isinstance(a, apb.LogData) and not a.error]
        if not holding:
            raise NotFound(f"no connected agent holds output of job {record.job_id!r} attempt {attempt} "
                           f"(asked {len(nodes)} node(s); a node that ran it may be down)")
        leaders = self._last_leaders(record.job_id)
        return min(holding, key=lambda n: (leaders.index(n) if n in leaders else len(leaders), nodes.index(n)))

    def _last_leaders(self, job_id: str) -> list[str]:
        """The nodes of the job's placements, latest first, each placement's first node (its leader) first."""
        out: list[str] = []
        for event in reversed(list(self.cp.core.log.since(0))):
            if event.job_id == job_id and event.kind in _PLACED:
                out += [part.split(":", 1)[0] for part in event.detail.split(";") if part]
        return out


def resolve(record: JobRecord, request: jpb.StreamLogsRequest, wait: Unplaced | None = None) -> int:
    """The attempt a StreamLogs request means; errors name the field (and, for a job that has not started,
    why it waits: ``wait``, SchedulingCore.wait_of)."""
    if record.attempt == 0:
        raise FailedPrecondition(f"job {record.job_id!r} has not started: it has no output yet"
                                 + (f" (it waits: {wait})" if wait is not None else ""))
    if not record.spec.command:
        raise FailedPrecondition(_NO_OUTPUT.format(job=record.job_id, why="has no command, so it runs on emulated "
                                                   "agents (the performance model)"))
    if request.attempt > record.attempt:
        raise ValidationError(f"job {record.job_id!r} has attempts 1 to {record.attempt}, not {request.attempt}",
                              field="attempt")
    if len(request.node) > lim.MAX_REQUEST_ID:
        raise ValidationError(f"is {len(request.node)} characters long; at most {lim.MAX_REQUEST_ID} allowed",
                              field="node")
    return request.attempt or record.attempt


async def stream_logs(relay: LogRelay, record: JobRecord, attempt: int,
                      request: jpb.StreamLogsRequest) -> AsyncIterator[jpb.LogChunk]:
    """The attempt's output from ``request.offset``; with ``follow``, until the attempt has ended."""
    node = request.node or await relay.find(record, attempt)
    if request.node and not relay.cp.cluster.has_node(node):
        raise NotFound(f"no node {node!r} in cluster {relay.cp.cluster.name!r}")
    session = relay.cp.sessions.get(node)
    if session is not None and session.backend == "emulated":
        raise FailedPrecondition(_NO_OUTPUT.format(job=record.job_id, why=f"ran on node {node}, whose agent is "
                                                   "emulated (the performance model, no process)"))
    offset = request.offset
    while True:
        data = await relay.read(node, record.job_id, attempt, offset, CHUNK_BYTES)
        if data.error:
            raise NotFound(data.error)
        if data.data:
            yield jpb.LogChunk(node=node, attempt=attempt, offset=data.offset, data=data.data)
            offset = data.offset + len(data.data)
            continue
        offset = max(offset, data.offset)
        if not request.follow or data.complete:
            return
        await asyncio.sleep(FOLLOW_POLL_S)
