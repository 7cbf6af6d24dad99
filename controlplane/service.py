"""The control plane: the job API and the scheduling loop behind gRPC, agents and a clock.

:class:`ControlPlane` is transport-free: the gRPC servicers (``grpc_*.py``) translate
requests into its methods, and agent streams into its :class:`AgentSessions`
(``cp.agents``: register, liveness, lost agents) and :meth:`ControlPlane.agent_message`. It
runs one scheduling task that makes a pass after every change and on the round timer,
computes each started job's rate with the shared performance model (:func:`timing.expect`,
as the simulator does), has its :class:`Dispatcher` send agents their commands, and persists
every change before answering (submissions through the :class:`GroupCommit`). In replay its
:class:`Lockstep` orders events as the simulator does; a live control plane has
:class:`NoLockstep`.

Failure handling (DESIGN.md, "State, failure and security"): agent_sessions.py says how
silent, returning and leaving agents are handled; after a restart the state comes back from
the store, and a node whose agent does not return within the timeout is handled as a lost agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from halyard.clock import Clock
from halyard.controlplane.agent_reports import check_report
from halyard.controlplane.agent_sessions import (
    DEFAULT_HEARTBEAT_S,
    DEFAULT_HEARTBEAT_TIMEOUT_S,
    AgentSession,
    AgentSessions,
)
from halyard.controlplane.dispatch import TELLS_ALLOCATION, Dispatcher, allocation_of
from halyard.controlplane.disruption import DisruptionSettings
from halyard.controlplane.errors import AlreadyExists, FailedPrecondition, NotFound, Unavailable
from halyard.controlplane.group_commit import GROUP_COMMIT_WINDOW_S, GroupCommit
from halyard.controlplane.profiling import AgentProfiles
from halyard.controlplane.replay_lockstep import Lockstep, NoLockstep, ReplayLockstep
from halyard.controlplane.store import Store
from halyard.datamodel import Cluster, HalyardError, JobSpec, JobState, ValidationError, cluster_digest
from halyard.datamodel import limits as lim
from halyard.emulator import PerformanceModel
from halyard.peer_enums import UnknownEnums, enum_name
from halyard.policies import Action, Policy
from halyard.policies.view import ROUND_BOUNDARY_TOLERANCE_S
from halyard.scheduling.core import SchedulingCore
from halyard.scheduling.records import JobRecord
from halyard.scheduling.state import StoreError
from halyard.scheduling.timing import Pacer
from halyard.v1 import agent_service_pb2 as apb
from halyard.v1 import types_pb2 as tpb
from halyard.wire import spec_from_pb

if TYPE_CHECKING:
    from halyard.controlplane.forecast import Forecaster

log = structlog.get_logger("halyard.controlplane")

DRAINED_META = "drained_nodes"
DRAIN_REASONS_META = "drain_reasons"  # node -> why it is drained (an operator's reason, or its health)
# Outside lockstep a round pass runs when the event loop reaches the round timer, a little after the
# boundary (more in cluster time under an accelerated clock): a pass within this fraction of a round
# after a boundary is that round's, for round-based policies (ClusterView.at_round_boundary; Synergy
# §3). Our choice: generous against loop latency, and a second pass inside it only re-decides the round.
ROUND_PASS_SLACK_FRACTION = 0.1
# Pass pacing (a choice of ours): after an event pass of p wall seconds the scheduler rests
# PASS_REST_RATIO x p (at most MAX_PASS_REST_S) before the next, so while submissions pour in,
# passes take at most 1/(1 + ratio) of the event loop and each covers everything that came
# meanwhile; a new job waits at most that rest longer for its pass. A pass is O(pending jobs) in
# the staged policies, so one pass per arrival would not keep up with a long queue.
PASS_REST_RATIO = 4.0
MAX_PASS_REST_S = 0.5


class ControlPlane:
    """The job API (submit, cancel, drain, what agents report of jobs) and the scheduling loop.

    Its parts, each in its own module: ``agents`` (:class:`AgentSessions`: streams, liveness,
    lost agents), ``dispatcher`` (:class:`Dispatcher`: a pass's actions as agent commands),
    ``commits`` (:class:`GroupCommit`: one transaction and pass per burst of submissions) and
    ``sync`` (:class:`Lockstep`: replay's event order; :class:`NoLockstep` when live).
    """

    def __init__(self, cluster: Cluster, policy: Policy, perf: PerformanceModel, clock: Clock, store: Store,
                 *, cluster_toml: str, round_s: float = 300.0, heartbeat_s: float = DEFAULT_HEARTBEAT_S,
                 heartbeat_timeout_s: float = DEFAULT_HEARTBEAT_TIMEOUT_S, lockstep: bool = False,
                 group_commit_window_s: float = GROUP_COMMIT_WINDOW_S,
                 disruption: DisruptionSettings | None = None, emulated_takes_commands: bool = False) -> None:
        self.cluster = cluster
        self.cluster_toml = cluster_toml
        self.cluster_digest = cluster_digest(cluster_toml)  # an agent holding this file is not sent it
        self.perf = perf
        self.clock = clock
        self.store = store
        self.round_s = round_s
        # Emulated agents stand in for real ones and take jobs with a command too (never run): the test
        # kit's setting (halyard.testing), off in a real cluster, where such a job waits for a process agent.
        self.emulated_takes_commands = emulated_takes_commands
        self.core = SchedulingCore(cluster, policy, perf, round_s=round_s, backends=True,
                                   round_slack_s=(ROUND_BOUNDARY_TOLERANCE_S if lockstep
                                                  else ROUND_PASS_SLACK_FRACTION * round_s))
        # Replay's lockstep (replay_lockstep.py): events in the simulator's order; a no-op when live.
        self.sync: Lockstep = ReplayLockstep(self) if lockstep else NoLockstep()
        self.profiles = AgentProfiles(self)  # Crius §5.1: stage profilings asked of the agents
        self.core.profiles = self.profiles
        self._profiled: set[tuple[object, ...]] = set()  # submitted specs whose profilings are all in
        self.pacer = Pacer(self.core, perf)
        self.agents = AgentSessions(self, heartbeat_s=heartbeat_s, heartbeat_timeout_s=heartbeat_timeout_s,
                                    disruption=disruption)
        self.dispatcher = Dispatcher(self.agents.sessions, self.pacer)
        self.commits = GroupCommit(group_commit_window_s)  # submissions: one transaction and pass per burst
        self.drained: set[str] = set()
        self.drain_reasons: dict[str, str] = {}
        self._wake = asyncio.Event()
        # Set with _wake by every change but a submission (a completion, a cancel, an agent): its pass is
        # not paced, and it cuts a rest short (_scheduler).
        self._unpaced = asyncio.Event()
        self._events_changed = asyncio.Condition()
        self._last_pass = -math.inf
        self.pass_error: str | None = None  # why the latest scheduling pass failed; None once one succeeds
        self._tasks: list[asyncio.Task[None]] = []
        self.on_pass: Callable[[float], None] | None = None  # metrics hook: pass wall seconds
        self.on_action: Callable[[Action], None] | None = None  # observer: each applied action, in order
        self.core.free.schedulable[:] = False  # until agents register
        # Set when the store fails: memory may then hold changes the store does not, so the
        # control plane refuses every write and its daemon exits non-zero (a supervisor
        # restarts it from the store, which holds the last committed state).
        self.failed: str | None = None
        self.fatal = asyncio.Event()
        # The leadership epoch this control plane was elected with (leadership.py), stamped on Registered
        # and on every command so agents ignore an older leader's; 0 without leadership (SQLite).
        self.leader_epoch = 0
        self.unknown_enums = UnknownEnums()  # enum values peers sent that this build predates (peer_enums.py)
        self.forecasts: Forecaster | None = None  # set by ControlPlaneServer when forecasts are on

    @property
    def sessions(self) -> dict[str, AgentSession]:
        """The connected agents, by node (:class:`AgentSessions` keeps them)."""
        return self.agents.sessions

    @property
    def placed(self) -> dict[str, tuple[str, ...]]:
        """Running job -> the nodes whose agents hold it (:class:`Dispatcher` keeps it)."""
        return self.dispatcher.placed

    # --- lifecycle ----------------------------------------------------------

    async def start(self) -> None:
        state = self.store.load()
        if state.records:
            self.core.restore(state)
            for record in self.core.running.values():
                self.placed[record.job_id] = allocation_of(record).node_names
            log.info("restored", jobs=len(state.records), running=len(self.placed), events=len(state.events))
        self._last_pass = max((e.time for e in state.events), default=-math.inf)
        drained = self.store.get_meta(DRAINED_META)
        self.drained = {n for n in json.loads(drained) if self.cluster.has_node(n)} if drained else set()
        reasons = self.store.get_meta(DRAIN_REASONS_META)
        self.drain_reasons = {n: r for n, r in json.loads(reasons).items() if n in self.drained} if reasons else {}
        self.agents.start({n for nodes in self.placed.values() for n in nodes})
        self._tasks = [asyncio.create_task(self._scheduler(), name="scheduler"),
                       asyncio.create_task(self.agents.liveness(), name="liveness"),
                       asyncio.create_task(self._group_commit(), name="group-commit")]
        self._tasks += [asyncio.create_task(task, name="lockstep") for task in self.sync.background()]

    async def stop(self) -> None:
        self.agents.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.agents.close_all()
        if self.failed is None:
            self.persist()

    # --- clients --------------------------------------------------------------

    def check_writable(self) -> None:
        """Raise :class:`Unavailable` once the store has failed (no change may be accepted)."""
        if self.failed is not None:
            raise Unavailable(f"the control plane is stopping: its state store failed ({self.failed}); "
                              "retry once it has restarted")

    async def admit(self, spec: tpb.JobSpec, requested: float | None) -> float:
        """Ready a submission arriving now and return its arrival time (for :meth:`submit`).

        The one step the RPC layer takes before submitting: the stage profilings the policy
        will estimate the job with are fetched (:meth:`prepare_profiles`), and in replay's
        lockstep the client's own stamp ``requested`` is kept and every completion the model
        expects before it is applied first. Live, without profilings, it returns the clock's
        time at once.
        """
        arrival = self.sync.arrival_time(requested, self.now())
        await self.prepare_profiles(spec)  # Crius §5.1/§6.1: its Cells profiled before its first pass
        await self.sync.settle(arrival)  # replay: the arrival waits for earlier completions
        return arrival

    def submit(self, spec: JobSpec) -> JobRecord:
        """Validate and apply; the job is durable once :meth:`committed` returns (answer only then).

        Live, the commit and the pass are the burst's (:class:`GroupCommit`): the submissions
        of a burst share one SQLite transaction and one scheduling pass. In lockstep the
        submission is passed and persisted at once, as the simulator orders an instant's
        events before its pass.
        """
        self.check_writable()
        if spec.job_id in self.core.records:
            raise AlreadyExists(f"job {spec.job_id!r} was already submitted")
        record = self.core.submit(spec, spec.submit_time)
        self.sync.event_at(spec.submit_time)
        if not self.sync.submitted(spec.submit_time):
            self.commits.add()
        return record

    def submit_refused(self) -> None:
        """A submission was refused (or its call ended) after :meth:`admit`. In lockstep, if it was its
        instant's last arrival and an earlier one at that instant left the pass to it, the instant's
        pass is made now; otherwise the instant would get none and its jobs would wait for the next event."""
        self.sync.submit_refused()

    async def committed(self) -> None:
        """Return once every change made so far is in the store; raise :class:`StoreError` if
        the commit that should hold them failed, :class:`Unavailable` if the store failed before
        (the control plane then stops: see ``failed``)."""
        self.check_writable()  # a failed store answers nothing as stored (and no group would ever resolve)
        await self.commits.committed()

    async def _group_commit(self) -> None:
        """Group commit: one SQLite transaction, then one scheduling pass, per burst of submissions.

        A burst is what :meth:`GroupCommit.gather` collects; :meth:`persist` stores its jobs
        and events in one transaction and answers the waiters (a change persisted in
        between, a cancel or an agent's report, takes the submissions with it); then
        the scheduler makes one pass for the burst. The answer does not wait for the
        pass: it says the job is stored and pending, as it always did. Any other failure
        here stops the control plane as a store failure does (:meth:`_fail`): otherwise
        every submitter would wait for a commit that never comes.
        """
        try:
            await self.commits.run(self._commit_burst)
        except Exception as exc:
            log.exception("group commit failed")
            self._fail(exc)

    def _commit_burst(self) -> bool:
        """Store a burst; False once the control plane has stopped writing."""
        if self.failed is not None:
            return False
        try:
            self.persist()
        except StoreError:
            return False  # fatal: persist has stopped the control plane and failed the waiters
        self._wake.set()  # one pass after the burst (the scheduler's, paced: see _scheduler)
        return True

    def job(self, job_id: str) -> JobRecord:
        try:
            return self.core.records[job_id]
        except KeyError:
            raise NotFound(f"no job {job_id!r}") from None

    def cancel(self, job_id: str) -> JobRecord:
        self.check_writable()
        record = self.job(job_id)
        if record.state.terminal:
            raise FailedPrecondition(f"job {job_id!r} already ended: {record.state.value}")
        self.dispatcher.stop(job_id, record.attempt)
        self.core.cancel(job_id, self.now())
        self.changed()
        return record

    def set_drained(self, node: str, drained: bool, reason: str = "") -> None:
        self._mark_drained(node, drained, reason)
        self.changed()

    def _mark_drained(self, node: str, drained: bool, reason: str) -> None:
        """Drain or undrain ``node`` and persist it (with its reason), without a pass."""
        self.check_writable()
        if not self.cluster.has_node(node):
            raise NotFound(f"no node {node!r} in cluster {self.cluster.name!r}")
        after = self.drained | {node} if drained else self.drained - {node}
        reasons = {n: r for n, r in self.drain_reasons.items() if n != node}
        if drained:
            reasons[node] = reason or "drained by operator"
        try:  # persisted first; a restart keeps it
            self.store.set_meta(DRAINED_META, json.dumps(sorted(after)))
            self.store.set_meta(DRAIN_REASONS_META, json.dumps(reasons, sort_keys=True))
        except StoreError as exc:
            self._fail(exc)
            raise
        self.drained, self.drain_reasons = after, reasons
        if drained and node in self.sessions:
            self.sessions[node].send(drain=apb.Drain(reason=reasons[node]))
        self.update_schedulable(node)

    def scheduler_problem(self) -> str | None:
        """Why the scheduling loop is unhealthy (for /healthz), or None: not started, ended, or its last pass failed."""
        loop = next((t for t in self._tasks if t.get_name() == "scheduler"), None)
        if loop is None:
            return "the scheduling loop is not running"
        if loop.done():
            return "the scheduling loop has stopped"
        if self.pass_error is not None:
            return f"the last scheduling pass failed: {self.pass_error}"
        return None

    def now(self) -> float:
        """Cluster time of the next change: never before the last pass."""
        return max(self.clock.now(), self._last_pass)

    @property
    def last_pass_time(self) -> float:
        return self._last_pass

    def set_time_origin(self, t: float) -> None:
        """Replay: the trace's time zero is ``t`` on this clock (SchedulingCore.origin_s); only
        before any job, since phases and draws already taken from the old origin would not move."""
        if self.core.records:
            raise FailedPrecondition(f"the time origin is set before the first job; {len(self.core.records)} "
                                     "are already in")
        self.core.origin_s = t

    def set_arrival_horizon(self, t: float, *, then: float = math.inf) -> None:
        """Lockstep replay: no arrival before ``t`` is still to come (``inf`` once all are in), and
        the one after it is at ``then`` (a submit at ``t == then`` leaves the pass to the next)."""
        self.sync.set_arrival_horizon(t, then)

    async def wait_events(self, after_seq: int, timeout: float) -> None:
        """Wait until the log holds an event after ``after_seq`` (or ``timeout`` wall seconds).

        A negative ``after_seq`` waits as 0 does: the log's first event is #1, so "after -1"
        holds no more than "after 0", and returning at once would let a caller's loop spin."""
        async with self._events_changed:
            if len(self.core.log) > max(after_seq, 0):
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._events_changed.wait()

    # --- what agents report ----------------------------------------------------

    def agent_message(self, session: AgentSession, msg: apb.AgentMessage) -> None:
        self.check_writable()
        self.agents.heard_from(session)
        kind = msg.WhichOneof("body")
        if kind == "heartbeat" and not msg.heartbeat.healthy and session.node not in self.drained:
            # The node's own agent says it is faulty: acted on even when the report's numbers are refused below.
            self._drain_unhealthy(session.node, lim.clean_text(msg.heartbeat.detail, lim.MAX_HEALTH_DETAIL))
        check_report(msg, kind)
        if kind == "heartbeat":
            session.heartbeat = msg.heartbeat
        elif kind == "exited":
            self._on_exited(session, msg.exited)
        elif kind == "progress":
            self._on_progress(session, msg.progress)
        elif kind == "profile_result":
            self.profiles.deliver(session.node, msg.profile_result)
        elif kind == "leaving":
            session.left = True
            self.update_schedulable(session.node)  # stopping: no new work between Leaving and the close
            log.info("agent leaving", node=session.node, reason=msg.leaving.reason[:lim.MAX_DRAIN_REASON])
        elif kind == "register":
            raise ValidationError("register is only allowed as the first message", field="register")

    def _on_progress(self, session: AgentSession, progress: apb.Progress) -> None:
        record = self._check_owner(session, progress.job_id, progress.attempt)
        if record is not None and progress.HasField("time_shift_drift_s"):
            record.time_shift_drift_s = progress.time_shift_drift_s  # shown, never scheduled on
        if record is not None and session.reports_real_progress:
            recent = [s for s in progress.recent_iteration_s if s > 0]
            self.core.report_progress(record, self.now(), progress.iterations_done,
                                      sum(recent) / len(recent) if recent else None)

    # --- internals ------------------------------------------------------------

    def changed(self) -> None:
        """A change was made (not a submission): persist it and pass at once (in lockstep, with it)."""
        self.sync.on_change()
        self.persist()
        self._unpaced.set()  # not a submission: its pass goes at once, even during a rest
        self._wake.set()

    def persist(self) -> None:
        """Store every change not stored yet in one transaction, then answer the submissions it holds."""
        records, events = self.core.take_changes()
        if records or events:
            try:
                self.store.save(records, events)
            except StoreError as exc:
                self._fail(exc)
                raise
            if events:
                asyncio.get_running_loop().create_task(self._notify_events())
        self.commits.done()

    def stop_writing(self, exc: Exception) -> None:
        """Refuse every change from now on and tell the daemon to exit (leadership lost: leadership.py)."""
        self._fail(exc)

    def _fail(self, exc: Exception) -> None:
        """The store failed: from now on refuse every change, and tell the daemon to exit non-zero.

        Commands not yet sent are dropped and no more are queued: they were decided on changes the store
        does not hold (or, fenced, by a control plane that no longer leads)."""
        if self.failed is None:
            self.failed = str(exc)
            log.critical("state store failed: refusing writes and stopping; restart from the store",
                         error=str(exc))
        self.agents.close_all(drop_unsent=True)
        self.commits.failed(exc)
        self.fatal.set()

    async def _notify_events(self) -> None:
        async with self._events_changed:
            self._events_changed.notify_all()

    def update_schedulable(self, node: str) -> None:
        """Whether ``node`` takes new work: its agent connected, heard from, not leaving, and not drained."""
        index = self.cluster.node(node).index
        session = self.sessions.get(node)
        self.core.free.schedulable[index] = (session is not None and not session.silent and not session.left
                                             and node not in self.drained)

    def _check_owner(self, session: AgentSession, job_id: str, attempt: int) -> JobRecord | None:
        """The job if this agent runs its current attempt; None for stale messages."""
        record = self.core.records.get(job_id)
        if record is None or record.attempt != attempt or session.node not in self.placed.get(job_id, ()):
            log.info("stale agent message", node=session.node, job=job_id, attempt=attempt)
            return None
        return record

    def _on_exited(self, session: AgentSession, exited: apb.Exited) -> None:
        """Apply an exit (if it is the current attempt's), store it, then acknowledge it: until the
        ack the agent keeps it and sends it again after a reconnect or a restart of ours, so an
        exit is never lost; one already applied is stale the second time and only acknowledged."""
        self._apply_exit(session, exited)  # a store failure raises: no ack, the agent keeps the exit
        session.send(exit_ack=apb.ExitAck(job_id=exited.job_id, attempt=exited.attempt))

    def _apply_exit(self, session: AgentSession, exited: apb.Exited) -> None:
        record = self._check_owner(session, exited.job_id, exited.attempt)
        if record is None or record.state is not JobState.RUNNING:
            return
        # A status newer than this control plane (docs/api.md, "Unknown enum values"): the job ended there
        # for a reason not known here, so it is handled as lost: requeued from its last checkpoint.
        status = self.unknown_enums.read(apb.ExitStatus, exited.status, message="Exited", field="status",
                                         default=apb.EXIT_LOST, peer=session.node)
        when = max(exited.cluster_time, record.last_assignment_time or 0.0)
        if status == apb.EXIT_COMPLETED and self.sync.completes_jobs:
            return  # lockstep: the model's own completion (already due) ends the job; agents follow it
        self.sync.event_at(when)
        if status == apb.EXIT_COMPLETED:
            self.complete(record.job_id, when)
        elif status == apb.EXIT_FAILED:
            self.dispatcher.stop(record.job_id, record.attempt, skip=session.node)
            self.core.fail(record.job_id, when, exited.message)
        else:  # preempted or lost on its own: back to the queue from the last checkpoint
            if session.reports_real_progress:
                self.core.report_progress(record, self.now(), exited.checkpoint_iteration)
            self.dispatcher.stop(record.job_id, record.attempt, skip=session.node)
            self.core.requeue(record.job_id, self.now(), f"agent {session.node}: {enum_name(apb.ExitStatus, status)}")
        self.changed()

    def complete(self, job_id: str, t: float) -> None:
        """The job completed at cluster time ``t``: its agents hold it no more."""
        self.placed.pop(job_id, None)
        self.core.complete(job_id, t)

    def _drain_unhealthy(self, node: str, detail: str) -> None:
        """An unhealthy heartbeat (ECC or Xid errors, NVML failing) drains the node with its reason and
        requeues its jobs from their checkpoints: a faulty node gets no more work until an operator
        undrains it."""
        reason = f"unhealthy: {detail or 'the agent reported unhealthy without a detail'}"
        log.warning("node drained: unhealthy heartbeat", node=node, detail=detail)
        self._mark_drained(node, True, reason)
        for job_id, nodes in list(self.placed.items()):
            if node in nodes:
                self.requeue(job_id, f"node {node} {reason}")
        self.changed()

    def requeue(self, job_id: str, reason: str) -> None:
        """Stop a running job on its agents and put it back in the queue from its last checkpoint."""
        record = self.core.records[job_id]
        if record.state is JobState.RUNNING:
            self.dispatcher.stop(job_id, record.attempt)
            self.core.requeue(job_id, self.now(), reason)
            log.warning("job requeued", job=job_id, reason=reason)

    # --- the scheduling loop ----------------------------------------------------

    async def _scheduler(self) -> None:
        scheduler = asyncio.current_task()
        while True:
            deadline = self.next_round()
            if math.isfinite(deadline):
                sleeper = asyncio.create_task(self.clock.sleep_until(deadline))
                waker = asyncio.create_task(self._wake.wait())
                try:
                    await asyncio.wait({sleeper, waker}, return_when=asyncio.FIRST_COMPLETED)
                finally:  # also when stop() cancels this task: neither waiter outlives it
                    sleeper.cancel()
                    waker.cancel()
                round_due = sleeper.done() and not sleeper.cancelled()
                if round_due:
                    await self.sync.before_round(deadline)
            else:
                round_due = False
                await self._wake.wait()
            self._wake.clear()
            if self.sync.passes_with_changes and not round_due:
                continue  # lockstep passes already ran with their events
            if self.failed is not None:
                return
            paced = not (round_due or self._unpaced.is_set())  # only the group commit asked for this pass
            self._unpaced.clear()
            try:
                seconds = self._run_pass()
            except StoreError:
                return  # fatal: persist has stopped the control plane
            if paced:  # the loop takes in arrivals while the next pass waits; any other change ends the rest
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._unpaced.wait(), min(PASS_REST_RATIO * seconds, MAX_PASS_REST_S))
                # Python 3.11's wait_for returns, dropping a cancellation that lands as its wait completes: stop()
                # would then wait for this loop forever. (asyncio.timeout keeps it, but runs the wait in this task,
                # which moves the pass against the group commit's probes: test_ingest's lone submitter.)
                if scheduler is not None and scheduler.cancelling():
                    raise asyncio.CancelledError

    def _run_pass(self) -> float:
        """One pass; its policy's wall seconds (0 if it had nothing to do or failed). A policy bug is
        logged and said on /healthz, not fatal (a store failure is)."""
        try:
            seconds = self.pass_now()
            self.pass_error = None
            return seconds
        except StoreError:
            raise
        except Exception as exc:  # a policy bug must not kill the control plane
            self.pass_failed(exc)
            return 0.0

    def pass_failed(self, exc: Exception, why: str = "scheduling pass failed") -> None:
        """A pass raised (a policy bug): log it and say it on /healthz (:meth:`scheduler_problem`)."""
        log.exception(why)
        self.pass_error = f"{type(exc).__name__}: {exc}"

    def next_round(self) -> float:
        """The cluster time of the next round pass (inf while the policy has no round to run), or of an
        earlier pass the policy asks for between rounds (``SchedulingCore.wake_at``), as the simulator."""
        policy = self.core.policy
        waiting = self.core.pending or (policy.acts_without_pending and self.core.running)
        wakes = getattr(policy, "wake_at", None) is not None
        if not (policy.needs_rounds and waiting) and not wakes:
            return math.inf
        now = self.sync.instant(self.now())
        due = (math.floor(now / self.round_s) + 1) * self.round_s if policy.needs_rounds and waiting else math.inf
        return min(due, self.core.wake_at(now)) if wakes else due

    def pass_now(self) -> float:
        """Run the policy if it has work, then re-rate every job whose iteration time changed; the
        policy pass's wall seconds as the core timed it (0 if the policy did not run)."""
        policy = self.core.policy
        runs = bool(self.core.pending or policy.acts_without_pending)
        now = self.sync.pass_at(self.now())  # lockstep: the newest event's instant, as the simulator's passes
        actions = self.core.schedule(now) if runs else []
        if runs:
            self.pass_error = None  # the latest pass succeeded (lockstep passes do not go through _run_pass)
        seconds = self.core.pass_seconds.last if runs else 0.0  # timed once, by the core
        if runs:
            self._last_pass = now
        # Jobs whose actions send their agents the new allocation (and with it the slowdown).
        told = {a.job_id for a in actions if isinstance(a, TELLS_ALLOCATION)}
        rerated = self.pacer.update(actions, now)
        for record in rerated:
            if record.job_id not in told:  # a co-runner on its links came or went, or its time-shift moved
                self.dispatcher.reconfigure(record, now, emulated_only=True)
        self.sync.expect(rerated)
        for action in actions:
            if self.on_action is not None:
                self.on_action(action)
            self.dispatcher.dispatch(action, self.core.records[action.job_id], now)
        self.persist()
        if runs:
            self.profiles.ask_missed()  # profilings the pass waited for: asked now, answered -> next pass
        if runs and self.on_pass is not None:
            self.on_pass(seconds)
        return seconds

    # --- stage profilings (policies that estimate jobs from them) ----------------

    async def prepare_profiles(self, *specs: tpb.JobSpec) -> None:
        """Before submissions: fetch the stage profilings the policy will estimate the jobs with (Crius
        §6.1: a new job's Cells are profiled on each GPU type, in parallel; a batch's jobs at once), so
        their first pass -- in lockstep the simulator's pass -- finds them answered. A spec the
        submission will refuse is left for it to name what is wrong. Most policies want none: then
        it returns at once, no spec parsed a second time on the submission path."""
        if not self.core.prepares:
            return
        if len(specs) == 1:
            await self._prepare_profiles(specs[0])
        else:
            await asyncio.gather(*(self._prepare_profiles(spec) for spec in specs))

    async def _prepare_profiles(self, spec: tpb.JobSpec) -> None:
        key = profiling_key(spec)
        if key in self._profiled:
            return
        try:
            requests = self.core.preparations(spec_from_pb(spec, submit_time=0.0))
        except (HalyardError, ValueError, KeyError):  # e.g. an unknown model: the submission names it
            return
        if requests:
            await self.profiles.fetch(requests)
        if all(self.profiles.answered(r) for r in requests):
            self._profiled.add(key)

    def profiles_answered(self) -> None:
        """Profilings a pass missed are in: run another pass (in lockstep with the last event's instant)."""
        if not self.sync.take_change():
            self._wake.set()


def profiling_key(spec: tpb.JobSpec) -> tuple[object, ...]:
    """What a job's profilings depend on, read off the message: a job like one already profiled costs
    no parse (in lockstep replay every wall millisecond is many cluster seconds)."""
    return (spec.model, spec.batch_size, spec.num_gpus, spec.min_gpus, spec.max_gpus, spec.gpu_type,
            spec.parallelism.SerializeToString(deterministic=True) if spec.HasField("parallelism") else b"")
