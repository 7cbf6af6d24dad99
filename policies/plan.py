"""A plan: the actions a scheduling pass asks the core to carry out.

The core applies a plan atomically: it validates every action against the
current state and either applies all of them, in order, or none (and says
which action is wrong and why).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

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

    A plan may also say its reasons as a change set (:meth:`changes_from`): ``since`` is the core's
    reasons from the last pass (``view.reasons``), ``unplaced`` only what differs from them, and every
    job of ``since`` that ``unplaced`` does not name keeps its reason (the pass looked at it and found
    the same). A loaded queue's reasons mostly stay as they were: Dally's thousand waiting jobs per
    pass of 20,000 Philly jobs compressed 8x change about one in six (policies/dally_pass.py). A policy
    that sets every reason on every pass leaves ``since`` None and nothing changes for it.

    A plan is also a snapshot a stage can ask questions of (Kubernetes' ``NodeInfo`` after
    ``Assume``: the cluster as if the pending bindings had happened): the actions are indexed by
    job as they are added, and :meth:`starts`, :meth:`stops`, :meth:`moves`, :meth:`placements_after`
    and :meth:`allocations_after` answer what the cluster looks like once the plan is applied, so
    no stage scans the action list by type. Add actions through the methods (or :meth:`replace`),
    never by writing ``actions`` directly: the index follows them.
    """

    actions: list[Action] = field(default_factory=list)
    unplaced: dict[str, Unplaced] = field(default_factory=dict)
    otherwise: Unplaced | None = None
    since: Mapping[str, Unplaced] | None = None  # unplaced is a change set over these (changes_from)
    # The policy's promise for the state this plan leaves once applied as it is: its next pass there, with no
    # event logged and no node's schedulable flag changed in between, would plan nothing and tell every
    # waiting job the reason this pass told, so the core skips it as the repeat of an empty pass
    # (Policy.quiet_until; Synergy TUNE's settled re-pack, policies/synergy_lean.py).
    settles: bool = field(default=False, compare=False)
    # job id -> positions of its actions in ``actions``, in order (the index the queries read).
    _by_job: dict[str, list[int]] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        for i, action in enumerate(self.actions):
            self._by_job.setdefault(action.job_id, []).append(i)

    def _add(self, action: Action) -> None:
        positions = self._by_job.get(action.job_id)
        if positions is None:
            self._by_job[action.job_id] = [len(self.actions)]
        else:
            positions.append(len(self.actions))
        self.actions.append(action)

    def wait(self, job_id: str, why: Unplaced) -> None:
        since = self.since
        if since is not None and since.get(job_id) == why:  # a change set: the core keeps it as it is
            self.unplaced.pop(job_id, None)
            return
        self.unplaced[job_id] = why

    def changes_from(self, told: Mapping[str, Unplaced]) -> None:
        """Say this plan's reasons as changes over ``told`` (the view's ``reasons``: what the core holds
        from the last pass). The policy promises to look at every job of ``told`` that is still
        waiting: whatever :meth:`wait` is not given anew stays as ``told`` says. Call before any
        :meth:`wait`."""
        self.since = told

    def reasons(self) -> dict[str, Unplaced]:
        """Every reason this plan stands for: ``unplaced``, over ``since`` when it is a change set."""
        return dict(self.unplaced) if self.since is None else {**self.since, **self.unplaced}

    def start(self, job_id: str, allocation: Allocation) -> None:
        self._add(Start(job_id, allocation))

    def preempt(self, job_id: str) -> None:
        self._add(Preempt(job_id))

    def suspend(self, job_id: str) -> None:
        """Stop an opportunistic job for the job it ran beside (:class:`Preempt` with ``suspend``)."""
        self._add(Preempt(job_id, suspend=True))

    def migrate(self, job_id: str, allocation: Allocation) -> None:
        self._add(Migrate(job_id, allocation))

    def resize(self, job_id: str, allocation: Allocation) -> None:
        self._add(Resize(job_id, allocation))

    def set_time_shift(self, job_id: str, seconds: float, period_s: float = 0.0) -> None:
        self._add(SetTimeShift(job_id, seconds, period_s))

    def set_resources(self, job_id: str, node: str, cpus: int, memory_mb: int) -> None:
        self._add(SetResources(job_id, node, cpus, memory_mb))

    def drop(self, job_id: str, reason: str) -> None:
        self._add(Drop(job_id, reason))

    def replace(self, index: int, action: Action) -> None:
        """Put ``action`` in place of the ``index``-th action, which must be about the same job (a stage
        that revises its own earlier decision in the same pass, e.g. a second scale-in of one job)."""
        old = self.actions[index]
        if old.job_id != action.job_id:
            raise ValueError(f"action #{index} is about job {old.job_id}, not {action.job_id}")
        self.actions[index] = action

    # --- queries: the plan as an index by job ------------------------------------------

    def touches(self, job_id: str) -> bool:
        """Whether any action is about ``job_id``."""
        return job_id in self._by_job

    def touched(self) -> set[str]:
        """The jobs some action is about."""
        return set(self._by_job)

    def actions_of(self, job_id: str) -> list[Action]:
        """``job_id``'s actions, in plan order (empty if none)."""
        return [self.actions[i] for i in self._by_job.get(job_id, ())]

    def _of_type(self, kind: type | tuple[type, ...]) -> list[Action]:
        return [a for a in self.actions if isinstance(a, kind)]

    def starts(self) -> dict[str, Allocation]:
        """Jobs the plan starts, in plan order, and the allocation each starts on (its last start)."""
        return {a.job_id: a.allocation for a in self._of_type(Start)}  # type: ignore[union-attr]

    def stops(self) -> set[str]:
        """Jobs the plan stops (preempts or suspends), whether or not a later action starts them again."""
        return {a.job_id for a in self._of_type(Preempt)}

    def stopped(self, job_id: str) -> bool:
        """Whether the plan stops ``job_id`` (one job's :meth:`stops`, read from the index: for a loop that
        asks job by job)."""
        return any(isinstance(self.actions[i], Preempt) for i in self._by_job.get(job_id, ()))

    def moves(self) -> dict[str, Allocation]:
        """Running jobs the plan migrates or resizes, and the allocation of each one's last move."""
        return {a.job_id: a.allocation for a in self._of_type((Migrate, Resize))}  # type: ignore[union-attr]

    def resized(self) -> set[str]:
        """Jobs the plan resizes (elastic jobs given another GPU count)."""
        return {a.job_id for a in self._of_type(Resize)}

    def replaced(self) -> set[str]:
        """Jobs whose GPUs the plan changes: started, stopped, migrated or resized."""
        return {a.job_id for a in self._of_type((Start, Preempt, Migrate, Resize))}

    def placements_after(self, held: Mapping[str, Allocation | None]) -> dict[str, Allocation]:
        """Where each job's GPUs are once the plan is applied, given the allocations jobs hold now
        (``held``, e.g. ``{j: job.allocation for j, job in view.running.items()}``): a stop removes
        the job, a start, migration or resize puts it on the action's allocation (a job the plan
        starts anew comes after the ones that keep running, as the actions go). CPU/memory changes
        and time-shifts, which move no GPU, are not applied (:meth:`allocations_after` applies them)."""
        after = {job_id: alloc for job_id, alloc in held.items() if alloc is not None}
        for action in self.actions:
            if isinstance(action, Preempt):
                after.pop(action.job_id, None)
            elif isinstance(action, Start | Migrate | Resize):
                after[action.job_id] = action.allocation
        return after

    def allocations_after(self, held: Mapping[str, Allocation | None], now: float) -> dict[str, Allocation]:
        """:meth:`placements_after` with every action applied as the core applies it: CPU/memory
        changes on their node and time-shifts on a grid from ``now`` (the pass time)."""
        after = {job_id: alloc for job_id, alloc in held.items() if alloc is not None}
        for action in self.actions:
            if isinstance(action, Preempt | Drop):
                after.pop(action.job_id, None)
            elif isinstance(action, Start | Migrate | Resize):
                after[action.job_id] = action.allocation
            elif action.job_id not in after:
                continue  # the core refuses it (the job does not run); nothing to show
            elif isinstance(action, SetTimeShift):
                after[action.job_id] = after[action.job_id].with_time_shift(action.seconds, action.period_s, now)
            else:
                current = after[action.job_id]
                after[action.job_id] = replace(current, nodes=tuple(
                    replace(p, cpus=action.cpus, memory_mb=action.memory_mb) if p.node == action.node else p
                    for p in current.nodes))
        return after

    def __len__(self) -> int:
        return len(self.actions)

    def __bool__(self) -> bool:
        return bool(self.actions)
