"""Enum values a peer sends that this build does not know: logged, counted, read as a documented default.

``halyard.v1`` grows compatibly (DESIGN.md, "The protocol"), so a newer agent may send an
``ExitStatus`` this control plane predates, a newer client a ``JobState`` filter, a newer
control plane a ``ClockKind``. Protobuf keeps such a value as the bare number (proto3 enums
are open), and ``Enum.Name`` raises ``ValueError`` on it: before this module an agent's
``Exited(status=99)`` ended its stream in the middle of applying the exit and stranded the
job. Every place that reads an enum from a peer goes through :meth:`UnknownEnums.read`,
which answers the value if this build knows it and the documented default otherwise
(docs/api.md, "Unknown enum values"), logging it and counting it by message and field;
the control plane exports the counts as ``halyard_unknown_enum_total{message,field}``.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

import structlog
from google.protobuf.descriptor import EnumDescriptor

log = structlog.get_logger("halyard.protocol")

D = TypeVar("D")
MAX_TRACKED_VALUES = 1024  # distinct (message, field, value) whose log lines are paced; later ones are only counted


class EnumType(Protocol):
    """What a generated protobuf enum wrapper (``ExitStatus``, ``JobState``, ...) offers here."""

    @property
    def DESCRIPTOR(self) -> EnumDescriptor: ...  # read-only here, so the wrapper's own type matches

    def Name(self, number: int) -> str: ...  # protobuf's name


def known(enum: EnumType, value: int) -> bool:
    """Whether this build's copy of the protocol has ``value`` in ``enum``."""
    return value in enum.DESCRIPTOR.values_by_number


def enum_name(enum: EnumType, value: int) -> str:
    """``enum``'s name for ``value``, or ``ENUMTYPE(value)`` for a value this build does not know."""
    return enum.Name(value) if known(enum, value) else f"{enum.DESCRIPTOR.name}({value})"


class UnknownEnums:
    """Counts of unknown enum values read from peers, by (message, field); one per control plane or agent.

    Each distinct (message, field, value) is logged the first time and then at every power of
    two of its count, so a peer that sends one with every heartbeat is seen without flooding
    the log; every occurrence is counted."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}
        self._seen: dict[tuple[str, str, int], int] = {}

    def read(self, enum: EnumType, value: int, *, message: str, field: str, default: D, peer: str = "") -> int | D:
        """``value`` if ``enum`` has it, else ``default`` (counted and logged, naming message, field and peer)."""
        if known(enum, value):
            return value
        key = (message, field)
        self.counts[key] = self.counts.get(key, 0) + 1
        tracked = (message, field, value)
        if tracked not in self._seen and len(self._seen) >= MAX_TRACKED_VALUES:
            return default  # a peer inventing values does not grow this map: counted above, not logged
        seen = self._seen[tracked] = self._seen.get(tracked, 0) + 1
        if seen & (seen - 1) == 0:
            shown = enum_name(enum, default) if isinstance(default, int) else repr(default)
            log.warning("unknown enum value from a peer: read as the default", message=message, field=field,
                        value=value, default=shown, peer=peer, times=seen)
        return default

    def total(self) -> int:
        return sum(self.counts.values())
