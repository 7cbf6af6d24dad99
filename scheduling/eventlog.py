"""The job event log: every state change with a gap-free sequence number."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from halyard.datamodel import Allocation, EventKind, JobEvent, JobState


class EventLog:
    def __init__(self) -> None:
        self._events: list[JobEvent] = []
        self._observers: list[Callable[[JobEvent], None]] = []

    def append(self, time: float, job_id: str, kind: EventKind, state: JobState, detail: str = "") -> JobEvent:
        event = JobEvent(len(self._events) + 1, time, job_id, kind, state, detail)
        self._events.append(event)
        for observer in self._observers:
            observer(event)
        return event

    def observe(self, callback: Callable[[JobEvent], None]) -> None:
        """Call ``callback`` after each new event is appended (the core has applied the change
        by then), so a recorder can sample the cluster on events whichever driver runs the core."""
        self._observers.append(callback)

    def quiet(self) -> None:
        """Forget every observer: a copy of the core run forward (controlplane/forecast.py) must not
        feed the live process's recorders and metrics."""
        self._observers = []

    def extend(self, events: Iterable[JobEvent]) -> None:
        """Append stored events (after a restart) so that numbering continues after them;
        raises ValueError, appending nothing, unless their numbers continue the log without a gap."""
        events = list(events)
        for i, event in enumerate(events, start=len(self._events) + 1):
            if event.seq != i:
                raise ValueError(f"event log: expected event #{i}, got #{event.seq} (job {event.job_id})")
        self._events.extend(events)

    def since(self, seq: int) -> list[JobEvent]:
        """Events with sequence number > ``seq`` (numbers start at 1): WatchEvents resumes here."""
        return self._events[max(seq, 0):]

    def __len__(self) -> int:
        return len(self._events)

    def __iter__(self) -> Iterator[JobEvent]:
        return iter(self._events)


def describe(allocation: Allocation) -> str:
    """A compact, stable text form: ``node:gpu,gpu;node:gpu`` (used in event details)."""
    return ";".join(f"{p.node}:{','.join(map(str, p.gpus))}" for p in allocation.nodes)
