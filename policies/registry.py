"""Named policy configurations, selectable with ``--policy NAME``."""

from __future__ import annotations

from collections.abc import Callable

from halyard.datamodel import ValidationError
from halyard.policies.ordering import Fifo, Las, Srtf
from halyard.policies.placement import FirstFitConsolidated
from halyard.policies.staged import StagedPolicy

_POLICIES: dict[str, Callable[[], StagedPolicy]] = {
    "fifo": lambda: StagedPolicy("fifo", Fifo(), placement=FirstFitConsolidated()),
    "srtf": lambda: StagedPolicy("srtf", Srtf(), placement=FirstFitConsolidated()),
    "las": lambda: StagedPolicy("las", Las(), placement=FirstFitConsolidated()),
}


def policy_names() -> list[str]:
    return sorted(_POLICIES)


def make_policy(name: str) -> StagedPolicy:
    """A fresh policy instance for ``name`` (policies keep per-run caches)."""
    try:
        return _POLICIES[name]()
    except KeyError:
        raise ValidationError(f"unknown policy {name!r} (known: {', '.join(policy_names())})",
                              field="policy") from None
