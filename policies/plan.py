"""A plan: the actions a scheduling pass asks the core to carry out.

The core applies a plan atomically: it validates every action against the
current state and either applies all of them, in order, or none (and says
which action is wrong and why).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from halyard.datamodel import Allocation
from halyard.policies.reasons import Unplaced


@dataclass(frozen=True, slots=True)
class Start:
    job_id: str
    allocation: Allocation


@dataclass(frozen=True, slots=True)
class Preempt:
    """Stop a running job (it checkpoints and goes back to the queue). ``suspend``: a suspension,
    not a preemption -- an opportunistic job stopped for the job it ran beside (Crius §6.1);
    the core logs it as SUSPENDED and counts it apart, the transition is the same."""

    job_id: str
    suspend: bool = False


@dataclass(frozen=True, slots=True)
class Migrate:
    """Move a running job to another allocation with the same GPU count."""

    job_id: str
    allocation: Allocation


@dataclass(frozen=True, slots=True)
class Resize:
    """Give an elastic job a new allocation with another GPU count."""

    job_id: str
    allocation: Allocation


@dataclass(frozen=True, slots=True)
class SetTimeShift:
    """Start the job's iterations at ``epoch + seconds + k x period_s`` (Cassini Eq. 4.5); the core
    takes the pass time as the epoch. ``period_s`` 0: the job's own iteration time. 0 s is a shift."""

    job_id: str
    seconds: float
    period_s: float = 0.0


@dataclass(frozen=True, slots=True)
class SetResources:
    """Change the CPU cores and memory a running job holds on one node."""

    job_id: str
    node: str
    cpus: int
    memory_mb: int


@dataclass(frozen=True, slots=True)
class Drop:
    """End a pending job the policy will never run: deadline-aware policies drop a job that cannot
    meet its deadline (Crius §8.5 "early drops", ElasticFlow's admission control). CANCELLED,
    with ``reason`` in the event."""

    job_id: str
    reason: str


Action = Start | Preempt | Migrate | Resize | SetTimeShift | SetResources | Drop


@dataclass(slots=True)
class Plan:
    """Actions in order, and why the jobs the pass looked at and did not start wait.

    ``unplaced`` keeps each job's latest reason in this pass; ``otherwise`` is the
    reason for every pending job the pass did not look at (a pass over a long queue
    stops once nothing more can fit), so reasons cost nothing per unvisited job.
    """

    actions: list[Action] = field(default_factory=list)
    unplaced: dict[str, Unplaced] = field(default_factory=dict)
    otherwise: Unplaced | None = None

    def wait(self, job_id: str, why: Unplaced) -> None:
        self.unplaced[job_id] = why

    def start(self, job_id: str, allocation: Allocation) -> None:
        self.actions.append(Start(job_id, allocation))

    def preempt(self, job_id: str) -> None:
        self.actions.append(Preempt(job_id))

    def suspend(self, job_id: str) -> None:
        """Stop an opportunistic job for the job it ran beside (:class:`Preempt` with ``suspend``)."""
        self.actions.append(Preempt(job_id, suspend=True))

    def migrate(self, job_id: str, allocation: Allocation) -> None:
        self.actions.append(Migrate(job_id, allocation))

    def resize(self, job_id: str, allocation: Allocation) -> None:
        self.actions.append(Resize(job_id, allocation))

    def set_time_shift(self, job_id: str, seconds: float, period_s: float = 0.0) -> None:
        self.actions.append(SetTimeShift(job_id, seconds, period_s))

    def set_resources(self, job_id: str, node: str, cpus: int, memory_mb: int) -> None:
        self.actions.append(SetResources(job_id, node, cpus, memory_mb))

    def drop(self, job_id: str, reason: str) -> None:
        self.actions.append(Drop(job_id, reason))

    def __len__(self) -> int:
        return len(self.actions)

    def __bool__(self) -> bool:
        return bool(self.actions)
