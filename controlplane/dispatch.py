"""Dispatch: a pass's applied actions become commands on the agents' streams.

Why a module of its own: the core decides in the shared vocabulary (Start, Preempt, Migrate,
Resize, SetTimeShift, SetResources) and the simulator applies those actions to its own agent
pool; only the gRPC control plane has to say them to agents, attempt by attempt, node by node.
:class:`Dispatcher` holds the one piece of state this needs, which nodes' agents hold each
running job (``placed``), and the rules for telling them: a start launches the next attempt, a
migration or resize restarts the job on its new allocation (EasyScale §3.2), a stop preempts it
with a grace period to checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping

from halyard.controlplane.agent_sessions import AgentSession
from halyard.datamodel import Allocation, HalyardError
from halyard.policies import Action, Migrate, Preempt, Resize, SetResources, SetTimeShift, Start
from halyard.scheduling.records import JobRecord
from halyard.scheduling.timing import Pacer
from halyard.v1 import agent_service_pb2 as apb
from halyard.wire import allocation_to_pb, spec_to_pb

DEFAULT_PREEMPT_GRACE_S = 30.0  # wall seconds an agent has to checkpoint on Preempt

# Actions that send their job's agents its new allocation (and with it the link slowdown).
TELLS_ALLOCATION = Start | Migrate | Resize | SetResources


class NotPlaced(HalyardError):
    """A job the core says runs holds no allocation: a bug in the scheduling core, never a peer's input."""


def allocation_of(record: JobRecord) -> Allocation:
    """The allocation of a job that runs (or was just started, migrated, resized) on agents."""
    if record.allocation is None:
        raise NotPlaced(f"job {record.job_id!r} is {record.state.value} but holds no allocation")
    return record.allocation


class Dispatcher:
    """Which nodes' agents hold each running job, and the commands that change it."""

    def __init__(self, sessions: Mapping[str, AgentSession], pacer: Pacer) -> None:
        self.sessions = sessions  # the connected agents, by node (AgentSessions': read, never changed here)
        self.pacer = pacer
        self.placed: dict[str, tuple[str, ...]] = {}  # running job -> nodes whose agents hold it

    def dispatch(self, action: Action, record: JobRecord, now: float) -> None:
        """Send ``record``'s agents what ``action`` (applied at ``now``) asks of them."""
        if isinstance(action, Preempt):
            self.stop(record.job_id, record.attempt)
        elif isinstance(action, Start):
            self.stop(record.job_id, record.attempt)
            self._launch(record, now)
        elif isinstance(action, Migrate | Resize):
            self._relaunch(record, now)
        elif isinstance(action, SetTimeShift):
            for node in self.placed.get(record.job_id, ()):
                self._session(node).send(set_time_shift=apb.SetTimeShift(
                    job_id=record.job_id, attempt=record.attempt, seconds=action.seconds,
                    period_s=action.period_s, epoch_s=allocation_of(record).time_shift_epoch_s))
        elif isinstance(action, SetResources):
            self.reconfigure(record, now)

    def stop(self, job_id: str, attempt: int, *, skip: str | None = None) -> None:
        """Forget where the job runs and tell its agents (but ``skip``'s) to stop ``attempt``."""
        for node in self.placed.pop(job_id, ()):
            if node != skip and node in self.sessions:
                self.sessions[node].send(preempt=apb.Preempt(job_id=job_id, attempt=attempt,
                                                             grace_s=DEFAULT_PREEMPT_GRACE_S))

    def reconfigure(self, record: JobRecord, now: float, *, emulated_only: bool = False) -> None:
        """Tell the job's agents its allocation and link slowdown as of now (real agents
        skip a slowdown-only change with ``emulated_only``: their network is real)."""
        allocation = allocation_to_pb(allocation_of(record))
        for i, node in enumerate(self.placed.get(record.job_id, ())):
            session = self.sessions.get(node)
            if session is None or (emulated_only and session.reports_real_progress):
                continue  # an agent that is away learns its jobs' state when it registers again
            session.send(reconfigure=apb.Reconfigure(
                job_id=record.job_id, attempt=record.attempt, allocation=allocation, leader=i == 0,
                restore_s=max(0.0, record.resume_at - now), iterations_done=record.iterations_done(now),
                start_time=now, link_slowdown=self.pacer.slowdown(record.job_id)))

    def _launch(self, record: JobRecord, now: float) -> None:
        record.attempt += 1
        nodes = allocation_of(record).node_names
        self.placed[record.job_id] = nodes
        spec, allocation = spec_to_pb(record.spec), allocation_to_pb(allocation_of(record))
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
        nodes = allocation_of(record).node_names
        self.placed[record.job_id] = nodes
        for node in old_nodes:
            if node not in nodes and node in self.sessions:
                self.sessions[node].send(preempt=apb.Preempt(job_id=record.job_id, attempt=old_attempt,
                                                             grace_s=DEFAULT_PREEMPT_GRACE_S))
        spec, allocation = spec_to_pb(record.spec), allocation_to_pb(allocation_of(record))
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
