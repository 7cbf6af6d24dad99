"""What every node agent shares: the AgentService stream, reconnection and reporting.

A backend (:mod:`emulated`, :mod:`process`, :mod:`gpu`) subclasses
:class:`StreamAgent` and supplies what differs: the jobs it lists in Register,
its heartbeat and progress reports, and what it does on each command. The
stream itself is the same for all of them:

* one ``AgentService.Connect`` stream; Register first, commands after Registered;
* registration is node-scoped: an agent that holds the cluster file (a :class:`ClusterCopy`)
  registers with its digest and gets only its own node and the control plane's digest, which
  it checks; one without a copy (or a stale one) gets the whole file, checked against the digest;
* on a broken stream or an unreachable control plane, reconnect with exponential backoff
  and jitter (:mod:`halyard.agent.backoff`; INVALID_ARGUMENT / FAILED_PRECONDITION /
  PERMISSION_DENIED / UNAUTHENTICATED stop the agent: the control plane refused this node or these
  credentials; ALREADY_EXISTS, another agent holds this node, is retried for ``held_give_up_s``, in
  case the holder is this node's previous agent whose end the control plane has not seen yet, and
  then stops the agent too: a second agent for a live node would otherwise retry forever);
* with ``tls`` the stream is mutual TLS (the node's certificate); without, plaintext
  (insecure mode, loopback);
* every exit (but a preemption the control plane asked for) is kept until the control
  plane acknowledges it (ExitAck, sent once it is stored): it is sent again right after
  each Registered and listed in Register meanwhile, so reconciliation keeps the job and a
  completion lost in flight (a killed control plane, a cut stream) is delivered, never
  re-run;
* heartbeats (and the backend's progress reports) every ``heartbeat_interval_s``
  the control plane asked for;
* a control message this agent does not know (from a newer control plane) is logged and ignored;
* ``target`` may list several control planes (``a:1,b:2,c:3``: an active one and standbys over one
  PostgreSQL store, docs/operations.md "High availability"): the agent connects to one; a standby
  answers UNAVAILABLE naming the leader (``halyard-leader`` trailing metadata), which the agent
  connects to next, at once; any other failure moves it on to the next address. It keeps the newest
  leadership epoch it has seen (Registered and every command carry the sender's): a Registered from an
  older leader drops that stream, and a command from one is ignored. gRPC keepalive pings
  (``AGENT_KEEPALIVE_S``) end a stream to a control plane that stopped answering (a paused
  process, a cut network) in seconds, well within a lease, so the agent looks for the next leader.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from typing import TypedDict

import grpc
import structlog

from halyard.agent.backoff import Backoff
from halyard.agent.cluster_copy import ClusterCopy, ClusterMismatch, StaleCluster
from halyard.agent.profiling import refused
from halyard.clock import Clock, ClockParams, clock_from_params
from halyard.datamodel import Cluster, HalyardError, Node, cluster_digest
from halyard.datamodel.limits import MAX_JOB_ID
from halyard.peer_enums import UnknownEnums
from halyard.tls import NEEDS_TLS, NOT_TLS, UNKNOWN_CA, WRONG_NAME, ClientTLS, tls_mismatch
from halyard.v1 import agent_service_pb2 as apb
from halyard.v1 import agent_service_pb2_grpc as agrpc
from halyard.v1.types_pb2 import NodeSpec
from halyard.wire import node_to_pb

log = structlog.get_logger("halyard.agent")

__all__ = ["FATAL_CODES", "StreamAgent"]

MAX_FINISHED_PARTS = 4096  # finished non-leader parts remembered (only a reconnect needs them)
DIGEST_SHOWN = 12  # hex digits of a cluster file's SHA-256 in messages: enough to tell two apart by eye
LEAVE_WAIT_S = 5.0  # how long a leaving agent waits for the control plane to close its stream (our choice)
# A connection whose control plane does not answer a ping for AGENT_KEEPALIVE_TIMEOUT_S after
# AGENT_KEEPALIVE_S is closed: a paused leader (SIGSTOP) is left in ~10 s, within the default 15 s lease.
# Our choice; the server allows pings this frequent (controlplane/server.py SERVER_OPTIONS).
AGENT_KEEPALIVE_S = 5.0
AGENT_KEEPALIVE_TIMEOUT_S = 5.0
KEEPALIVE_OPTIONS = (("grpc.keepalive_time_ms", int(AGENT_KEEPALIVE_S * 1000)),
                     ("grpc.keepalive_timeout_ms", int(AGENT_KEEPALIVE_TIMEOUT_S * 1000)),
                     ("grpc.keepalive_permit_without_calls", 1), ("grpc.http2.max_pings_without_data", 0))
# With several control planes: how long a connection may take before the agent tries the next address
# (a paused process accepts TCP connections in its kernel but never answers on them).
CONNECT_WAIT_S = 5.0
LEADER_METADATA_KEY = "halyard-leader"  # as controlplane/leadership.py names it
FATAL_CODES = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION,
               grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED)
# How long an agent refused because another agent holds its node (ALREADY_EXISTS) keeps trying before it
# stops: three of the control plane's default heartbeat timeouts (5 s), the longest a dead holder's
# half-open stream counts as live. Our choice: a restarted agent outlives its predecessor's stream, a
# second agent started by mistake says so and exits.
HELD_GIVE_UP_S = 15.0


class StaleLeader(Exception):
    """A control plane whose leadership epoch is older than one this agent has seen."""


class NotRegistered(HalyardError):
    """A command that needs what Registered brings (the clock, the cluster) came before it: the control
    plane broke the protocol, whose first message on every stream is Registered."""


class StreamOptions(TypedDict, total=False):
    """:class:`StreamAgent`'s keyword options that a backend passes through as they are (``**stream``)."""

    backoff: Backoff | None
    channel_options: tuple[tuple[str, object], ...]
    held_give_up_s: float


