"""The replaceable stages of a policy (DESIGN.md, "The policy contract").

A configuration names one implementation per stage; :class:`StagedPolicy` in
:mod:`halyard.policies.staged` runs them in order. Every member a driver or the
staged pass reads is declared here (Kubernetes checks its plugins against their
interfaces at compile time; ``tests/test_policy_contract.py`` checks every
registered policy and stage against these protocols). Concrete stages subclass
their protocol, so they inherit the no-op hooks they do not need.

Stages keep no state between passes except what they learn, and they learn only
from plans the core applied: the core calls :meth:`Stage.on_applied` after
``apply`` and :meth:`Stage.on_rejected` after a plan it refused (Kubernetes'
Reserve / Unreserve), with the same :class:`~halyard.policies.passstate.PassState`
the pass used.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar, Literal, NamedTuple, Protocol, runtime_checkable

import numpy as np

from halyard.datamodel import Allocation
from halyard.policies.passstate import PassState
from halyard.policies.plan import Plan
from halyard.policies.reasons import Unplaced
from halyard.policies.resources import FreeResources
from halyard.policies.view import ClusterView, JobInfo

# How many placements a placement offers a scoring stage when it does not say (ours: Cassini asks for
# its own K, its paper's 10; the other scorers take what the placement offers).
DEFAULT_CANDIDATES = 8


class Ranking(NamedTuple):
    """Running and admitted pending jobs in priority order, with the GPUs each running job holds as an
    array: what the staged pass's runnable walk reads (:meth:`Ordering.ranking`). From the array the
    walk finds the running jobs at the head of the order that fit at once and steps through the rest
    (on 20,000 Philly jobs compressed 8x a LAS pass ranks ~1,400 jobs, most in that head)."""

    jobs: Sequence[JobInfo]  # the jobs: best first if ``order`` is None, else in any order
    order: np.ndarray | None  # positions in ``jobs``, best first (int64); None: ``jobs`` is in that order
    held: np.ndarray  # per position in ``jobs``: the GPUs a running job holds (>= 1), 0 for a waiting one

    def ranked(self) -> list[JobInfo]:
        """The jobs best first (:meth:`Ordering.ranked`'s answer)."""
        return list(self.ranked_from(0))

    def ranked_from(self, start: int) -> Sequence[JobInfo]:
        """The jobs best first, from the ``start``-th on."""
        jobs, order = self.jobs, self.order
        return jobs[start:] if order is None else [jobs[i] for i in order[start:].tolist()]

    def held_ranked(self) -> np.ndarray:
        """:attr:`held`, best first."""
        return self.held if self.order is None else self.held[self.order]


def held_gpus(jobs: Sequence[JobInfo]) -> np.ndarray:
    """:attr:`Ranking.held` of ``jobs``, read job by job."""
    return np.fromiter((0 if job.allocation is None else job.num_gpus for job in jobs), np.int64, len(jobs))


@runtime_checkable
class Stage(Protocol):
    """What every stage has: a name (reported by GetPolicy) and the two learning hooks."""

    name: str
    # JobSpec fields beyond the basics the stage acts on ("priority", "deadline"): a job that sets
    # one no stage of its policy honours is told so at submission instead of being ignored silently.
    honours: ClassVar[frozenset[str]] = frozenset()
    # Optional, outside the protocol: ``relies_on``, what the stage's own behaviour needs of the jobs or
    # the cluster (policies/reliance.py's keys: "logical_workers", "elastic", "deadline", "priority",
    # "quotas"); a run in which none has it is warned that the stage does nothing (without
    # it, easyscale-heter on a trace without ESTs was FIFO, silently).
    # True if the stage decides from the jobs' specs, states and allocations and the free resources
    # alone: what the core's event log and the nodes' schedulable flags record, never the clock, job
    # progress or rates. A staged policy whose other stages all say so may let the core skip passes
    # that cannot change anything (:meth:`Policy.quiet_until`). Opt-in: False unless a stage says so.
    time_invariant: ClassVar[bool] = False

    def on_applied(self, view: ClusterView, plan: Plan, state: PassState) -> None:
        """The core applied ``plan``: commit what the pass decided tentatively."""
        return None

    def on_rejected(self, view: ClusterView, plan: Plan, state: PassState) -> None:
        """The core refused ``plan``: forget what the pass decided tentatively."""
        return None


@runtime_checkable
class Policy(Protocol):
    """What the core runs each pass. :class:`StagedPolicy` is the usual one.

    ``needs_rounds``: priorities drift with time alone, so the round timer must run
    passes. ``acts_without_pending``: a pass can act when no job waits (a migration or
    time-shift stage). ``resource_sensitive``: CPU cores and memory per GPU change
    iteration times, so drivers run the performance model with data stalls on.
    Subclass it (as the tests' scripted policies do) to inherit these defaults.

    Optional, outside the protocol: ``wake_at``, None or a function of a view giving the instant after
    ``view.now`` at which the policy wants a pass though no event comes (``SchedulingCore.wake_at``; both
    drivers run it as a round). Only Dally's ``+auction-on-release`` sets it (policies/dally_release.py).

    What a policy can do beyond a pass is declared as a capability (:mod:`halyard.policies.capabilities`:
    ``Adjustable``, ``HasOrdering``, ``NeedsProfiles``, ...), checked where it is needed. Optional,
    outside the protocol: ``relies_on``, as a stage's (:class:`Stage`; :class:`StagedPolicy` unites its stages').
    """

    name: str

    @property
    def needs_rounds(self) -> bool:
        return False

    @property
    def acts_without_pending(self) -> bool:
        return False

    @property
    def resource_sensitive(self) -> bool:
        return False

    @property
    def honours(self) -> frozenset[str]:
        """JobSpec fields beyond the basics this policy acts on ("priority", "deadline")."""
        return frozenset()

    def stages(self) -> list[tuple[str, str]]:
        """(stage kind, choice) pairs, in pass order: what GetPolicy and ``halyard policies`` show."""
        return [("policy", self.name)]

    def schedule(self, view: ClusterView, state: PassState) -> Plan: ...

    def quiet_until(self, view: ClusterView) -> float:
        """Called after a pass at ``view`` that planned nothing: the time before which another pass,
        with no event logged and no node's schedulable flag changed in between, would again plan
        nothing and give every waiting job the same reason, so the core may skip it. ``-inf`` (this
        default): never skip. A policy whose passes at round boundaries differ from those between them
        (a round-based placement, Synergy §3) says so with the optional attribute ``round_gated``
        (outside the protocol; False if absent): its answer then vouches only for passes of the same
        kind, at a round boundary or not, as the quiet one."""
        return -math.inf

    def on_applied(self, view: ClusterView, plan: Plan, state: PassState) -> None:
        return None

    def on_rejected(self, view: ClusterView, plan: Plan, state: PassState) -> None:
        return None


@runtime_checkable
class Admission(Stage, Protocol):
    """Which pending jobs may be considered this pass; a refused job gets a reason in ``plan``."""

    def admit(self, view: ClusterView, jobs: Sequence[JobInfo], plan: Plan, state: PassState) -> Iterable[JobInfo]:
        ...


@runtime_checkable
class Ordering(Stage, Protocol):
    """Priority among jobs: lower key first.

    ``preemptive`` orderings rank running and pending jobs together and preempt
    running jobs that fall out of the top set. ``needs_rounds`` says whether
    priorities change with time alone (so the round timer must run passes); FIFO and
    SRTF only change on events, LAS changes as service accrues. ``arrival_order``
    says the order is exactly arrival order, which the view's pending list already
    has, so a pass need not sort.
    """

    preemptive: bool
    needs_rounds: bool
    arrival_order: bool
    # True if key() records what it sees in the pass state for on_applied (Tiresias' queues):
    # then every running job must be keyed every pass, even when nothing can be preempted.
    remembers: bool = False

    def key(self, view: ClusterView, state: PassState) -> Callable[[JobInfo], Any]: ...

    def ranked(self, view: ClusterView, state: PassState, pending: Sequence[JobInfo]) -> list[JobInfo]:
        """The running jobs and ``pending`` (the admitted ones, in arrival order) sorted by :meth:`key`.
        An ordering may answer from work kept between passes, but must answer exactly this."""
        return sorted([*view.running.values(), *pending], key=self.key(view, state))

    def ranking(self, view: ClusterView, state: PassState, pending: Sequence[JobInfo]) -> Ranking:
        """:meth:`ranked` as a :class:`Ranking`, which the staged pass reads. This default ranks by
        :meth:`ranked` and reads each job's GPUs; an ordering that keeps its order between passes
        answers from what it keeps, but must answer exactly this."""
        jobs = self.ranked(view, state, pending)
        return Ranking(jobs, None, held_gpus(jobs))

    def tail_key(self, view: ClusterView, state: PassState) -> Callable[[JobInfo], Any] | None:
        """A key the pass's ranking is sorted by (for the jobs of the pass, at ``view``) under which a
        waiting job's key never grows from pass to pass while it waits with no event (FIFO's arrival, SRTF's
        remaining time): then a walk may leave alone the waiting jobs past where its GPU budget ran out that
        were past it at the last walk too (``StagedPolicy._walk_tail``). None (this default): no such key."""
        return None

    def same_until(self, view: ClusterView) -> float:
        """The time before which every job's key keeps its order with the clock alone moving (no job
        started, stopped, arrived or ended), for :meth:`Policy.quiet_until`. ``-inf`` (this
        default): unknown, so no pass is skipped."""
        return -math.inf


@runtime_checkable
class Sizing(Stage, Protocol):
    """How many GPUs a job gets if it is started now."""

    def gpus(self, view: ClusterView, job: JobInfo) -> int: ...


@runtime_checkable
class Placement(Stage, Protocol):
    """Where one job's GPUs (and CPU and memory) go, or why they cannot go anywhere now.

    ``batch`` is False: the staged pass calls :meth:`place` job by job.
    """

    batch: ClassVar[Literal[False]] = False  # a Literal: ``if placement.batch`` tells the two kinds apart
    resource_sensitive: ClassVar[bool] = False

    def place(self, view: ClusterView, job: JobInfo, gpus: int, free: FreeResources,
              state: PassState) -> Allocation | Unplaced: ...

    def candidates(self, view: ClusterView, job: JobInfo, gpus: int, free: FreeResources, state: PassState,
                   limit: int = DEFAULT_CANDIDATES) -> list[Allocation]:
        """Up to ``limit`` distinct placements on ``free``, best first (the first is :meth:`place`'s),
        for a stage that scores them (Cassini's compatibility, Kubernetes' PlacementGenerate/Score).
        This default offers :meth:`place`'s one; a placement with several good answers overrides it."""
        placed = self.place(view, job, gpus, free, state)
        return [] if isinstance(placed, Unplaced) else [placed]


@runtime_checkable
class BatchPlacement(Stage, Protocol):
    """Places a whole runnable set at once and may change running jobs' CPU and memory
    (Synergy's packing, §3-4). ``batch`` is True: the staged pass picks the runnable set
    by ordering and GPU budget, preempts the rest, then calls :meth:`place_all` once."""

    batch: ClassVar[Literal[True]] = True
    resource_sensitive: ClassVar[bool] = False
    # Round-based (Synergy §3): the placement decides only at round boundaries, so the round timer
    # must run passes and the passes between rounds leave everything as it is (:meth:`acts_now`).
    rounds: bool = False

    def acts_now(self, view: ClusterView) -> bool:
        """Whether this pass may change anything: always, or only at a round boundary if ``rounds``."""
        return not self.rounds or view.at_round_boundary

    def place_all(self, view: ClusterView, runnable: Sequence[JobInfo], new: Sequence[JobInfo],
                  plan: Plan, free: FreeResources, state: PassState) -> None:
        """Add starts for ``new`` (pending members of ``runnable``, in priority order), resource changes
        for running ones, and reasons for the new jobs it does not start; ``free`` has the preempted
        jobs' resources back."""
        ...


@runtime_checkable
class Adjuster(Stage, Protocol):
    """Changes running jobs after placement: migrations (Gandiva), time-shifts (Cassini), resizes.

    ``acts_without_pending``: whether it may act in a pass with no job waiting. ``needs_rounds``:
    whether it acts on a round clock (EasyScale's proposal rounds), so the round timer must run passes.
    """

    acts_without_pending: ClassVar[bool] = True
    needs_rounds: ClassVar[bool] = False

    def adjust(self, view: ClusterView, plan: Plan, free: FreeResources, state: PassState) -> None: ...


@runtime_checkable
class Preemption(Stage, Protocol):
    """Victims for a job the placement could not place (Kubernetes' PostFilter): the staged pass
    preempts them in the given order, as few as let the placement succeed, or none if even all
    of them would not."""

    def victims(self, view: ClusterView, job: JobInfo, plan: Plan, state: PassState) -> list[JobInfo]: ...


class AdmitAll(Admission):
    name = "all"
    time_invariant = True

    def admit(self, view: ClusterView, jobs: Sequence[JobInfo], plan: Plan, state: PassState) -> Iterable[JobInfo]:
        return jobs


class FixedSize(Sizing):
    """Every job gets exactly the GPUs it asked for."""

    name = "fixed"
    time_invariant = True

    def gpus(self, view: ClusterView, job: JobInfo) -> int:
        return job.spec.num_gpus
