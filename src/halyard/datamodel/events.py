"""Job events: every state change, numbered in the order it happened."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from halyard.datamodel.job import JobState


class EventKind(enum.StrEnum):
    SUBMITTED = "SUBMITTED"
    STARTED = "STARTED"
    PREEMPTED = "PREEMPTED"
    # Crius §6.1 opportunistic execution: a job the policy stops to make room for the job it ran
    # beside; the same RUNNING -> PREEMPTED -> PENDING path, counted apart from preemptions.
    SUSPENDED = "SUSPENDED"
    REQUEUED = "REQUEUED"
    MIGRATED = "MIGRATED"
    RESIZED = "RESIZED"
    TIME_SHIFT = "TIME_SHIFT"
    RESOURCES = "RESOURCES"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


@dataclass(frozen=True, slots=True)
class JobEvent:
    """One entry of the event log. ``seq`` increases by one per event."""

    seq: int
    time: float
    job_id: str
    kind: EventKind
    state: JobState  # the job's state after the event
    detail: str = ""
