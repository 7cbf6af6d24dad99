"""Why a job is not started: a code and a short reason, kept on the job.

Kubernetes answers "0/8 nodes are available: 3 Insufficient nvidia.com/gpu" for every
pod it cannot schedule (framework ``Status`` with codes Unschedulable,
UnschedulableAndUnresolvable and Wait); Kueue keeps a ``noFitReason`` per workload.
Halyard's stages do the same: every stage that does not admit, place or start a job
says why with an :class:`Unplaced`, which the plan carries to the core and the core
keeps on the job record for ``GetJob``, ``halyard job`` and the metrics.

The reason text is formatted only when read: a pass over a long queue creates one
small object per job it looked at and formats nothing.
"""

from __future__ import annotations

import enum
import string
from dataclasses import dataclass

from halyard.plural import plural


class _CountFormatter(string.Formatter):
    """str.format, plus a spec ``#NOUN`` that writes the argument as a count of NOUN (:func:`plural`):
    ``"needs {:#GPU}"`` reads "needs 1 GPU" or "needs 8 GPUs" (never "1 usable GPUs")."""

    def format_field(self, value: object, format_spec: str) -> str:
        if format_spec.startswith("#"):
            return plural(int(value), format_spec[1:])  # type: ignore[call-overload]
        return super().format_field(value, format_spec)


_REASONS = _CountFormatter()  # stateless


class WaitCode(enum.StrEnum):
    """Kubernetes' three kinds of "not now", in Halyard's words."""

    CANNOT_FIT_NOW = "CANNOT_FIT_NOW"        # the resources are not free now (Unschedulable)
    NEVER_FITS = "NEVER_FITS"                # no state of this cluster fits it (UnschedulableAndUnresolvable)
    WAITING_BY_POLICY = "WAITING_BY_POLICY"  # it could fit, a rule holds it back (Wait): a delay timer, a quota


@dataclass(frozen=True, slots=True)
class Unplaced:
    """One stage's answer for one job: ``code``, the stage's name and a lazily formatted reason."""

    code: WaitCode
    stage: str
    template: str
    args: tuple[object, ...] = ()

    @property
    def reason(self) -> str:
        return _REASONS.format(self.template, *self.args) if self.args else self.template

    def __str__(self) -> str:
        return f"{self.code.value} ({self.stage}): {self.reason}"


def cannot_fit(stage: str, template: str, *args: object) -> Unplaced:
    return Unplaced(WaitCode.CANNOT_FIT_NOW, stage, template, args)


def never_fits(stage: str, template: str, *args: object) -> Unplaced:
    return Unplaced(WaitCode.NEVER_FITS, stage, template, args)


def by_policy(stage: str, template: str, *args: object) -> Unplaced:
    return Unplaced(WaitCode.WAITING_BY_POLICY, stage, template, args)
