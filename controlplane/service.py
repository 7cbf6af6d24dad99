"""The control plane: the scheduling core behind gRPC, agents and a clock.

:class:`ControlPlane` is transport-free: the gRPC servicers (``grpc_*.py``)
translate requests into its methods, and agent streams into
:meth:`agent_register` / :meth:`agent_message` / :meth:`agent_gone`. It runs one
scheduling task that makes a pass after every change and on the round timer,
computes each started job's rate with the shared performance model
(:func:`timing.expect`, as the simulator does), sends agents their commands and
persists every change before answering.

Failure handling (DESIGN.md, "State, failure and security"):

* a node takes work only while its agent is connected and it is not drained;
* an agent silent for ``heartbeat_timeout_s`` (wall time), counted from its registration
  reaching the stream (:meth:`agent_registered`) and then from its latest message, is declared lost:
  its jobs go back to the queue from their last checkpoint and the other nodes
  of those jobs are told to stop;
* a registering agent reports what it runs: jobs it runs that are no longer
  its own (an older attempt, another node) are stopped; jobs the control plane
  placed there that the agent does not report are requeued;
* after a restart the state comes back from the store, and a node whose agent
  does not return within the timeout is handled as a lost agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog

from halyard.clock import Clock
from halyard.controlplane.agent_reports import check_register, check_report, refused_field
from halyard.controlplane.backends import backend_kind
from halyard.controlplane.core import SchedulingCore
from halyard.controlplane.disruption import DisruptionSettings, LostAgentGuard
from halyard.controlplane.errors import AlreadyExists, FailedPrecondition, NotFound, PermissionDenied, Unavailable
from halyard.controlplane.profiling import AgentProfiles
from halyard.controlplane.records import JobRecord
from halyard.controlplane.store import Store, StoreError
from halyard.controlplane.timing import Pacer
from halyard.datamodel import Cluster, HalyardError, JobSpec, JobState, ValidationError, cluster_digest
from halyard.datamodel import limits as lim
from halyard.datamodel.limits import MAX_REQUEST_ID
from halyard.emulator import PerformanceModel
from halyard.peer_enums import UnknownEnums, enum_name
from halyard.policies import Action, Migrate, Policy, Preempt, Resize, SetResources, SetTimeShift, Start
from halyard.policies.view import ROUND_BOUNDARY_TOLERANCE_S
from halyard.tls import Principal
from halyard.v1 import agent_service_pb2 as apb
from halyard.v1 import types_pb2 as tpb
from halyard.wire import allocation_to_pb, node_to_pb, spec_from_pb, spec_to_pb

if TYPE_CHECKING:
    from halyard.controlplane.forecast import Forecaster

log = structlog.get_logger("halyard.controlplane")

DEFAULT_HEARTBEAT_S = 1.0
DEFAULT_HEARTBEAT_TIMEOUT_S = 5.0  # five missed heartbeats
DEFAULT_PREEMPT_GRACE_S = 30.0  # wall seconds an agent has to checkpoint on Preempt
DRAINED_META = "drained_nodes"
DRAIN_REASONS_META = "drain_reasons"  # node -> why it is drained (an operator's reason, or its health)
LOCKSTEP_WAIT_S = 2.0  # wall seconds an arrival waits for earlier completions before going ahead
LOCKSTEP_POLL_S = 0.001
# Outside lockstep a round pass runs when the event loop reaches the round timer, a little after the
# boundary (more in cluster time under an accelerated clock): a pass within this fraction of a round
# after a boundary is that round's, for round-based policies (ClusterView.at_round_boundary; Synergy
# §3). Our choice: generous against loop latency, and a second pass inside it only re-decides the round.
ROUND_PASS_SLACK_FRACTION = 0.1
# Group commit (ControlPlane._gather_burst; choices of ours, measured by benchmarks/bench_ingest.py):
# a commit waiting for the callers it expects gives up once none has joined for this long (0: it
# waits only for the calls already delivered), and waits at most this many windows in all.
GROUP_COMMIT_WINDOW_S = 1e-3
GROUP_COMMIT_MAX_WINDOWS = 20
GROUP_COMMIT_MAX_PROBE_GAP = 1024  # a lone submitter probes (waits a window) in this many commits at most
MAX_GROUP_COMMIT_WINDOW_MS = 100.0  # a longer wait is a misconfiguration, not a trade
# Pass pacing (a choice of ours): after an event pass of p wall seconds the scheduler rests
# PASS_REST_RATIO x p (at most MAX_PASS_REST_S) before the next, so while submissions pour in,
# passes take at most 1/(1 + ratio) of the event loop and each covers everything that came
# meanwhile; a new job waits at most that rest longer for its pass. A pass is O(pending jobs) in
# the staged policies, so one pass per arrival would not keep up with a long queue.
PASS_REST_RATIO = 4.0
MAX_PASS_REST_S = 0.5
LOCKSTEP_LAG_WALL_S = 0.05  # a completion is applied this long (wall) after its instant: > any message jitter
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

    def send(self, **body: object) -> None:
        if not self.closed:
            self.outbox.put_nowait(apb.ControlMessage(leader_epoch=self.epoch, **body))


class ControlPlane:
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
        self.heartbeat_s = heartbeat_s
        self.heartbeat_timeout_s = heartbeat_timeout_s
        # Emulated agents stand in for real ones and take jobs with a command too (never run): the test
        # kit's setting (halyard.testing), off in a real cluster, where such a job waits for a process agent.
        self.emulated_takes_commands = emulated_takes_commands
        self.core = SchedulingCore(cluster, policy, perf, round_s=round_s, backends=True,
                                   round_slack_s=(ROUND_BOUNDARY_TOLERANCE_S if lockstep
                                                  else ROUND_PASS_SLACK_FRACTION * round_s))
        self.profiles = AgentProfiles(self)  # Crius §5.1: stage profilings asked of the agents
        self.core.profiles = self.profiles
        self._profiled: set[tuple[object, ...]] = set()  # submitted specs whose profilings are all in
        self.pacer = Pacer(self.core, perf)
        self.sessions: dict[str, AgentSession] = {}
        self.drained: set[str] = set()
        self.drain_reasons: dict[str, str] = {}
        self.placed: dict[str, tuple[str, ...]] = {}  # running job -> nodes whose agents hold it
        self._absent_since: dict[str, float] = {}  # node -> wall time its agent went away
        self._known: set[str] = set()  # nodes whose agent registered since start, or that hold jobs
        self._left: set[str] = set()  # nodes whose agent left cleanly but that still hold jobs
        self._judged_from = -math.inf  # silence before this (a starved liveness check) is not charged
        self.guard = LostAgentGuard(disruption)  # many agents silent at once: hold them (disruption.py)
        self._wake = asyncio.Event()
        # Set with _wake by every change but a submission (a completion, a cancel, an agent): its pass is
        # not paced, and it cuts a rest short (_scheduler).
        self._unpaced = asyncio.Event()
        self._events_changed = asyncio.Condition()
        self._last_pass = -math.inf
        self.pass_error: str | None = None  # why the latest scheduling pass failed; None once one succeeds
        self._latest_event = -math.inf  # lockstep: the cluster time of the newest event handled
        self.lockstep = lockstep
        self._pass_owed = False  # lockstep: a submit left its instant's pass to the next submit at that instant
        # Lockstep: completions the model predicts, (finish, seq, job id, record epoch), as in the simulator.
        self._due: list[tuple[float, int, str, int]] = []
        self._due_seq = itertools.count()
        self._due_added = asyncio.Event()
        # Lockstep: the time of the next arrival the replay client has not submitted yet;
        # completions and rounds after it wait, as the simulator handles events in time order.
        self.arrival_horizon = math.inf
        self.next_arrival = math.inf  # lockstep: the arrival after the one at the horizon
        self._horizon_moved = asyncio.Event()
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
        # Group commit (:meth:`_group_commit`): submissions applied but not yet stored, and the
        # future their answers wait on, resolved by the next successful :meth:`_persist`.
        self.group_commit_window_s = group_commit_window_s
        self._uncommitted = 0
        self._group: asyncio.Future[None] | None = None
        self._commit_wanted = asyncio.Event()
        self._waiting = 0  # callers waiting in committed() for the next commit
        self._callers = 1  # the active callers the next commit waits for (_gather_burst)
        self._enough: asyncio.Future[None] | None = None  # resolved once _want callers are waiting
        self._want = 1
        self._probe_gap = 1  # commits of one caller between probes for a second (doubles while none comes)
        self._probe_in = 1
        self.on_commit: Callable[[int], None] | None = None  # metrics hook: submissions in each commit
        # Agent streams that once went SUSPECT_SHARE x the heartbeat timeout (2.5 s by default) or more
        # without a processed message since their Registered (halyard_agent_quiet_streams_total, and what
        # benchmarks/bench_fleet.py reports for a connect storm): each stream counted once.
        self.quiet_streams = 0
        self.unknown_enums = UnknownEnums()  # enum values peers sent that this build predates (peer_enums.py)
        self.refused_reports: dict[str, int] = {}  # agent messages refused, by the field named (no indices)
        self._registrations_due: asyncio.TimerHandle | None = None  # the commit and pass of a burst of Registers
        self.forecasts: Forecaster | None = None  # set by ControlPlaneServer when forecasts are on (issue 37)

    # --- lifecycle ----------------------------------------------------------

    async def start(self) -> None:
        state = self.store.load()
        if state.records:
            self.core.restore(state)
            for record in self.core.running.values():
                self.placed[record.job_id] = record.allocation.node_names
                self._known.update(record.allocation.node_names)
            log.info("restored", jobs=len(state.records), running=len(self.placed), events=len(state.events))
        self._last_pass = max((e.time for e in state.events), default=-math.inf)
        drained = self.store.get_meta(DRAINED_META)
        self.drained = {n for n in json.loads(drained) if self.cluster.has_node(n)} if drained else set()
        reasons = self.store.get_meta(DRAIN_REASONS_META)
        self.drain_reasons = {n: r for n, r in json.loads(reasons).items() if n in self.drained} if reasons else {}
        started = time.monotonic()
        self._absent_since = {n.name: started for n in self.cluster.nodes}
        self._tasks = [asyncio.create_task(self._scheduler(), name="scheduler"),
                       asyncio.create_task(self._liveness(), name="liveness"),
                       asyncio.create_task(self._group_commit(), name="group-commit")]
        if self.lockstep:
            self._tasks.append(asyncio.create_task(self._lockstep_completions(), name="lockstep"))

    async def stop(self) -> None:
        if self._registrations_due is not None:
            self._registrations_due.cancel()  # the persist below takes their changes
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for session in self.sessions.values():
            session.closed = True
        if self.failed is None:
            self._persist()

    # --- clients --------------------------------------------------------------

    def check_writable(self) -> None:
        """Raise :class:`Unavailable` once the store has failed (no change may be accepted)."""
        if self.failed is not None:
            raise Unavailable(f"the control plane is stopping: its state store failed ({self.failed}); "
                              "retry once it has restarted")

    def submit(self, spec: JobSpec) -> JobRecord:
        """Validate and apply; the job is durable once :meth:`committed` returns (answer only then).

        Outside lockstep the commit and the pass are the burst's (:meth:`_group_commit`):
        the submissions of a burst share one SQLite transaction and one scheduling pass.
        In lockstep the submission is passed and persisted at once, as the simulator
        orders an instant's events before its pass.
        """
        self.check_writable()
        if spec.job_id in self.core.records:
            raise AlreadyExists(f"job {spec.job_id!r} was already submitted")
        record = self.core.submit(spec, spec.submit_time)
        self._event_at(spec.submit_time)
        if self.lockstep:
            if self.next_arrival == spec.submit_time:
                # Lockstep: another job arrives at this instant; its submit runs the instant's one pass
                # (the simulator's: all of an instant's events, then one pass).
                self._persist()
                self._pass_owed = True
                return record
            self._changed()
        else:
            self._uncommitted += 1
            self._commit_wanted.set()
        return record

    def submit_refused(self) -> None:
        """Lockstep: a submission was refused (or its call ended). If it was its instant's last arrival
        and an earlier one at that instant left the pass to it, make the instant's pass now; otherwise
        the instant would get none and its jobs would wait for the next event."""
        if self.lockstep and self._pass_owed and self.next_arrival != self.arrival_horizon:
            self._changed()

    async def committed(self) -> None:
        """Return once every change made so far is in the store; raise :class:`StoreError` if
        the commit that should hold them failed, :class:`Unavailable` if the store failed before
        (the control plane then stops: see ``failed``)."""
        self.check_writable()  # a failed store answers nothing as stored (and no group would ever resolve)
        if self._uncommitted == 0:
            return
        if self._group is None:
            self._group = asyncio.get_running_loop().create_future()
        self._waiting += 1
        enough = self._enough
        if enough is not None and self._waiting >= self._want and not enough.done():
            enough.set_result(None)
        await asyncio.shield(self._group)

    async def _group_commit(self) -> None:
        """Group commit: one SQLite transaction, then one scheduling pass, per burst of submissions.

        A burst is what :meth:`_gather_burst` collects; :meth:`_persist` stores its jobs
        and events in one transaction and answers the waiters (a change persisted in
        between, a cancel or an agent's report, takes the submissions with it); then
        the scheduler makes one pass for the burst. The answer does not wait for the
        pass: it says the job is stored and pending, as it always did. Any other failure
        here stops the control plane as a store failure does (:meth:`_fail`): otherwise
        every submitter would wait for a commit that never comes.
        """
        try:
            await self._commit_bursts()
        except Exception as exc:
            log.exception("group commit failed")
            self._fail(exc)

    async def _commit_bursts(self) -> None:
        while True:
            await self._commit_wanted.wait()
            await self._gather_burst()
            self._commit_wanted.clear()
            if self._uncommitted == 0:
                continue  # another change's commit took them
            if self.failed is not None:
                return
            try:
                self._persist()
            except StoreError:
                return  # fatal: _persist has stopped the control plane and failed the waiters
            self._wake.set()  # one pass after the burst (the scheduler's, paced: see _scheduler)

    async def _gather_burst(self) -> None:
        """Let the active callers join a commit before it is made.

        Every call gRPC has already delivered joins in the next turn of the event loop.
        But gRPC's asyncio server hands over one new call per trip through its poller
        thread, so 50 callers answered together come back one by one over the next
        ~50 calls' worth of CPU, far longer than any fixed window: a commit that waited
        a fixed 1 ms held ~2 of them, and each paid a transaction, a pass and the wake-ups.
        So the commit waits for the callers it expects (``_callers``) while they keep
        coming, and gives up once none has joined for ``group_commit_window_s`` (or after
        ``GROUP_COMMIT_MAX_WINDOWS`` windows in all). The expectation is learned: a commit
        that got all it waited for expects one caller more next time when its callers came
        concurrently (more may be active), and one that gave up expects half as many (at least
        those that came), so a stalled client does not undo what was learned.
        While commits hold one caller each, a commit now and then waits (a window, longer while
        the loop is too busy to deliver calls, up to ``GROUP_COMMIT_MAX_WINDOWS``) to see whether
        a second caller comes, backing off exponentially (to one in
        ``GROUP_COMMIT_MAX_PROBE_GAP`` commits) while none does: callers whose calls gRPC
        delivers one at a time show no concurrency otherwise. So a lone submitter almost
        never waits, and 50 callers in a loop share a commit.
        PostgreSQL's ``commit_delay`` makes the same bargain, waiting only while
        ``commit_siblings`` other transactions are active.
        """
        await asyncio.sleep(0)
        window = self.group_commit_window_s
        if window <= 0:
            return
        target, probing = self._callers, False
        if self._waiting >= target and self._waiting <= 1:
            self._probe_in -= 1
            if self._probe_in > 0:
                return
            target, probing = 2, True  # does a second caller come?
        if self._waiting < target:
            await self._await_callers(target, window)
        if self._waiting >= target:  # all came
            if self._waiting > 1:  # concurrently: another may be active
                self._callers, self._probe_gap = self._waiting + 1, 1
            return
        if probing:  # none came: probe less often
            self._probe_gap = min(2 * self._probe_gap, GROUP_COMMIT_MAX_PROBE_GAP)
            self._probe_in = self._probe_gap
        else:  # gave up: expect fewer (halved, as TCP's congestion window), at least those that came
            self._callers = max(1, self._waiting, self._callers // 2)

    async def _await_callers(self, target: int, window: float) -> None:
        """Until ``target`` callers wait, none has joined for ``window``, or ``GROUP_COMMIT_MAX_WINDOWS``
        windows have passed."""
        loop = asyncio.get_running_loop()
        self._enough = enough = loop.create_future()
        self._want = target
        deadline = loop.time() + GROUP_COMMIT_MAX_WINDOWS * window

        def check(seen: int, due: float) -> None:  # a timer per window, not per caller
            if enough.done():
                return
            now = loop.time()
            # None joined in a window: give up, unless the loop was busy (this check ran late), since
            # the calls gRPC queued meanwhile are delivered only after it.
            if (self._waiting == seen and now - due < window / 2) or now >= deadline:
                enough.set_result(None)
            else:
                timers[0] = loop.call_at(now + window, check, self._waiting, now + window)

        timers = [loop.call_at(loop.time() + window, check, self._waiting, loop.time() + window)]
        try:
            await enough
        finally:
            timers[0].cancel()
            self._enough = None

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
        self._stop_on_agents(job_id, record.attempt)
        self.core.cancel(job_id, self.now())
        self._changed()
        return record

    def set_drained(self, node: str, drained: bool, reason: str = "") -> None:
        self._mark_drained(node, drained, reason)
        self._changed()

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
        self._update_schedulable(node)

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

    def arrival_time(self, requested: float | None) -> float:
        """The submit time of a job arriving now: the replay client's own in lockstep."""
        now = self.now()
        if self.lockstep and requested is not None and requested >= self._last_pass:
            return requested
        return now

    async def settle(self, t: float, timeout: float = LOCKSTEP_WAIT_S) -> None:
        """Lockstep replay: wait until every completion the model expects up to ``t`` is applied.

        Bounded-lag conservative synchronisation, as in parallel discrete-event
        simulation: completions are applied ``LOCKSTEP_LAG_WALL_S`` after their
        instant, and an arrival or a round at ``t`` first waits for every
        completion at or before ``t``. With emulated agents reporting the
        model's own finish instants, events are then handled in cluster-time
        order and replay makes the simulator's schedule. Off by default: real
        agents finish when they finish. A round pass due before ``t`` goes first
        too (the simulator's order; the scheduling task may wake late on a busy
        machine).
        """
        if not self.lockstep:
            return
        deadline = time.monotonic() + timeout
        while any(r.finish_time() <= t for r in self.core.running.values()) or self._next_round() < t:
            if time.monotonic() > deadline:
                log.warning("lockstep: completions or a round before the arrival did not come", cluster_time=t)
                return
            await asyncio.sleep(LOCKSTEP_POLL_S)

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
        self.arrival_horizon = t
        self.next_arrival = then
        self._horizon_moved.set()

    async def _await_arrivals_before(self, t: float) -> None:
        """Wait until every arrival at or before ``t`` is in (completions go first at equal times)."""
        while self.arrival_horizon < t:
            self._horizon_moved.clear()
            await self._horizon_moved.wait()

    def _event_at(self, t: float) -> None:
        self._latest_event = max(self._latest_event, t)

    async def wait_events(self, after_seq: int, timeout: float) -> None:
        """Wait until the log holds an event after ``after_seq`` (or ``timeout`` wall seconds).

        A negative ``after_seq`` waits as 0 does: the log's first event is #1, so "after -1"
        holds no more than "after 0", and returning at once would let a caller's loop spin."""
        async with self._events_changed:
            if len(self.core.log) > max(after_seq, 0):
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._events_changed.wait(), timeout)

    # --- agents ---------------------------------------------------------------

    def agent_register(self, register: apb.Register, who: Principal | None = None,
                       peer: str = "") -> tuple[AgentSession, apb.Registered]:
        """Accept an agent's stream, or refuse it naming why: not a node of this cluster
        (INVALID_ARGUMENT), a node its certificate is not for (PERMISSION_DENIED), or a node
        another agent holds a live stream for (ALREADY_EXISTS)."""
        self.check_writable()
        name = register.node.name
        if who is not None and who.node and name != who.node:
            log.warning("agent refused: registers as another node", certificate_node=who.node,
                        node=name[:MAX_REQUEST_ID], peer=peer)
            raise PermissionDenied(f"this agent's certificate is for node {who.node!r}; it may not speak for "
                                   f"node {name[:MAX_REQUEST_ID]!r}")
        if not self.cluster.has_node(name):
            raise ValidationError(f"no node {name[:MAX_REQUEST_ID]!r} in cluster {self.cluster.name!r}",
                                  field="register.node.name")
        check_register(register)
        node = self.cluster.node(name)
        if register.node.gpus and register.node.gpus != node.gpus:
            raise ValidationError(f"node {name} has {node.gpus} GPUs in the cluster file, the agent says "
                                  f"{register.node.gpus}", field="register.node.gpus")
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
            old.closed = True  # a reconnect of the same agent (or one after the old went silent) replaces it
        session = AgentSession(name, register.backend or "unknown", instance=register.instance[:lim.MAX_AGENT_INSTANCE],
                               peer=peer, left=register.leaving,  # leaving: no pass may place work here first
                               epoch=self.leader_epoch)
        self.sessions[name] = session
        self._absent_since.pop(name, None)
        self._left.discard(name)
        self._known.add(name)
        self._reconcile(session, register)
        kind = backend_kind(session.backend, emulated_takes_commands=self.emulated_takes_commands)
        self.core.set_node_backend(name, kind)  # which jobs the node takes (controlplane/backends.py)
        self._update_schedulable(name)
        self._registered_changed()
        params = self.clock.params()
        # Node-scoped: the agent's own node and the digest always; the file only to an agent that lacks it.
        toml = "" if register.cluster_digest == self.cluster_digest else self.cluster_toml
        registered = apb.Registered(
            node=name, node_spec=node_to_pb(node), cluster_digest=self.cluster_digest, cluster_toml=toml,
            heartbeat_interval_s=self.heartbeat_s, leader_epoch=self.leader_epoch,
            data_stalls=self.perf.data_stalls, catalog_toml=self.perf.catalog.profile_text,
            clock=apb.ClockParams(kind=apb.MANUAL if params.kind == "manual" else apb.ACCELERATED,
                                  wall_origin_unix_s=params.wall_origin_unix_s,
                                  cluster_origin_s=params.cluster_origin_s, speedup=params.speedup))
        log.info("agent registered", node=name, backend=session.backend, running=len(register.running),
                 cluster_sent=bool(toml))
        return session, registered

    def report_refused(self, session: AgentSession, error: HalyardError) -> None:
        """An agent's message was refused (out of range, too long): logged naming the field, and counted by it."""
        field = getattr(error, "field", None) or "unknown"
        key = refused_field(field)
        self.refused_reports[key] = self.refused_reports.get(key, 0) + 1
        log.warning("bad agent message", node=session.node, field=field, error=str(error)[:lim.MAX_AGENT_TEXT])

    @staticmethod
    def agent_registered(session: AgentSession) -> None:
        """The Registered reply is on the stream: the heartbeat timeout counts from now, so time a
        busy control plane took to register a cold-starting fleet is not charged to the agents."""
        session.last_seen = time.monotonic()

    def agent_message(self, session: AgentSession, msg: apb.AgentMessage) -> None:
        self.check_writable()
        now = time.monotonic()
        if not session.quiet_spell and now - session.last_seen >= SUSPECT_SHARE * self.heartbeat_timeout_s:
            session.quiet_spell = True
            self.quiet_streams += 1
        session.last_seen = now
        if session.silent:  # held by the guard, and heard from again: it takes work again
            session.silent = False
            self._update_schedulable(session.node)
            log.info("silent agent heard from again", node=session.node)
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
            record = self._check_owner(session, msg.progress.job_id, msg.progress.attempt)
            if record is not None and msg.progress.HasField("time_shift_drift_s"):
                record.time_shift_drift_s = msg.progress.time_shift_drift_s  # shown, never scheduled on
            if record is not None and self._reports_real_progress(session):
                recent = [s for s in msg.progress.recent_iteration_s if s > 0]
                record.report_progress(self.now(), msg.progress.iterations_done,
                                       sum(recent) / len(recent) if recent else None)
        elif kind == "profile_result":
            self.profiles.deliver(session.node, msg.profile_result)
        elif kind == "leaving":
            session.left = True
            self._update_schedulable(session.node)  # stopping: no new work between Leaving and the close
            log.info("agent leaving", node=session.node, reason=msg.leaving.reason[:lim.MAX_DRAIN_REASON])
        elif kind == "register":
            raise ValidationError("register is only allowed as the first message", field="register")

    @staticmethod
    def _reports_real_progress(session: AgentSession) -> bool:
        """Agents that run real processes: their reports, not the performance model, say how far a job is.

        An emulated agent runs the model itself, so its reports agree with the
        record already (and replay stays the simulator's schedule).
        """
        return session.backend != "emulated"

    def agent_gone(self, session: AgentSession) -> None:
        """The stream ended; the node gets the heartbeat timeout to come back.

        An agent that left (it sent ``Leaving``: a graceful shutdown, not a cut or a crash) is
        not silent: it stopped its jobs, so they are requeued at once (waiting for the timeout, or
        for the lost-agent guard, which may hold them, would leave them RUNNING on nothing), and its
        node leaves the guard's population, as a node whose agent never came, until an agent
        registers for it again."""
        left = session.left
        if self.sessions.get(session.node) is session:
            del self.sessions[session.node]
            self._absent_since[session.node] = session.last_seen
            self._update_schedulable(session.node)
            if left:
                requeued = False
                for job_id, nodes in list(self.placed.items()):
                    if session.node in nodes:
                        self._requeue(job_id, f"agent {session.node} left")
                        requeued = True
                self._left.add(session.node)
                self._forget_left()
                log.info("agent left", node=session.node)
                if requeued:
                    self._changed()
            else:
                log.warning("agent disconnected", node=session.node)

    def _forget_left(self) -> None:
        """Nodes whose agent left and that hold no jobs are not there (not silent)."""
        holding = {n for nodes in self.placed.values() for n in nodes}
        for node in self._left - holding:
            self._absent_since.pop(node, None)
            self._known.discard(node)
        self._left &= holding

    # --- internals ------------------------------------------------------------

    def _registered_changed(self) -> None:
        """A Register changed the cluster (a node up, jobs reconciled): commit and pass once for the burst of
        registrations within REGISTRATION_BATCH_S, not once each (lockstep replay: at once, as the simulator)."""
        if self.lockstep:
            self._changed()
        elif self._registrations_due is None:
            self._registrations_due = asyncio.get_running_loop().call_later(REGISTRATION_BATCH_S,
                                                                            self._registrations_settled)

    def _registrations_settled(self) -> None:
        self._registrations_due = None
        if self.failed is not None:
            return
        try:
            self._changed()
        except StoreError:
            return  # fatal: _persist has stopped the control plane

    def _changed(self) -> None:
        if self.lockstep:
            self._pass()  # the simulator's order: an instant's events, then its pass, then the next instant
        self._persist()
        self._unpaced.set()  # not a submission: its pass goes at once, even during a rest
        self._wake.set()

    def _persist(self) -> None:
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
        if self._uncommitted and self.on_commit is not None:
            self.on_commit(self._uncommitted)
        self._uncommitted = 0
        self._waiting = 0
        group, self._group = self._group, None
        if group is not None and not group.done():
            group.set_result(None)

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
        for session in self.sessions.values():
            session.closed = True
            while not session.outbox.empty():
                session.outbox.get_nowait()
        group, self._group = self._group, None
        if group is not None and not group.done():
            group.set_exception(StoreError(f"the job was not stored: {exc}"))
        self.fatal.set()

    async def _notify_events(self) -> None:
        async with self._events_changed:
            self._events_changed.notify_all()

    def _update_schedulable(self, node: str) -> None:
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
        if status == apb.EXIT_COMPLETED and self.lockstep:
            return  # lockstep: the model's own completion (already due) ends the job; agents follow it
        self._event_at(when)
        if status == apb.EXIT_COMPLETED:
            self.placed.pop(record.job_id, None)
            self.core.complete(record.job_id, when)
        elif status == apb.EXIT_FAILED:
            self._stop_on_agents(record.job_id, record.attempt, skip=session.node)
            self.core.fail(record.job_id, when, exited.message)
        else:  # preempted or lost on its own: back to the queue from the last checkpoint
            if self._reports_real_progress(session):
                record.report_progress(self.now(), exited.checkpoint_iteration)
            self._stop_on_agents(record.job_id, record.attempt, skip=session.node)
            self.core.requeue(record.job_id, self.now(), f"agent {session.node}: {enum_name(apb.ExitStatus, status)}")
        self._changed()

    async def _lockstep_completions(self) -> None:
        """Apply the model's completions in cluster-time order, each instant's group then its pass.

        In lockstep the emulated agents compute exactly this model, so the control
        plane completes jobs on the model's schedule (entries whose record epoch has
        moved on are stale, as in the simulator's heap) and does not depend on when
        an agent's report travels: a Reconfigure that reaches an agent late cannot
        change the schedule.
        """
        while True:
            if not self._due:
                self._due_added.clear()
                await self._due_added.wait()
                continue
            t = self._due[0][0]
            if not await self._turn_unless_earlier(t):
                continue  # a pass planned an earlier completion meanwhile: that one goes first
            completed = False
            while self._due and self._due[0][0] == t:
                _, _, job_id, epoch = heapq.heappop(self._due)
                record = self.core.records[job_id]
                if record.epoch == epoch and record.state is JobState.RUNNING:
                    self.placed.pop(job_id, None)
                    self.core.complete(job_id, t)
                    completed = True
            if completed:
                self._event_at(t)
                try:
                    self._changed()
                except StoreError:
                    return  # fatal: _persist has stopped the control plane

    async def _turn_of(self, t: float) -> None:
        """Wait until the completions at ``t`` are due: their instant has passed, every arrival before
        it is in, and a round due before it has run (the simulator's order)."""
        await self.clock.sleep_until(t)
        await asyncio.sleep(LOCKSTEP_LAG_WALL_S)  # arrivals stamped just before land first
        await self._await_arrivals_before(t)
        while self._next_round() < t:  # the scheduling task may wake late on a busy machine
            await asyncio.sleep(LOCKSTEP_POLL_S)

    async def _turn_unless_earlier(self, t: float) -> bool:
        """``_turn_of(t)``, or False as soon as a completion before ``t`` is planned. Waiting on for the
        old head would deadlock with an arrival between the two instants, which waits (``settle``) for
        the earlier completion while this loop waits for that arrival."""
        turn = asyncio.ensure_future(self._turn_of(t))
        added: asyncio.Future[object] | None = None
        try:
            while not turn.done():
                self._due_added.clear()
                added = asyncio.ensure_future(self._due_added.wait())
                await asyncio.wait({turn, added}, return_when=asyncio.FIRST_COMPLETED)
                added.cancel()
                if self._due[0][0] < t:
                    return False
            turn.result()  # re-raise what ended it
            return True
        finally:  # also when this loop is cancelled mid-wait: no task is left pending
            turn.cancel()
            if added is not None:
                added.cancel()

    def _reconcile(self, session: AgentSession, register: apb.Register) -> None:
        reported = {(r.job_id, r.attempt) for r in register.running}
        for job_id, attempt in reported:
            record = self.core.records.get(job_id)
            if (record is None or record.attempt != attempt or record.state is not JobState.RUNNING
                    or session.node not in self.placed.get(job_id, ())):
                log.warning("agent runs a job that is not its own; stopping it", node=session.node, job=job_id)
                session.send(preempt=apb.Preempt(job_id=job_id, attempt=attempt, grace_s=0.0))
        node = session.node
        for job_id in [j for j, nodes in self.placed.items() if node in nodes]:  # a list: requeues change placed
            if (job_id, self.core.records[job_id].attempt) not in reported:
                self._requeue(job_id, f"agent {node} no longer runs it")

    def _drain_unhealthy(self, node: str, detail: str) -> None:
        """An unhealthy heartbeat (ECC or Xid errors, NVML failing) drains the node with its reason and
        requeues its jobs from their checkpoints: a faulty node gets no more work until an operator
        undrains it."""
        reason = f"unhealthy: {detail or 'the agent reported unhealthy without a detail'}"
        log.warning("node drained: unhealthy heartbeat", node=node, detail=detail)
        self._mark_drained(node, True, reason)
        for job_id, nodes in list(self.placed.items()):
            if node in nodes:
                self._requeue(job_id, f"node {node} {reason}")
        self._changed()

    def _requeue(self, job_id: str, reason: str) -> None:
        record = self.core.records[job_id]
        if record.state is JobState.RUNNING:
            self._stop_on_agents(job_id, record.attempt)
            self.core.requeue(job_id, self.now(), reason)
            log.warning("job requeued", job=job_id, reason=reason)

    def _stop_on_agents(self, job_id: str, attempt: int, *, skip: str | None = None) -> None:
        for node in self.placed.pop(job_id, ()):
            if node != skip and node in self.sessions:
                self.sessions[node].send(preempt=apb.Preempt(job_id=job_id, attempt=attempt,
                                                             grace_s=DEFAULT_PREEMPT_GRACE_S))

    async def _scheduler(self) -> None:
        while True:
            deadline = self._next_round()
            if math.isfinite(deadline):
                sleeper = asyncio.create_task(self.clock.sleep_until(deadline))
                waker = asyncio.create_task(self._wake.wait())
                await asyncio.wait({sleeper, waker}, return_when=asyncio.FIRST_COMPLETED)
                round_due = sleeper.done()
                sleeper.cancel()
                waker.cancel()
                if round_due:
                    if self.lockstep:
                        # Arrivals first: one that comes before the round may start a job that ends
                        # before it too, and settle must see that job (the simulator handles both first).
                        await self._await_arrivals_before(math.nextafter(deadline, math.inf))
                    await self.settle(deadline)
                    self._event_at(deadline)  # the round boundary is the event
            else:
                round_due = False
                await self._wake.wait()
            self._wake.clear()
            if self.lockstep and not round_due:
                continue  # lockstep passes already ran with their events
            if self.failed is not None:
                return
            paced = not (round_due or self._unpaced.is_set())  # only the group commit asked for this pass
            self._unpaced.clear()
            try:
                seconds = self._run_pass()
            except StoreError:
                return  # fatal: _persist has stopped the control plane
            if paced:  # the loop takes in arrivals while the next pass waits; any other change ends the rest
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._unpaced.wait(), min(PASS_REST_RATIO * seconds, MAX_PASS_REST_S))

    def _run_pass(self) -> float:
        """One pass; its policy's wall seconds (0 if it had nothing to do or failed). A policy bug is
        logged and said on /healthz, not fatal (a store failure is)."""
        try:
            seconds = self._pass()
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

    def _next_round(self) -> float:
        policy = self.core.policy
        waiting = self.core.pending or (policy.acts_without_pending and self.core.running)
        if not (policy.needs_rounds and waiting):
            return math.inf
        # In lockstep the next round follows the last event's instant, as in the simulator, not the
        # clock, which may already be past a boundary when a pass ends late (a busy machine).
        now = max(self._latest_event, self._last_pass) if self.lockstep else self.now()
        return (math.floor(now / self.round_s) + 1) * self.round_s

    def _pass(self) -> float:
        """Run the policy if it has work, then re-rate every job whose iteration time changed; the
        policy pass's wall seconds as the core timed it (0 if the policy did not run)."""
        self._pass_owed = False
        policy = self.core.policy
        runs = bool(self.core.pending or policy.acts_without_pending)
        # Lockstep passes run at the newest event's instant, as the simulator's do.
        now = max(self._latest_event, self._last_pass) if self.lockstep else self.now()
        actions = self.core.schedule(now) if runs else []
        if runs:
            self.pass_error = None  # the latest pass succeeded (lockstep passes do not go through _run_pass)
        seconds = self.core.pass_seconds.last if runs else 0.0  # timed once, by the core
        if runs:
            self._last_pass = now
        # Jobs whose actions send their agents the new allocation (and with it the slowdown).
        told = {a.job_id for a in actions if isinstance(a, Start | Migrate | Resize | SetResources)}
        for record in self.pacer.update(actions, now):
            if self.lockstep and math.isfinite(finish := record.finish_time()):
                heapq.heappush(self._due, (finish, next(self._due_seq), record.job_id, record.epoch))
            if record.job_id not in told:  # a co-runner on its links came or went, or its time-shift moved
                self._reconfigure(record, now, emulated_only=True)
        if self.lockstep:
            self._due_added.set()
        for action in actions:
            self._dispatch(action, now)
        self._persist()
        if runs:
            self.profiles.ask_missed()  # profilings the pass waited for: asked now, answered -> next pass
        if runs and self.on_pass is not None:
            self.on_pass(seconds)
        return seconds

    def _dispatch(self, action: Action, now: float) -> None:
        if self.on_action is not None:
            self.on_action(action)
        record = self.core.records[action.job_id]
        if isinstance(action, Preempt):
            self._stop_on_agents(record.job_id, record.attempt)
        elif isinstance(action, Start):
            self._stop_on_agents(record.job_id, record.attempt)
            self._launch(record, now)
        elif isinstance(action, Migrate | Resize):
            self._relaunch(record, now)
        elif isinstance(action, SetTimeShift):
            for node in self.placed.get(record.job_id, ()):
                self._session(node).send(set_time_shift=apb.SetTimeShift(
                    job_id=record.job_id, attempt=record.attempt, seconds=action.seconds,
                    period_s=action.period_s, epoch_s=record.allocation.time_shift_epoch_s))
        elif isinstance(action, SetResources):
            self._reconfigure(record, now)

    @property
    def profiles_wanted(self) -> bool:
        """Whether the policy estimates jobs from agents' stage profilings (``profile_requests``,
        optional in policies.stages.Policy: Crius)."""
        return getattr(self.core.policy, "profile_requests", None) is not None

    async def prepare_profiles(self, spec: tpb.JobSpec) -> None:
        """Before a submission: fetch the stage profilings the policy will estimate the job with (Crius
        §6.1: a new job's Cells are profiled on each GPU type, in parallel), so its first pass -- in
        lockstep the simulator's pass -- finds them answered. A spec the submission will refuse is left
        for it to name what is wrong."""
        wanted = getattr(self.core.policy, "profile_requests", None)
        if wanted is None:
            return  # most policies: no spec parsed a second time on the submission path
        key = profiling_key(spec)
        if key in self._profiled:
            return
        try:
            requests = wanted(spec_from_pb(spec, submit_time=0.0), self.core.facts)
        except (HalyardError, ValueError, KeyError):  # e.g. an unknown model: the submission names it
            return
        if requests:
            await self.profiles.fetch(requests)
        if all(self.profiles.answered(r) for r in requests):
            self._profiled.add(key)

    def profiles_answered(self) -> None:
        """Profilings a pass missed are in: run another pass (in lockstep with the last event's instant)."""
        if self.lockstep:
            self._changed()
        else:
            self._wake.set()

    def _reconfigure(self, record: JobRecord, now: float, *, emulated_only: bool = False) -> None:
        """Tell the job's agents its allocation and link slowdown as of now (real agents
        skip a slowdown-only change with ``emulated_only``: their network is real)."""
        allocation = allocation_to_pb(record.allocation)
        for i, node in enumerate(self.placed.get(record.job_id, ())):
            session = self.sessions.get(node)
            if session is None or (emulated_only and self._reports_real_progress(session)):
                continue  # an agent that is away learns its jobs' state when it registers again
            session.send(reconfigure=apb.Reconfigure(
                job_id=record.job_id, attempt=record.attempt, allocation=allocation, leader=i == 0,
                restore_s=max(0.0, record.resume_at - now), iterations_done=record.iterations_done(now),
                start_time=now, link_slowdown=self.pacer.slowdown(record.job_id)))

    def _launch(self, record: JobRecord, now: float) -> None:
        record.attempt += 1
        nodes = record.allocation.node_names
        self.placed[record.job_id] = nodes
        spec, allocation = spec_to_pb(record.spec), allocation_to_pb(record.allocation)
        for i, node in enumerate(nodes):
            self._session(node).send(launch=apb.Launch(
                job_id=record.job_id, attempt=record.attempt, spec=spec, allocation=allocation, leader=i == 0,
                iterations_total=record.iterations_total, iterations_done=record.iterations_done(now),
                restore_s=max(0.0, record.resume_at - now), start_time=now,
                link_slowdown=self.pacer.slowdown(record.job_id)))

    def _relaunch(self, record: JobRecord, now: float) -> None:
        """A migration or resize on agents (EasyScale §3.2, "Adapting to elasticity"): the job
        checkpoints on demand and restarts on its new allocation as its next attempt. Nodes it
        keeps get a Reconfigure naming that attempt (their agent stops the old processes with a
        checkpoint, then starts the new ones from it); nodes it leaves get a Preempt, nodes it
        joins a Launch."""
        old_attempt, old_nodes = record.attempt, self.placed.get(record.job_id, ())
        record.attempt += 1
        nodes = record.allocation.node_names
        self.placed[record.job_id] = nodes
        for node in old_nodes:
            if node not in nodes and node in self.sessions:
                self.sessions[node].send(preempt=apb.Preempt(job_id=record.job_id, attempt=old_attempt,
                                                             grace_s=DEFAULT_PREEMPT_GRACE_S))
        spec, allocation = spec_to_pb(record.spec), allocation_to_pb(record.allocation)
        restore_s, done = max(0.0, record.resume_at - now), record.iterations_done(now)
        slowdown = self.pacer.slowdown(record.job_id)
        for i, node in enumerate(nodes):
            if node in old_nodes:
                if node not in self.sessions:
                    continue  # away: when it registers again it reports the old attempt, which is requeued
                self.sessions[node].send(reconfigure=apb.Reconfigure(
                    job_id=record.job_id, attempt=old_attempt, allocation=allocation, leader=i == 0,
                    restore_s=restore_s, iterations_done=done, start_time=now, link_slowdown=slowdown,
                    restart_attempt=record.attempt, iterations_total=record.iterations_total,
                    grace_s=DEFAULT_PREEMPT_GRACE_S))
            else:
                self._session(node).send(launch=apb.Launch(
                    job_id=record.job_id, attempt=record.attempt, spec=spec, allocation=allocation,
                    leader=i == 0, iterations_total=record.iterations_total, iterations_done=done,
                    restore_s=restore_s, start_time=now, link_slowdown=slowdown))

    def _session(self, node: str) -> AgentSession:
        # The ledger only offers nodes with a connected agent, so a placement always has one.
        return self.sessions[node]

    def silent_sessions(self, wall: float) -> list[AgentSession]:
        """Sessions not heard from for more than the timeout at monotonic time ``wall``
        (since their registration reached the stream, or their latest message, or the
        latest starved liveness check, whichever is last)."""
        return self._quiet_for(wall, self.heartbeat_timeout_s)

    def _quiet_for(self, wall: float, seconds: float) -> list[AgentSession]:
        since = self._judged_from
        return [s for s in self.sessions.values() if wall - max(s.last_seen, since) > seconds]

    async def _liveness(self) -> None:
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
                return  # fatal: _persist has stopped the control plane

    def _declare_lost(self, wall: float) -> None:
        """Close silent sessions and requeue the jobs of nodes silent past the timeout, as far as the
        lost-agent guard admits (all of them unless many are silent at once: :mod:`disruption`)."""
        timeout, since = self.heartbeat_timeout_s, self._judged_from
        suspect_s = SUSPECT_SHARE * timeout
        quiet = [(s.last_seen, s.node) for s in self._quiet_for(wall, suspect_s)]
        away = [(t, n) for n, t in self._absent_since.items() if n in self._known and wall - max(t, since) > suspect_s]
        silent = [(t, n) for t, n in quiet if wall - max(t, since) > timeout]
        absent = [(t, n) for t, n in away if wall - max(t, since) > timeout]
        with_jobs = {n for nodes in self.placed.values() for n in nodes} if absent else set()
        # What declaring a node lost changes: its open session, or the jobs placed on it.
        candidates = sorted(silent + [(t, n) for t, n in absent if n in with_jobs])
        before = self.guard.state
        # The cluster's state is judged on agents quiet for part of the timeout, so agents that go silent
        # together are seen together, before the first of them reaches the timeout and is declared lost.
        # A drained node is out of service by an operator's choice: its silence says nothing of this side.
        counted = sum(1 for _, n in quiet + away if n not in self.drained)
        admitted = set(self.guard.admit([n for _, n in candidates], counted, len(self._known - self.drained), wall))
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
        for _, node in silent:
            session = self.sessions[node]
            if node in admitted:
                log.warning("agent missed its heartbeats", node=node)
                session.closed = True
                self.agent_gone(session)
            elif not session.silent:
                session.silent = True  # held: no new work until it is heard from
                self._update_schedulable(node)
        lost = {n for _, n in candidates if n in admitted}
        requeued = False
        for job_id, nodes in list(self.placed.items()):
            if lost.intersection(nodes):
                self._requeue(job_id, f"lost agent on {', '.join(sorted(lost.intersection(nodes)))}")
                requeued = True
        if self._left:
            self._forget_left()
        if requeued:
            self._changed()


def profiling_key(spec: tpb.JobSpec) -> tuple[object, ...]:
    """What a job's profilings depend on, read off the message: a job like one already profiled costs
    no parse (in lockstep replay every wall millisecond is many cluster seconds)."""
    return (spec.model, spec.batch_size, spec.num_gpus, spec.min_gpus, spec.max_gpus, spec.gpu_type,
            spec.parallelism.SerializeToString(deterministic=True) if spec.HasField("parallelism") else b"")
