"""Agent sessions: who is connected, what they run, and when a silent one is lost.

Why a module of its own: an agent's stream has a life apart from any job's (DESIGN.md, "State,
failure and security"), and most of the control plane's failure handling is about it:

* a node takes work only while its agent is connected and it is not drained;
* an agent silent for ``heartbeat_timeout_s`` (wall time), counted from its registration
  reaching the stream (:meth:`AgentSessions.registered`) and then from its latest message, is
  declared lost: its jobs go back to the queue from their last checkpoint and the other nodes
  of those jobs are told to stop, as far as the lost-agent guard admits (:mod:`disruption`);
* a registering agent reports what it runs: jobs it runs that are no longer its own (an older
  attempt, another node) are stopped; jobs the control plane placed there that the agent does
  not report are requeued (:meth:`AgentSessions._reconcile`);
* after a restart a node whose agent does not return within the timeout is handled as a lost agent.

:class:`AgentSessions` keeps that bookkeeping; what it changes in the jobs (a requeue, a pass)
goes through the control plane it serves, which owns the jobs.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict, Unpack

import structlog

from halyard.controlplane.agent_reports import check_register, refused_field
from halyard.controlplane.disruption import DisruptionSettings, LostAgentGuard
from halyard.controlplane.errors import AlreadyExists, PermissionDenied
from halyard.datamodel import HalyardError, JobState, ValidationError
from halyard.datamodel import limits as lim
from halyard.datamodel.limits import MAX_REQUEST_ID
from halyard.scheduling.backends import backend_kind
from halyard.scheduling.state import StoreError
from halyard.tls import Principal
from halyard.v1 import agent_service_pb2 as apb
from halyard.wire import node_to_pb

if TYPE_CHECKING:
    from halyard.controlplane.service import ControlPlane

log = structlog.get_logger("halyard.controlplane")

DEFAULT_HEARTBEAT_S = 1.0
DEFAULT_HEARTBEAT_TIMEOUT_S = 5.0  # five missed heartbeats
# A liveness check that wakes this many wall seconds later than it asked to found the control plane
# starved (its event loop busy, or the process not given a core): the heartbeats it did not read in
# that time may be queued in gRPC, so silence before that check is not charged to the agents (a
# choice of ours; one heartbeat interval of the default 1 s, well above a healthy loop's lag).
STARVED_LOOP_S = 1.0
# The lost-agent guard counts an agent as silent once it has been quiet for this share of the heartbeat
# timeout (two missed 1 s heartbeats of the default 5 s), while one is declared lost only at the whole
# timeout: agents that go silent together cross the timeout over a heartbeat or so, and the guard must
# see all of them before it lets the first go (Kubernetes judges a zone on NotReady nodes long before
# their pods' eviction). A choice of ours.
SUSPECT_SHARE = 0.5
# Registrations within this many wall seconds share one commit and one scheduling pass (a choice of ours).
# When a fleet connects at once (a cold start, or every agent re-dialling after a restart), a commit and a
# pass per Register cost O(running jobs) each on the event loop, and the registrations and heartbeats
# behind them waited: benchmarks/bench_fleet.py --restart. A new node is offered work this much later.
REGISTRATION_BATCH_S = 0.05


class Command(TypedDict, total=False):
    """A command for :meth:`AgentSession.send`: one field of ``ControlMessage``'s ``body`` oneof, by name."""

    registered: apb.Registered
    launch: apb.Launch
    preempt: apb.Preempt
    reconfigure: apb.Reconfigure
    set_time_shift: apb.SetTimeShift
    profile: apb.Profile
    drain: apb.Drain
    exit_ack: apb.ExitAck
    read_log: apb.ReadLog


