"""What a store hands back to the scheduling core on start, and the errors of reading it.

The control plane's stores (controlplane/store.py: SQLite; store_postgres.py) load a
:class:`StoredState`; :meth:`halyard.scheduling.SchedulingCore.restore` checks it and raises
:class:`InconsistentState` naming the job. These types live with the core so that the core
imports no store (docs/architecture.md: the scheduling core is pure).
"""

from __future__ import annotations

from dataclasses import dataclass

from halyard.datamodel import HalyardError, JobEvent
from halyard.scheduling.records import JobRecord


class StoreError(HalyardError):
    """The state database cannot be opened, read or written; the message names the file."""


class InconsistentState(StoreError):
    """Stored state that breaks an invariant of the core; the message names the job."""


@dataclass(frozen=True)
class StoredState:
    records: list[JobRecord]  # in arrival_seq order
    events: list[JobEvent]  # in seq order
    meta: dict[str, str]
