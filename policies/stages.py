"""The five replaceable stages of a policy (DESIGN.md, "The policy contract").

A configuration names one implementation per stage; :class:`StagedPolicy` in
:mod:`halyard.policies.staged` runs them in order. Each stage is a small
object with no hidden state beyond what its constructor takes, so passes are
deterministic given the view.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from halyard.datamodel import Allocation
from halyard.policies.plan import Plan
from halyard.policies.resources import FreeResources
from halyard.policies.view import ClusterView, JobInfo


class Policy(Protocol):
    """What the core runs each pass. :class:`StagedPolicy` is the usual one."""

    name: str

    @property
    def needs_rounds(self) -> bool: ...
    @property
    def acts_without_pending(self) -> bool: ...
    def schedule(self, view: ClusterView) -> Plan: ...


class Admission(Protocol):
    """Which pending jobs may be considered this pass."""

    name: str

    def admit(self, view: ClusterView, jobs: Sequence[JobInfo]) -> Iterable[JobInfo]: ...


class Ordering(Protocol):
    """Priority among jobs: lower key first.

    ``preemptive`` orderings rank running and pending jobs together and
    preempt running jobs that fall out of the top set. ``needs_rounds`` says
    whether priorities change with time alone (so the round timer must run
    passes); FIFO and SRTF only change on events, LAS changes as service accrues.
    ``arrival_order`` says the order is exactly arrival order, which the view's
    pending list already has, so a pass need not sort.
    """

    name: str
    preemptive: bool
    needs_rounds: bool
    arrival_order: bool

    def key(self, view: ClusterView) -> Callable[[JobInfo], Any]: ...


class Sizing(Protocol):
    """How many GPUs a job gets if it is started now."""

    name: str

    def gpus(self, view: ClusterView, job: JobInfo) -> int: ...


class Placement(Protocol):
    """Where a job's GPUs (and CPU and memory) go; None if it does not fit."""

    name: str

    def place(self, view: ClusterView, job: JobInfo, gpus: int, free: FreeResources) -> Allocation | None: ...


class NetworkAugmenter(Protocol):
    """Adds network actions (time-shifts) to a plan after placement."""

    name: str

    def augment(self, view: ClusterView, plan: Plan, free: FreeResources) -> None: ...


class AdmitAll:
    name = "all"

    def admit(self, view: ClusterView, jobs: Sequence[JobInfo]) -> Iterable[JobInfo]:
        return jobs


class FixedSize:
    """Every job gets exactly the GPUs it asked for."""

    name = "fixed"

    def gpus(self, view: ClusterView, job: JobInfo) -> int:
        return job.spec.num_gpus


class NoAugmentation:
    name = "none"

    def augment(self, view: ClusterView, plan: Plan, free: FreeResources) -> None:
        return None