@dataclass
class AgentSession:
    """One connected agent: its outgoing commands and when it was last heard from."""

    node: str
    backend: str
    instance: str = ""
    peer: str = ""
    outbox: asyncio.Queue[apb.ControlMessage] = field(default_factory=asyncio.Queue)
    last_seen: float = field(default_factory=time.monotonic)
    closed: bool = False
    silent: bool = False  # silent past the timeout but held by the lost-agent guard: takes no new work
    left: bool = False  # the agent said it is leaving (Leaving): its node is gone, not silent
    heartbeat: apb.Heartbeat | None = None  # the latest: measured GPU utilisation and health (dashboard, metrics)
    epoch: int = 0  # the control plane's leadership epoch, on every command (leadership.py; 0 without)
    quiet_spell: bool = False  # once went SUSPECT_SHARE x the timeout without a processed message (counted once)

    def send(self, **body: Unpack[Command]) -> None:
        if not self.closed:
            self.outbox.put_nowait(apb.ControlMessage(leader_epoch=self.epoch, **body))

    @property
    def reports_real_progress(self) -> bool:
        """Agents that run real processes: their reports, not the performance model, say how far a job is.

        An emulated agent runs the model itself, so its reports agree with the
        record already (and replay stays the simulator's schedule).
        """
        return self.backend != "emulated"


