"""Per-job counts of event kinds, declared once: the core counts them, and the metrics summary, the
per-job metrics, the run tables and Prometheus all read this table, so a new counted kind (a policy's
own way to stop a job, as Crius' suspensions) is one row here, not a change in five modules.

Each count is a :class:`~halyard.scheduling.records.JobRecord` attribute named :attr:`EventCount.field`,
which is also its key in ``metrics.summarize`` and ``metrics.job_metrics``, its run-table column and,
as ``halyard_<field>``, its Prometheus counter (by tenant). A count that is not a stored column is
recounted from the event log when the core restores (:func:`recount`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from halyard.datamodel import EventKind


@dataclass(frozen=True, slots=True)
class EventCount:
    kind: EventKind
    field: str  # the record attribute, summary and per-job key, run-table column; Prometheus halyard_<field>
    help: str  # what it counts (the Prometheus HELP line)
    stored: bool  # a stored column of the job record; False: recounted from the log on restore


EVENT_COUNTS: tuple[EventCount, ...] = (
    EventCount(EventKind.PREEMPTED, "preemptions", "Jobs preempted (by the policy or a lost agent)", stored=True),
    EventCount(EventKind.SUSPENDED, "suspensions", "Opportunistic jobs suspended by the policy "
               "(Crius §6.1; not counted as preemptions)", stored=False),
)
BY_KIND = {c.kind: c for c in EVENT_COUNTS}
RECOUNTED = tuple(c.field for c in EVENT_COUNTS if not c.stored)  # not stored columns: recounted on restore


def count(record: Any, kind: EventKind) -> None:
    """Add one to ``record``'s count of ``kind`` (nothing if ``kind`` is not counted)."""
    counted = BY_KIND.get(kind)
    if counted is not None:
        setattr(record, counted.field, getattr(record, counted.field) + 1)


def recount(record: Any, kind: EventKind) -> None:
    """:func:`count` for the counts that are not stored, as the core replays a stored log on restore."""
    counted = BY_KIND.get(kind)
    if counted is not None and not counted.stored:
        setattr(record, counted.field, getattr(record, counted.field) + 1)


def counts_of(record: Any) -> dict[str, int]:
    """``field -> count`` of one job, in table order."""
    return {c.field: getattr(record, c.field) for c in EVENT_COUNTS}


def totals(records: Iterable[Any]) -> dict[str, int]:
    """``field -> count`` summed over ``records``, in table order."""
    out = dict.fromkeys((c.field for c in EVENT_COUNTS), 0)
    for record in records:
        for c in EVENT_COUNTS:
            out[c.field] += getattr(record, c.field)
    return out
