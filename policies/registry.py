"""Named policy configurations, selectable with ``--policy NAME``."""

from __future__ import annotations

from collections.abc import Callable

from halyard.datamodel import ValidationError
from halyard.policies.dally import AutoTuner, Dally, ManualTimers
from halyard.policies.gandiva import ConsolidatingMigration, NetworkAgnostic
from halyard.policies.ordering import Fifo, Las, Srtf
from halyard.policies.placement import FirstFitConsolidated
from halyard.policies.staged import StagedPolicy
from halyard.policies.stages import Policy
from halyard.policies.synergy import MECHANISMS, ORDERINGS, make_synergy
from halyard.policies.tiresias import SkewConsolidation, TwoDimensionalLas

_POLICIES: dict[str, Callable[[], Policy]] = {
    "fifo": lambda: StagedPolicy("fifo", Fifo(), placement=FirstFitConsolidated()),
    "srtf": lambda: StagedPolicy("srtf", Srtf(), placement=FirstFitConsolidated()),
    "las": lambda: StagedPolicy("las", Las(), placement=FirstFitConsolidated()),
    # Dally (its own Policy: offers and accept/reject, policies/dally.py) with the
    # auto-tuner of Algorithm 2, and Dally-manual with the paper's 12 h + 12 h timers.
    "dally": lambda: Dally(AutoTuner(), name="dally"),
    "dally-manual": lambda: Dally(ManualTimers(), name="dally-manual"),
    # Dally's baselines: Tiresias (discretised 2D-LAS, skew-based consolidation) and
    # Gandiva (FIFO, network-agnostic placement, migration to tighter placements).
    "tiresias": lambda: StagedPolicy("tiresias", TwoDimensionalLas(), placement=SkewConsolidation()),
    "gandiva": lambda: StagedPolicy("gandiva", Fifo(), placement=NetworkAgnostic(),
                                    network=ConsolidatingMigration()),
}

# Synergy (policies/synergy.py): MECHANISM:ORDERING for every mechanism and ordering,
# e.g. synergy-tune:srtf, synergy-greedy:fifo, proportional:las, synergy-opt:ftf.
for _mechanism in MECHANISMS:
    for _ordering in ORDERINGS:
        _POLICIES[f"{_mechanism}:{_ordering}"] = (lambda m=_mechanism, o=_ordering: make_synergy(m, o))


def policy_names() -> list[str]:
    return sorted(_POLICIES)


def make_policy(name: str) -> Policy:
    """A fresh policy instance for ``name`` (policies keep per-run caches)."""
    try:
        return _POLICIES[name]()
    except KeyError:
        raise ValidationError(f"unknown policy {name!r} (known: {', '.join(policy_names())})",
                              field="policy") from None