class AgentSessions:
    """The connected agents by node, the nodes whose agent is away, and the liveness check."""

    def __init__(self, cp: ControlPlane, *, heartbeat_s: float, heartbeat_timeout_s: float,
                 disruption: DisruptionSettings | None) -> None:
        self.cp = cp
        self.heartbeat_s = heartbeat_s
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.sessions: dict[str, AgentSession] = {}
        self._absent_since: dict[str, float] = {}  # node -> wall time its agent went away
        self._known: set[str] = set()  # nodes whose agent registered since start, or that hold jobs
        self._left: set[str] = set()  # nodes whose agent left cleanly but that still hold jobs
        self._judged_from = -math.inf  # silence before this (a starved liveness check) is not charged
        self.guard = LostAgentGuard(disruption)  # many agents silent at once: hold them (disruption.py)
        # Agent streams that once went SUSPECT_SHARE x the heartbeat timeout (2.5 s by default) or more
        # without a processed message since their Registered (halyard_agent_quiet_streams_total, and what
        # benchmarks/bench_fleet.py reports for a connect storm): each stream counted once.
        self.quiet_streams = 0
        self.refused_reports: dict[str, int] = {}  # agent messages refused, by the field named (no indices)
        self._registrations_due: asyncio.TimerHandle | None = None  # the commit and pass of a burst of Registers

    # --- lifecycle ----------------------------------------------------------

    def start(self, holding: set[str]) -> None:
        """The control plane starts: every node is away until its agent registers; ``holding`` (the
        nodes of restored running jobs) are known, so their silence is judged."""
        self._known.update(holding)
        started = time.monotonic()
        self._absent_since = {n.name: started for n in self.cp.cluster.nodes}

    def stop(self) -> None:
        """The control plane stops: no registration batch is committed any more (its persist on stop
        takes their changes)."""
        if self._registrations_due is not None:
            self._registrations_due.cancel()

    def close_all(self, *, drop_unsent: bool = False) -> None:
        """Close every session; with ``drop_unsent`` (the control plane stops writing) the commands not
        sent yet are dropped too."""
        for session in self.sessions.values():
            session.closed = True
            while drop_unsent and not session.outbox.empty():
                session.outbox.get_nowait()

    # --- streams --------------------------------------------------------------

    def register(self, register: apb.Register, who: Principal | None = None,
                 peer: str = "") -> tuple[AgentSession, apb.Registered]:
        """Accept an agent's stream, or refuse it naming why: not a node of this cluster
        (INVALID_ARGUMENT), a node its certificate is not for (PERMISSION_DENIED), or a node
        another agent holds a live stream for (ALREADY_EXISTS)."""
        cp = self.cp
        cp.check_writable()
        name = register.node.name
        if who is not None and who.node and name != who.node:
            log.warning("agent refused: registers as another node", certificate_node=who.node,
                        node=name[:MAX_REQUEST_ID], peer=peer)
            raise PermissionDenied(f"this agent's certificate is for node {who.node!r}; it may not speak for "
                                   f"node {name[:MAX_REQUEST_ID]!r}")
        if not cp.cluster.has_node(name):
            raise ValidationError(f"no node {name[:MAX_REQUEST_ID]!r} in cluster {cp.cluster.name!r}",
                                  field="register.node.name")
        check_register(register)
        node = cp.cluster.node(name)
        if register.node.gpus and register.node.gpus != node.gpus:
            raise ValidationError(f"node {name} has {node.gpus} GPUs in the cluster file, the agent says "
                                  f"{register.node.gpus}", field="register.node.gpus")
        self._refuse_second(name, register, peer)
        session = AgentSession(name, register.backend or "unknown", instance=register.instance[:lim.MAX_AGENT_INSTANCE],
                               peer=peer, left=register.leaving,  # leaving: no pass may place work here first
                               epoch=cp.leader_epoch)
        self.sessions[name] = session
        self._absent_since.pop(name, None)
        self._left.discard(name)
        self._known.add(name)
        self._reconcile(session, register)
        kind = backend_kind(session.backend, emulated_takes_commands=cp.emulated_takes_commands)
        cp.core.set_node_backend(name, kind)  # which jobs the node takes (scheduling/backends.py)
        cp.update_schedulable(name)
        self._registered_changed()
        registered = self._reply(name, register.cluster_digest)
        log.info("agent registered", node=name, backend=session.backend, running=len(register.running),
                 cluster_sent=bool(registered.cluster_toml))
        return session, registered

    def _reply(self, name: str, digest: str) -> apb.Registered:
        """The Registered answer: node-scoped, the agent's own node and the cluster's digest always, the
        cluster file only to an agent that lacks it (its digest differs)."""
        cp = self.cp
        params = cp.clock.params()
        toml = "" if digest == cp.cluster_digest else cp.cluster_toml
        return apb.Registered(
            node=name, node_spec=node_to_pb(cp.cluster.node(name)), cluster_digest=cp.cluster_digest,
            cluster_toml=toml, heartbeat_interval_s=self.heartbeat_s, leader_epoch=cp.leader_epoch,
            data_stalls=cp.perf.data_stalls, catalog_toml=cp.perf.catalog.profile_text,
            clock=apb.ClockParams(kind=apb.MANUAL if params.kind == "manual" else apb.ACCELERATED,
                                  wall_origin_unix_s=params.wall_origin_unix_s,
                                  cluster_origin_s=params.cluster_origin_s, speedup=params.speedup))

    def _refuse_second(self, name: str, register: apb.Register, peer: str) -> None:
        """Refuse a second agent for a node whose agent is connected and alive; a reconnect of the same
        agent (or one after the old went silent) replaces the old session."""
        old = self.sessions.get(name)
        if old is not None and not old.closed:
            alive = time.monotonic() - old.last_seen <= self.heartbeat_timeout_s
            if alive and not (register.instance and register.instance == old.instance):
                log.warning("agent refused: the node already has a connected agent", node=name, peer=peer,
                            connected_peer=old.peer, instance=register.instance[:lim.MAX_AGENT_INSTANCE],
                            connected=old.instance)
                raise AlreadyExists(f"node {name!r} already has a connected agent ({old.peer or 'another stream'}); "
                                    "a second agent for it is refused (stop the other, or wait "
                                    f"{self.heartbeat_timeout_s:g} s after it is gone)")
        if old is not None:
            old.closed = True

    @staticmethod
    def registered(session: AgentSession) -> None:
        """The Registered reply is on the stream: the heartbeat timeout counts from now, so time a
        busy control plane took to register a cold-starting fleet is not charged to the agents."""
        session.last_seen = time.monotonic()

    def heard_from(self, session: AgentSession) -> None:
        """A message came on ``session``: it is alive (a session the guard held takes work again)."""
        now = time.monotonic()
        if not session.quiet_spell and now - session.last_seen >= SUSPECT_SHARE * self.heartbeat_timeout_s:
            session.quiet_spell = True
            self.quiet_streams += 1
        session.last_seen = now
        if session.silent:  # held by the guard, and heard from again: it takes work again
            session.silent = False
            self.cp.update_schedulable(session.node)
            log.info("silent agent heard from again", node=session.node)

    def refused(self, session: AgentSession, error: HalyardError) -> None:
        """An agent's message was refused (out of range, too long): logged naming the field, and counted by it."""
        field = getattr(error, "field", None) or "unknown"
        key = refused_field(field)
        self.refused_reports[key] = self.refused_reports.get(key, 0) + 1
        log.warning("bad agent message", node=session.node, field=field, error=str(error)[:lim.MAX_AGENT_TEXT])

    def gone(self, session: AgentSession) -> None:
        """The stream ended; the node gets the heartbeat timeout to come back.

        An agent that left (it sent ``Leaving``: a graceful shutdown, not a cut or a crash) is
        not silent: it stopped its jobs, so they are requeued at once (waiting for the timeout, or
        for the lost-agent guard, which may hold them, would leave them RUNNING on nothing), and its
        node leaves the guard's population, as a node whose agent never came, until an agent
        registers for it again."""
        if self.sessions.get(session.node) is not session:
            return
        cp = self.cp
        del self.sessions[session.node]
        self._absent_since[session.node] = session.last_seen
        cp.update_schedulable(session.node)
        if not session.left:
            log.warning("agent disconnected", node=session.node)
            return
        requeued = False
        for job_id, nodes in list(cp.placed.items()):
            if session.node in nodes:
                cp.requeue(job_id, f"agent {session.node} left")
                requeued = True
        self._left.add(session.node)
        self._forget_left()
        log.info("agent left", node=session.node)
        if requeued:
            cp.changed()

    def _forget_left(self) -> None:
        """Nodes whose agent left and that hold no jobs are not there (not silent)."""
        holding = {n for nodes in self.cp.placed.values() for n in nodes}
        for node in self._left - holding:
            self._absent_since.pop(node, None)
            self._known.discard(node)
        self._left &= holding

    def _reconcile(self, session: AgentSession, register: apb.Register) -> None:
        cp = self.cp
        reported = {(r.job_id, r.attempt) for r in register.running}
        for job_id, attempt in reported:
            record = cp.core.records.get(job_id)
            if (record is None or record.attempt != attempt or record.state is not JobState.RUNNING
                    or session.node not in cp.placed.get(job_id, ())):
                log.warning("agent runs a job that is not its own; stopping it", node=session.node, job=job_id)
                session.send(preempt=apb.Preempt(job_id=job_id, attempt=attempt, grace_s=0.0))
        node = session.node
        for job_id in [j for j, nodes in cp.placed.items() if node in nodes]:  # a list: requeues change placed
            if (job_id, cp.core.records[job_id].attempt) not in reported:
                cp.requeue(job_id, f"agent {node} no longer runs it")

    def _registered_changed(self) -> None:
        """A Register changed the cluster (a node up, jobs reconciled): commit and pass once for the burst of
        registrations within REGISTRATION_BATCH_S, not once each (lockstep replay: at once, as the simulator)."""
        if not self.cp.sync.take_change() and self._registrations_due is None:
            self._registrations_due = asyncio.get_running_loop().call_later(REGISTRATION_BATCH_S,
                                                                            self._registrations_settled)

    def _registrations_settled(self) -> None:
        self._registrations_due = None
        if self.cp.failed is not None:
            return
        try:
            self.cp.changed()
        except StoreError:
            return  # fatal: the control plane's persist has stopped it

    # --- liveness -------------------------------------------------------------

    def silent(self, wall: float) -> list[AgentSession]:
        """Sessions not heard from for more than the timeout at monotonic time ``wall``
        (since their registration reached the stream, or their latest message, or the
        latest starved liveness check, whichever is last)."""
        return self._quiet_for(wall, self.heartbeat_timeout_s)

    def _quiet_for(self, wall: float, seconds: float) -> list[AgentSession]:
        since = self._judged_from
        return [s for s in self.sessions.values() if wall - max(s.last_seen, since) > seconds]

    async def liveness(self) -> None:
        """Every heartbeat interval, declare lost the agents silent past the timeout (:meth:`_declare_lost`)."""
        checked = time.monotonic()
        while True:
            await asyncio.sleep(self.heartbeat_s)
            wall = time.monotonic()
            late, checked = wall - checked - self.heartbeat_s, wall
            if late > STARVED_LOOP_S:
                self._judged_from = wall
                log.warning("liveness check ran late: the control plane was starved; agents' silence "
                            "before now is not counted", late_s=round(late, 3))
            try:
                self._declare_lost(wall)
            except StoreError:
                return  # fatal: the control plane's persist has stopped it

    def _declare_lost(self, wall: float) -> None:
        """Close silent sessions and requeue the jobs of nodes silent past the timeout, as far as the
        lost-agent guard admits (all of them unless many are silent at once: :mod:`disruption`)."""
        cp = self.cp
        timeout, since = self.heartbeat_timeout_s, self._judged_from
        suspect_s = SUSPECT_SHARE * timeout
        quiet = [(s.last_seen, s.node) for s in self._quiet_for(wall, suspect_s)]
        away = [(t, n) for n, t in self._absent_since.items() if n in self._known and wall - max(t, since) > suspect_s]
        silent = [(t, n) for t, n in quiet if wall - max(t, since) > timeout]
        absent = [(t, n) for t, n in away if wall - max(t, since) > timeout]
        with_jobs = {n for nodes in cp.placed.values() for n in nodes} if absent else set()
        # What declaring a node lost changes: its open session, or the jobs placed on it.
        candidates = sorted(silent + [(t, n) for t, n in absent if n in with_jobs])
        # The cluster's state is judged on agents quiet for part of the timeout, so agents that go silent
        # together are seen together, before the first of them reaches the timeout and is declared lost.
        # A drained node is out of service by an operator's choice: its silence says nothing of this side.
        counted = sum(1 for _, n in quiet + away if n not in cp.drained)
        admitted = self._admit([n for _, n in candidates], counted, len(self._known - cp.drained), wall)
        for _, node in silent:
            session = self.sessions[node]
            if node in admitted:
                log.warning("agent missed its heartbeats", node=node)
                session.closed = True
                self.gone(session)
            elif not session.silent:
                session.silent = True  # held: no new work until it is heard from
                cp.update_schedulable(node)
        lost = {n for _, n in candidates if n in admitted}
        requeued = False
        for job_id, nodes in list(cp.placed.items()):
            if lost.intersection(nodes):
                cp.requeue(job_id, f"lost agent on {', '.join(sorted(lost.intersection(nodes)))}")
                requeued = True
        if self._left:
            self._forget_left()
        if requeued:
            cp.changed()

    def _admit(self, candidates: list[str], counted: int, known: int, wall: float) -> set[str]:
        """The nodes among ``candidates`` the lost-agent guard lets be declared lost now."""
        before = self.guard.state
        admitted = set(self.guard.admit(candidates, counted, known, wall))
        if before.holds and not self.guard.state.holds:
            # Leaving a disruption: agents come back over a heartbeat or so, and the first few to speak end
            # it. The silence before now is not charged: the nodes still silent get one more timeout from
            # now, as Kubernetes' node-lifecycle controller updates every node's probe timestamp when it
            # exits disruption mode [code kubernetes/kubernetes pkg/controller/nodelifecycle
            # handleDisruption]; without it they were declared lost in the same check, as they spoke.
            self._judged_from = wall
            admitted = set()
        if self.guard.state is not before:
            log.warning("many agents silent at once: holding their nodes and jobs" if self.guard.state.holds
                        else "agents answer again: those still silent get one more heartbeat timeout",
                        disruption=self.guard.state.name.lower(), silent=self.guard.silent, known=self.guard.known,
                        rate_per_s=self.guard.rate(self.guard.known))
        return admitted