class AgentOptions(StreamOptions, total=False):
    """:class:`StreamOptions` and the connection's credentials and cluster file."""

    tls: ClientTLS | None
    cluster: ClusterCopy | None


class StreamAgent:
    """The stream, reconnect and reporting loop; subclasses implement the ``on_*`` hooks."""

    backend = "unknown"
    version = "halyard/1"

    def __init__(self, target: str, node: Node | str, *, shared_clock: Clock | None = None,
                 tls: ClientTLS | None = None, cluster: ClusterCopy | None = None,
                 backoff: Backoff | None = None, channel_options: tuple[tuple[str, object], ...] = (),
                 held_give_up_s: float = HELD_GIVE_UP_S) -> None:
        self.targets = [t.strip() for t in target.split(",") if t.strip()] or [target]
        self.target = self.targets[0]  # the control plane connected to (or tried) now
        self.leader_epoch = 0  # the newest leadership epoch seen (0: control planes without leadership)
        self._redirected = False  # a standby named the leader: connect to it without waiting
        self.held_give_up_s = held_give_up_s
        self._held_since: float | None = None  # first ALREADY_EXISTS of the refusals in a row
        self._tls_said: str | None = None  # the TLS disagreement last logged (said once, not every retry)
        # gRPC channel arguments; many agents in one process (the fleet benchmark) pass
        # ("grpc.use_local_subchannel_pool", 1) so each has its own connection, as separate machines would.
        self.channel_options = channel_options
        self.tls = tls
        self.instance = uuid.uuid4().hex  # a reconnect of this agent replaces its stream; another agent is refused
        self.node_name = node if isinstance(node, str) else node.name
        self.node = None if isinstance(node, str) else node
        self.shared_clock = shared_clock
        self.clock: Clock | None = None
        self.clock_params: ClockParams | None = None
        self._copy = cluster  # the cluster file held (given, or received at registration)
        self.cluster: Cluster | None = cluster.cluster if cluster is not None else None
        self.backoff = backoff or Backoff()
        self.connected = asyncio.Event()
        self._unacked: dict[tuple[str, int], apb.AgentMessage] = {}  # exits until the control plane acks them
        # Non-leader parts that ended normally: listed in Register (so reconciliation does not requeue a
        # job whose leader's exit is still on its way) until a Preempt or a newer Launch says the attempt is over.
        self._finished_parts: dict[tuple[str, int], apb.RunningJob] = {}
        self._outbox: asyncio.Queue[apb.AgentMessage | None] | None = None  # once Registered
        self._stream_outbox: asyncio.Queue[apb.AgentMessage | None] | None = None  # from the call's start
        self._call: grpc.aio.StreamStreamCall | None = None
        self._runner: asyncio.Task[None] | None = None
        self._leaving = False  # leave() was called: no Launch is obeyed
        self._leave_sent = False  # Leaving went on a call: the agent does not connect again
        self._leave_now = asyncio.Event()  # ends the wait before a reconnect: a leave goes out at once
        # A fault to inject (TestCluster.freeze_agent): while set, no heartbeat or progress report
        # leaves, as from a hung node whose connection stays up.
        self.frozen = False
        self.unknown_enums = UnknownEnums()  # enum values a newer control plane sent (peer_enums.py)

    def registered_clock(self) -> Clock:
        """The cluster clock agreed at registration (commands and reports come after it)."""
        if self.clock is None:
            raise NotRegistered(f"node {self.node_name}: cluster time is needed before Registered set the clock")
        return self.clock

    def registered_cluster(self) -> Cluster:
        """The cluster file checked at registration (or given at start)."""
        if self.cluster is None:
            raise NotRegistered(f"node {self.node_name}: the cluster is needed before Registered sent it")
        return self.cluster

    # --- lifecycle ----------------------------------------------------------

    def start(self) -> asyncio.Task[None]:
        self._runner = asyncio.create_task(self.run(), name=f"agent {self.node_name}")
        return self._runner

    async def stop(self) -> None:
        """Stop like a killed process would: the stream breaks, the jobs stop with it."""
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
        await self.stop_jobs()
        self.connected.clear()

    async def leave(self, timeout: float = LEAVE_WAIT_S) -> None:
        """Leave cleanly (a graceful shutdown): end the stream so the control plane knows this node
        left rather than went silent (it requeues the node's jobs at once instead of after the heartbeat
        timeout and the lost-agent guard), wait up to ``timeout`` for it to close the call, then
        :meth:`stop`. Between connections the wait to reconnect ends now and the next call carries
        Register, Leaving and its end (:meth:`_session`); a call that fails is not retried. From here
        on no Launch is obeyed: an agent told to leave takes no work."""
        self._leaving = True
        running = self._runner if self._runner is not None and not self._runner.done() else None
        if self._stream_outbox is not None:  # a call is open (or opening): Leaving goes after its Register
            self._send_leaving(self._stream_outbox)
        elif running is not None:
            self._leave_now.set()
        if running is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(running), timeout)
        await self.stop()

    async def stop_jobs(self) -> None:
        """Backends stop whatever they run (called by :meth:`stop`)."""

    def break_stream(self) -> None:
        """Cut the current stream (a network fault); the agent reconnects and keeps its jobs."""
        if self._call is not None:
            self._call.cancel()

    async def run(self) -> None:
        while True:
            try:
                await self._session()
                self.backoff.reset()
                if self._leave_sent:
                    return
            except ClusterMismatch as exc:
                log.error("the control plane's cluster file disagrees with itself; stopping", node=self.node_name,
                          error=str(exc))
                raise
            except StaleCluster as exc:  # the copy is dropped: the next Register asks for the whole file
                log.error("cluster file differs from the control plane's; re-registering for its copy",
                          node=self.node_name, error=str(exc))
            except asyncio.CancelledError:
                me = asyncio.current_task()
                if me is None or me.cancelling():
                    raise  # the agent itself is stopping
                log.info("stream cut, reconnecting", node=self.node_name)  # only the call was cancelled
            except (StaleLeader, TimeoutError) as exc:
                log.info("control plane not usable, trying the next", node=self.node_name, target=self.target,
                         error=str(exc) or "no answer")
                self._next_target()
            except grpc.aio.AioRpcError as exc:
                self._follow(exc)
                if exc.code() in FATAL_CODES:
                    log.error("control plane refused this agent", node=self.node_name, code=exc.code().name,
                              error=exc.details())
                    raise
                if exc.code() == grpc.StatusCode.ALREADY_EXISTS:
                    self._held(exc)
                else:
                    self._unreachable(exc)
            finally:
                self.connected.clear()
                self._outbox = self._stream_outbox = None
            if self._leave_sent:
                return  # Leaving went on a call that failed: not retried (that would register the node again)
            delay = 0.0 if self._redirected else self.backoff.next_delay()
            self._redirected = False
            with contextlib.suppress(TimeoutError):  # leave() ends the wait: its call goes at once
                async with asyncio.timeout(delay):
                    await self._leave_now.wait()

    def _next_target(self) -> None:
        if len(self.targets) > 1:
            i = self.targets.index(self.target) if self.target in self.targets else -1
            self.target = self.targets[(i + 1) % len(self.targets)]

    def _follow(self, exc: grpc.aio.AioRpcError) -> None:
        """After a failed call: to the leader a standby named, else (several addresses) to the next."""
        leader = ""
        if exc.code() == grpc.StatusCode.UNAVAILABLE:
            leader = next((str(v) for k, v in (exc.trailing_metadata() or ()) if k == LEADER_METADATA_KEY), "")
        if leader and leader != self.target:
            log.info("following the leader", node=self.node_name, standby=self.target, leader=leader)
            self.target, self._redirected = leader, True
        elif exc.code() not in FATAL_CODES:
            self._next_target()

    def _unreachable(self, exc: grpc.aio.AioRpcError) -> None:
        """No stream: logged as unreachable, or, once per streak, as the TLS disagreement it shows."""
        kind = tls_mismatch(exc.details() or "", plaintext=self.tls is None)
        if kind is None:
            log.info("control plane unreachable, retrying", node=self.node_name, code=exc.code().name)
            return
        if kind == self._tls_said:
            log.info("cannot connect, as logged above; retrying", node=self.node_name)
            return
        self._tls_said = kind
        ca = (self.tls.ca_file or "its CA") if self.tls is not None else ""
        why = {NEEDS_TLS: "the control plane closed the plaintext stream: it may require TLS; give --certs DIR "
                          "instead of --insecure",
               NOT_TLS: "the control plane does not speak TLS (started with --insecure?); give --insecure instead "
                        "of --certs",
               UNKNOWN_CA: f"the control plane's certificate is not signed by this agent's CA ({ca}); give the "
                           "--certs directory of this cluster's CA",
               WRONG_NAME: "the control plane's certificate does not name the host in --control-plane; dial a "
                           "name it was issued for (`halyard certs init --server-name HOST`)"}[kind]
        log.error(f"cannot connect: {why}; retrying", node=self.node_name, control_plane=self.target)

    def _held(self, exc: grpc.aio.AioRpcError) -> None:
        """Another agent holds this node: retry while it may be this node's previous agent going away,
        then stop (re-raise ``exc``) saying so."""
        now = time.monotonic()
        if self._held_since is None:
            self._held_since = now
            log.warning("another agent holds this node; retrying in case it is this node's previous agent "
                        "going away", node=self.node_name, gives_up_in_s=self.held_give_up_s, error=exc.details())
        if now - self._held_since >= self.held_give_up_s:
            log.error("another agent holds this node; this one stops (stop the other agent first, or give this "
                      "one the --node it should serve)", node=self.node_name, error=exc.details())
            raise exc

    # --- the stream -----------------------------------------------------------

    async def _session(self) -> None:
        outbox: asyncio.Queue[apb.AgentMessage | None] = asyncio.Queue()
        outbox.put_nowait(apb.AgentMessage(register=self._register()))
        if self._leaving:  # leave() ran between connections: this call only says so
            self._send_leaving(outbox)
        self._stream_outbox = outbox
        options = (*KEEPALIVE_OPTIONS, *self.channel_options)
        channel = (grpc.aio.secure_channel(self.target, self.tls.credentials(), options=options)
                   if self.tls is not None else grpc.aio.insecure_channel(self.target, options=options))
        async with channel:
            if len(self.targets) > 1:  # a control plane that accepts but never answers: try the next
                async with asyncio.timeout(CONNECT_WAIT_S):
                    await channel.channel_ready()
            call = agrpc.AgentServiceStub(channel).Connect(_drain(outbox))
            self._call = call
            heartbeat: asyncio.Task[None] | None = None
            try:
                async for msg in call:
                    kind = msg.WhichOneof("body")
                    if msg.leader_epoch and msg.leader_epoch < self.leader_epoch:
                        if kind == "registered":
                            raise StaleLeader(f"{self.target} leads epoch {msg.leader_epoch}, older than "
                                              f"{self.leader_epoch}")
                        log.warning("command from an older leader ignored", node=self.node_name, kind=kind,
                                    epoch=msg.leader_epoch, newest=self.leader_epoch)
                        continue
                    self.leader_epoch = max(self.leader_epoch, msg.leader_epoch)
                    if kind == "registered":
                        self._held_since = self._tls_said = None
                        self._on_registered(msg.registered)
                        self._outbox = outbox
                        for report in self._unacked.values():
                            outbox.put_nowait(report)
                        heartbeat = asyncio.create_task(self._heartbeats(outbox, msg.registered.heartbeat_interval_s))
                        self.connected.set()
                    elif kind is None:  # a command newer than this agent: its field is unknown here
                        log.warning("unknown control message ignored", node=self.node_name, bytes=msg.ByteSize())
                    else:
                        self._handle(kind, getattr(msg, kind))
            finally:
                self._call = None
                self._outbox = self._stream_outbox = None
                outbox.put_nowait(None)
                if heartbeat is not None:
                    heartbeat.cancel()

    def _send_leaving(self, outbox: asyncio.Queue[apb.AgentMessage | None]) -> None:
        outbox.put_nowait(apb.AgentMessage(leaving=apb.Leaving(reason="agent shutting down")))
        outbox.put_nowait(None)  # then ends the request stream
        self._leave_sent = True

    def _register(self) -> apb.Register:
        node = self.node_spec()
        running = self.running_jobs()
        # Jobs whose exit is not acknowledged yet are still ours until it is delivered (again,
        # right after Registered); listing them keeps reconciliation from requeueing them.
        listed = {(r.job_id, r.attempt) for r in running}
        running += [apb.RunningJob(job_id=m.exited.job_id, attempt=m.exited.attempt, leader=True,
                                   iterations_done=m.exited.checkpoint_iteration)
                    for key, m in self._unacked.items() if key not in listed]
        listed |= set(self._unacked)
        running += [r for key, r in self._finished_parts.items() if key not in listed]
        return apb.Register(node=node, running=running, backend=self.backend, version=self.version,
                            instance=self.instance, cluster_digest=self._copy.digest if self._copy else "",
                            leaving=self._leaving)

    def node_spec(self) -> NodeSpec:
        return node_to_pb(self.node) if self.node is not None else NodeSpec(name=self.node_name)

    def _on_registered(self, registered: apb.Registered) -> None:
        self._take_cluster(registered)
        c = registered.clock
        # A clock kind newer than this agent (docs/api.md, "Unknown enum values") is read as ACCELERATED:
        # cluster time from the origins and speedup sent (a speedup of 0 read as 1, real time).
        kind = self.unknown_enums.read(apb.ClockKind, c.kind, message="Registered", field="clock.kind",
                                       default=apb.ACCELERATED, peer=self.target)
        params = ClockParams("manual" if kind == apb.MANUAL else "scaled", c.wall_origin_unix_s,
                             c.cluster_origin_s, c.speedup or 1.0)
        self.clock_params = params
        self.clock = clock_from_params(params, shared=self.shared_clock)

    def _take_cluster(self, registered: apb.Registered) -> None:
        """Check the cluster against the control plane's digest and this node's spec; raise
        :class:`StaleCluster` (dropping the copy, so the next Register asks for the file) if they differ."""
        digest, text = registered.cluster_digest, registered.cluster_toml
        try:
            if text:  # an agent without a (matching) copy, or a control plane older than digests
                if digest and cluster_digest(text) != digest:
                    raise ClusterMismatch(f"the cluster file sent ({len(text)} bytes) does not match the digest "
                                       f"sent with it ({digest[:DIGEST_SHOWN]})")
                if self._copy is None or self._copy.text != text:
                    self._copy = ClusterCopy.parse(text, source="<control plane>")
            elif self._copy is None:
                raise StaleCluster("the control plane sent no cluster file and this agent holds none")
            elif digest != self._copy.digest:
                raise StaleCluster(f"this agent's cluster file has digest {self._copy.digest[:DIGEST_SHOWN]}, "
                                   f"the control plane's {digest[:DIGEST_SHOWN] or 'none'}")
            if registered.HasField("node_spec"):
                cluster = self._copy.cluster
                mine = node_to_pb(cluster.node(self.node_name)) if cluster.has_node(self.node_name) else None
                if registered.node_spec != mine:
                    raise (ClusterMismatch if text else StaleCluster)(
                        f"the control plane's spec of node {self.node_name} differs from the cluster file's")
        except StaleCluster:
            self._copy = None
            raise
        self.cluster = self._copy.cluster

    async def _heartbeats(self, outbox: asyncio.Queue[apb.AgentMessage | None], interval: float) -> None:
        while True:
            if not self.frozen:
                now = self.registered_clock().now()
                outbox.put_nowait(apb.AgentMessage(heartbeat=self.heartbeat(now)))
                for progress in self.progress_reports(now):
                    outbox.put_nowait(apb.AgentMessage(progress=progress))
            await asyncio.sleep(interval)

    def send(self, msg: apb.AgentMessage, *, keep: bool) -> None:
        """Send now if connected (else drop it), and with ``keep`` (an Exited) also keep it until
        the control plane acknowledges it, resending it on every new stream."""
        if keep and msg.WhichOneof("body") == "exited":
            self._unacked[(msg.exited.job_id, msg.exited.attempt)] = msg
        if self._outbox is not None:
            self._outbox.put_nowait(msg)

    def part_finished(self, job_id: str, attempt: int, iterations: float) -> None:
        """A non-leader's share of a job ended normally; the leader reports the job's end."""
        self._finished_parts[(job_id, attempt)] = apb.RunningJob(job_id=job_id, attempt=attempt, leader=False,
                                                                 iterations_done=iterations)
        while len(self._finished_parts) > MAX_FINISHED_PARTS:
            del self._finished_parts[next(iter(self._finished_parts))]

    def pending_exits(self) -> list[apb.Exited]:
        """Exits sent or to send that the control plane has not acknowledged yet."""
        return [m.exited for m in self._unacked.values()]

    _send = send  # the emulated agent's historical name

    def _handle(self, kind: str, body) -> None:
        if kind == "launch" and self._leaving:  # the control plane requeues it when this stream closes
            log.info("launch ignored: leaving", node=self.node_name, job=body.job_id[:MAX_JOB_ID])
        elif kind == "launch":
            log.info("launch received", node=self.node_name, job=body.job_id[:MAX_JOB_ID], attempt=body.attempt,
                     leader=body.leader)
            for key in [k for k in self._finished_parts if k[0] == body.job_id]:
                del self._finished_parts[key]
            self.on_launch(body)
        elif kind == "preempt":
            self._finished_parts.pop((body.job_id, body.attempt), None)
            self.on_preempt(body)
        elif kind == "reconfigure":
            self.on_reconfigure(body)
        elif kind == "set_time_shift":
            self.on_set_time_shift(body)
        elif kind == "drain":
            self.on_drain(body)
        elif kind == "profile":
            self.on_profile(body)
        elif kind == "exit_ack":
            self._unacked.pop((body.job_id, body.attempt), None)
        elif kind == "read_log":
            self.on_read_log(body)
        else:  # in this agent's protocol but not handled by it: ignored like an unknown one
            log.warning("unknown control message ignored", node=self.node_name, kind=kind)

    # --- what a backend supplies ----------------------------------------------

    def running_jobs(self) -> list[apb.RunningJob]:
        """The jobs this agent runs, for Register (reconciliation)."""
        return []

    def heartbeat(self, now: float) -> apb.Heartbeat:
        return apb.Heartbeat(cluster_time=now, healthy=True)

    def progress_reports(self, now: float) -> list[apb.Progress]:
        return []

    def on_launch(self, launch: apb.Launch) -> None:
        raise NotImplementedError

    def on_preempt(self, preempt: apb.Preempt) -> None:
        raise NotImplementedError

    def on_reconfigure(self, reconfigure: apb.Reconfigure) -> None:
        raise NotImplementedError

    def on_set_time_shift(self, shift: apb.SetTimeShift) -> None:
        raise NotImplementedError

    def on_drain(self, drain: apb.Drain) -> None:
        log.info("node drained", node=self.node_name, reason=drain.reason)

    def on_read_log(self, read: apb.ReadLog) -> None:
        """A piece of a job's output; backends that run no processes have none."""
        self.send(apb.AgentMessage(log_data=apb.LogData(
            request_id=read.request_id, error=f"node {self.node_name}'s agent (backend {self.backend}) runs no "
                                              "processes and keeps no job output")), keep=False)

    def on_profile(self, profile: apb.Profile) -> None:
        """A profiling request (Crius §5.1); a backend that cannot profile says why, so the control
        plane does not wait for an answer that never comes."""
        self.send(apb.AgentMessage(profile_result=refused(
            profile, self.node_name, self.backend, "this backend does not implement profiling")), keep=False)


async def _drain(outbox: asyncio.Queue[apb.AgentMessage | None]) -> AsyncIterator[apb.AgentMessage]:
    while (msg := await outbox.get()) is not None:
        yield msg
