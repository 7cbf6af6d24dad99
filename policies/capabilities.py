"""What a policy can do beyond :class:`~halyard.policies.stages.Policy`, declared as protocols.

A driver or an augmentation that needs more of a policy than a pass asks for it by capability, never
by reading an attribute it hopes is there (Kubernetes asserts ``var _ framework.FilterPlugin =
&Fit{}`` and refuses a profile whose plugin lacks an extension point). The registry checks an
augmentation's capabilities before it composes (:mod:`halyard.policies.registry`), so
``gavel+cassini`` is refused with a :class:`~halyard.datamodel.ValidationError` that names what
Gavel lacks instead of failing mid-run; drivers ask :func:`profile_requests_of` before a job's first
pass. ``tests/test_policy_augmentations.py`` composes every preset with every suffix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from halyard.datamodel import JobSpec, ValidationError
from halyard.policies.facts import ClusterFacts
from halyard.policies.profiles import ProfileRequest
from halyard.policies.stages import Adjuster, Ordering, Placement, Sizing


@runtime_checkable
class Adjustable(Protocol):
    """Runs :class:`~halyard.policies.stages.Adjuster` stages after its pass (through
    :func:`~halyard.policies.adjusting.run_adjusters`): what an augmentation that appends one
    (Cassini's time-shifts) needs."""

    name: str
    adjusters: tuple[Adjuster, ...]


@runtime_checkable
class HasOrdering(Protocol):
    """Ranks jobs with a replaceable :class:`~halyard.policies.stages.Ordering` stage: what an
    augmentation that changes the order (``+starvation-guard``, ``+srtf-by-speedup``) needs."""

    name: str
    ordering: Ordering


@runtime_checkable
class HasPlacement(Protocol):
    """Sizes and places jobs with replaceable stages (a staged pass): what an augmentation that wraps the
    placement (``+cassini-joint``'s cluster-wide candidates) needs."""

    name: str
    sizing: Sizing
    placement: Placement


@runtime_checkable
class TakesDallyOptions(Protocol):
    """Dally's rules of Halyard's own, off in the paper's presets (policies/dally.py ``with_option``)."""

    name: str
    migrate: bool
    worse_half: bool
    min_gain: float
    lease: bool
    reauction: bool
    preemption: bool


@runtime_checkable
class NeedsProfiles(Protocol):
    """Estimates jobs from profilings the driver takes before a job's first pass (Crius §5.1's stage
    profilings; policies/profiles.py): the generic preparation hook."""

    name: str

    def profile_requests(self, spec: JobSpec, facts: ClusterFacts) -> Sequence[ProfileRequest]: ...


def profile_requests_of(policy: object, spec: JobSpec, facts: ClusterFacts) -> Sequence[ProfileRequest]:
    """The profilings ``policy`` will ask of ``view.profiles`` for ``spec``; none unless it
    :class:`NeedsProfiles`."""
    return policy.profile_requests(spec, facts) if isinstance(policy, NeedsProfiles) else ()


# What each capability means, as a refusal says it (plain words: a user reads them on the command line).
MEANS: dict[type, str] = {
    Adjustable: "adjuster stages run after its own pass",
    HasOrdering: "a replaceable ordering stage",
    HasPlacement: "replaceable sizing and placement stages",
    TakesDallyOptions: "Dally's options; it is not a Dally policy",
    NeedsProfiles: "profilings asked before a job's first pass",
}


def require(policy: object, suffix: str, needs: Sequence[type]) -> None:
    """Refuse ``policy`` for ``+suffix`` unless it declares every capability in ``needs``: a
    :class:`ValidationError` naming the policy, the suffix and each capability it lacks."""
    missing = [cap for cap in needs if not isinstance(policy, cap)]
    if missing:
        name = getattr(policy, "name", type(policy).__name__)
        lacks = "; ".join(f"{cap.__name__} ({MEANS.get(cap, cap.__name__)})" for cap in missing)
        raise ValidationError(f"{name!r} cannot take +{suffix}: it lacks {lacks}", field="policy")
