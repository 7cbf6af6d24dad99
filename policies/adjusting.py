"""Adjuster stages after a pass, in one place for every policy.

An :class:`~halyard.policies.stages.Adjuster` (Gandiva's migrations, Cassini's time-shifts,
EasyScale's proposals) changes running jobs after the pass has placed what it will: the staged
pass and each policy that runs its own pass (Dally, Pollux, Gavel, Crius, ElasticFlow) call
:func:`adjust` on their plan, and the learning hooks through :func:`applied` and :func:`rejected`,
so an augmentation such as ``+cassini`` joins any of them the same way
(:class:`~halyard.policies.capabilities.Adjustable`). An adjuster sees the plan as a snapshot
(:meth:`Plan.placements_after <halyard.policies.plan.Plan.placements_after>` and the other queries)
and plans on ``free``: what the pass left free, or, from a pass that does not keep a ledger, the
view's free resources with the plan applied (:func:`free_after`).
"""

from __future__ import annotations

from collections.abc import Sequence

from halyard.policies.passstate import PassState
from halyard.policies.plan import Plan
from halyard.policies.resources import FreeResources
from halyard.policies.stages import Adjuster, Policy
from halyard.policies.view import ClusterView


def adjust(adjusters: Sequence[Adjuster], view: ClusterView, plan: Plan, free: FreeResources | None,
           state: PassState) -> Plan:
    """Run each adjuster in turn on ``plan`` (changed in place, and returned) and ``free`` (None:
    :func:`free_after`, computed only if there is an adjuster)."""
    if adjusters:
        ledger = free if free is not None else free_after(view, plan)
        for adjuster in adjusters:
            adjuster.adjust(view, plan, ledger, state)
    return plan


def applied(adjusters: Sequence[Adjuster], view: ClusterView, plan: Plan, state: PassState) -> None:
    """The core applied ``plan``: each adjuster commits what it decided (Stage.on_applied)."""
    for adjuster in adjusters:
        adjuster.on_applied(view, plan, state)


def rejected(adjusters: Sequence[Adjuster], view: ClusterView, plan: Plan, state: PassState) -> None:
    """The core refused ``plan``: each adjuster forgets what it decided (Stage.on_rejected)."""
    for adjuster in adjusters:
        adjuster.on_rejected(view, plan, state)


def act_without_pending(adjusters: Sequence[Adjuster]) -> bool:
    """Whether some adjuster may act in a pass with no job waiting (so such passes must run)."""
    return any(a.acts_without_pending for a in adjusters)


def need_rounds(adjusters: Sequence[Adjuster]) -> bool:
    """Whether some adjuster acts on a round clock (so the round timer must run passes)."""
    return any(a.needs_rounds for a in adjusters)


def described(adjusters: Sequence[Adjuster]) -> list[tuple[str, str]]:
    """``("adjust", name)`` per adjuster, in order: their part of ``Policy.stages()``."""
    return [("adjust", a.name) for a in adjusters]


def free_after(view: ClusterView, plan: Plan) -> FreeResources:
    """The view's free resources once ``plan`` is applied: every job the plan touches gives back what it
    holds and takes what :meth:`Plan.allocations_after` says it holds after."""
    free = view.free.copy()
    held = {job_id: job.allocation for job_id, job in view.running.items()}
    after = plan.allocations_after(held, view.now)
    touched = plan.touched()
    for job_id in touched:
        old = held.get(job_id)
        if old is not None:
            free.give(old)
    for job_id in touched:
        new = after.get(job_id)
        if new is not None:
            free.take(new)
    return free


class OwnPass(Policy):
    """Base of a policy that runs its own pass rather than a staged one (Gavel, Crius, ElasticFlow): it
    plans in :meth:`own_pass`, and :meth:`schedule` runs its :attr:`adjusters` after it on
    :func:`free_after`. A subclass that keeps its own ledger (Dally, Pollux) calls :func:`adjust` with it
    instead. A subclass's ``needs_rounds``, ``acts_without_pending`` and ``stages`` add its adjusters'
    (:func:`need_rounds`, :func:`act_without_pending`, :func:`described`); its ``on_applied`` and
    ``on_rejected``, if it has them, call :func:`applied` and :func:`rejected`."""

    adjusters: tuple[Adjuster, ...] = ()

    def own_pass(self, view: ClusterView, state: PassState) -> Plan:
        raise NotImplementedError

    def schedule(self, view: ClusterView, state: PassState) -> Plan:
        return adjust(self.adjusters, view, self.own_pass(view, state), None, state)

    def on_applied(self, view: ClusterView, plan: Plan, state: PassState) -> None:
        applied(self.adjusters, view, plan, state)

    def on_rejected(self, view: ClusterView, plan: Plan, state: PassState) -> None:
        rejected(self.adjusters, view, plan, state)
