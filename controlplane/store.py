"""The control plane's persistent state: jobs, their allocations and the event log.

:class:`Store` is the interface; :class:`SqliteStore` is the default, one
SQLite file in WAL mode. The control plane saves what changed after each batch
of core operations (``core.take_changes()``) in one transaction, and on start
loads everything back (``core.restore(store.load())``), so a control plane
killed at any instant restarts from its last committed save: no job is lost,
none is recorded twice.

Schema (version :data:`SCHEMA_VERSION`, kept in ``meta``):

* ``jobs``: one row per job, keyed by ``job_id`` (``arrival_seq`` unique); the
  spec and the allocation as JSON (NULL while pending; a finished job keeps
  the one it ended with, as its record does), and every other
  :class:`JobRecord` slot as its own column (the private progress fields without their underscore).
  Numeric record columns declare no type, so SQLite keeps each value's own
  type and a record comes back exactly as it was saved.
* ``events``: the event log, keyed by ``seq``; ``job_id`` references ``jobs``.
* ``meta``: key/value text (schema version; whatever the control plane keeps).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from halyard.datamodel import EventKind, JobEvent, JobState
from halyard.scheduling.records import JobRecord, allocation_from_dict, allocation_to_dict, spec_from_dict, spec_to_dict
from halyard.scheduling.state import InconsistentState, StoredState, StoreError

__all__ = [
    "SCHEMA_VERSION", "InconsistentState", "SqliteStore", "Store", "StoreError", "StoredState",
    "allocation_from_dict", "allocation_to_dict", "spec_from_dict", "spec_to_dict",
]

SCHEMA_VERSION = 1
VERSION_KEY = "schema_version"


class Store(Protocol):
    def save(self, records: Iterable[JobRecord], events: Iterable[JobEvent]) -> None:
        """In one atomic transaction, upsert ``records`` and append ``events``."""
        ...

    def load(self) -> StoredState: ...

    def get_meta(self, key: str) -> str | None: ...

    def set_meta(self, key: str, value: str) -> None: ...

    def close(self) -> None: ...


# JobRecord slot -> jobs column. Every slot is stored (a test checks the list
# against JobRecord.__slots__); spec and allocation are JSON text.
_SLOTS: tuple[str, ...] = (
    "job_id", "arrival_seq", "state", "spec", "allocation", "num_gpus", "iterations_total",
    "ideal_iteration_s", "iteration_s", "pending_since", "queued_s", "first_start",
    "last_assignment_time", "end_time", "preemptions", "restarts", "epoch", "attempt",
    "_done", "_anchor", "_resume_at", "_rate", "_gpu_s", "_run_s", "_run_start",
    "exposed_iteration_s", "_exposed_s",
)
_COLUMNS: tuple[str, ...] = tuple(s.lstrip("_") for s in _SLOTS)

_SCHEMA = f"""
CREATE TABLE meta (
    key TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
);
CREATE TABLE jobs (
    job_id TEXT PRIMARY KEY NOT NULL,
    arrival_seq INTEGER NOT NULL UNIQUE,
    state TEXT NOT NULL,
    spec TEXT NOT NULL,
    allocation TEXT,
    num_gpus INTEGER NOT NULL,
    iterations_total INTEGER NOT NULL,
    ideal_iteration_s NOT NULL,
    iteration_s NOT NULL,
    pending_since NOT NULL,
    queued_s NOT NULL,
    first_start,
    last_assignment_time,
    end_time,
    preemptions INTEGER NOT NULL,
    restarts INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    done NOT NULL,
    anchor NOT NULL,
    resume_at NOT NULL,
    rate NOT NULL,
    gpu_s NOT NULL,
    run_s NOT NULL,
    run_start,
    exposed_iteration_s NOT NULL,
    exposed_s NOT NULL,
    CHECK (state != 'RUNNING' OR allocation IS NOT NULL),
    CHECK (state != 'PENDING' OR allocation IS NULL)
);
CREATE TABLE events (
    seq INTEGER PRIMARY KEY,
    time NOT NULL,
    job_id TEXT NOT NULL REFERENCES jobs (job_id),
    kind TEXT NOT NULL,
    state TEXT NOT NULL,
    detail TEXT NOT NULL
);
CREATE INDEX events_by_job ON events (job_id);
INSERT INTO meta (key, value) VALUES ('{VERSION_KEY}', '{SCHEMA_VERSION}');
"""

_UPSERT = (
    f"INSERT INTO jobs ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))}) "
    f"ON CONFLICT (job_id) DO UPDATE SET {', '.join(f'{c} = excluded.{c}' for c in _COLUMNS[1:])}"
)
_APPEND = "INSERT INTO events (seq, time, job_id, kind, state, detail) VALUES (?, ?, ?, ?, ?, ?)"
_JSON = json.JSONEncoder(separators=(",", ":"))


class SqliteStore(Store):
    """State in one SQLite file (or ``":memory:"``, for tests).

    The file is opened with ``journal_mode=WAL``, ``synchronous=NORMAL`` and
    ``foreign_keys=ON``. In WAL mode with ``synchronous=NORMAL`` a transaction
    is in the write-ahead log, handed to the operating system, when
    :meth:`save` returns: it survives the control plane process being killed
    (``kill -9``) at any instant after that, and a transaction interrupted
    before it is rolled back whole. (An operating-system crash or power loss may
    roll back the last few commits, never tear one; that is the price of not
    syncing on every commit.)

    Not thread-safe: use it from one thread (the asyncio loop) at a time.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot open the state database: {exc}") from exc
        try:
            self._open()
        except BaseException:
            self._db.close()
            raise

    def _open(self) -> None:
        db = self._db
        try:
            db.execute("PRAGMA busy_timeout = 2000")
            mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            db.execute("PRAGMA synchronous = NORMAL")
            db.execute("PRAGMA foreign_keys = ON")
            if mode != "wal" and not (mode == "memory" and self.path == ":memory:"):
                raise StoreError(f"{self.path}: cannot switch the state database to WAL mode (got {mode!r})")
            db.execute("BEGIN IMMEDIATE")
            try:
                tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
                if not tables:
                    for statement in _SCHEMA.split(";"):
                        if statement.strip():
                            db.execute(statement)
                else:
                    self._check_version(tables)
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            row = db.execute("SELECT max(seq) FROM events").fetchone()
            self._last_seq: int = row[0] or 0
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: not a usable Halyard state database: {exc}") from exc

    def _check_version(self, tables: set[str]) -> None:
        if not {"meta", "jobs", "events"} <= tables:
            raise StoreError(f"{self.path}: not a Halyard state database (tables: {', '.join(sorted(tables))})")
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (VERSION_KEY,)).fetchone()
        try:
            version = int(row[0]) if row is not None else None
        except ValueError:
            version = None
        if version is None:
            raise StoreError(f"{self.path}: the state database has no valid schema version "
                             f"(meta {VERSION_KEY!r} = {row[0] if row else None!r})")
        if version > SCHEMA_VERSION:
            raise StoreError(f"{self.path}: the state database has schema version {version}, newer than "
                             f"this Halyard reads ({SCHEMA_VERSION}); use a newer Halyard or another --db file")
        if version < SCHEMA_VERSION:
            raise StoreError(f"{self.path}: the state database has schema version {version}, "
                             f"which this Halyard cannot upgrade to {SCHEMA_VERSION}")

    # --- the Store interface -------------------------------------------------

    def save(self, records: Iterable[JobRecord], events: Iterable[JobEvent]) -> None:
        """Upsert ``records`` and append ``events`` in one transaction: all of it is
        committed, or (on any error, which is raised as :class:`~halyard.scheduling.state.StoreError`) none.

        Events must continue the stored log without a gap, and each must name a
        job that is stored (before or in this same call)."""
        rows, appended = encode_changes(self.path, records, _row, events, self._last_seq)
        if not rows and not appended:
            return
        db = self._db
        try:
            db.execute("BEGIN")
            try:
                if rows:
                    db.executemany(_UPSERT, rows)
                if appended:
                    db.executemany(_APPEND, appended)
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        except (sqlite3.Error, OverflowError, ValueError, TypeError) as exc:
            # OverflowError: an integer beyond SQLite's 64 bits (the request limits keep them out).
            raise StoreError(f"{self.path}: save failed, nothing was written: {exc}") from exc
        if appended:
            self._last_seq = appended[-1][0]

    def load(self) -> StoredState:
        db = self._db
        try:
            db.execute("BEGIN")  # one consistent read
            try:
                job_rows = db.execute(f"SELECT {', '.join(_COLUMNS)} FROM jobs ORDER BY arrival_seq").fetchall()
                event_rows = db.execute("SELECT seq, time, job_id, kind, state, detail FROM events "
                                        "ORDER BY seq").fetchall()
                meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
            finally:
                db.execute("COMMIT")
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot read the state database: {exc}") from exc
        return decode_state(self.path, job_rows, _record, event_rows, meta)

    def get_meta(self, key: str) -> str | None:
        try:
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot read meta {key!r}: {exc}") from exc
        return None if row is None else row[0]

    def set_meta(self, key: str, value: str) -> None:
        """Set one meta value (committed at once). The schema version is not the caller's to set."""
        check_meta(key, value)
        try:
            self._db.execute("INSERT INTO meta (key, value) VALUES (?, ?) "
                             "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, value))
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot write meta {key!r}: {exc}") from exc

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> SqliteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_meta(key: str, value: object) -> None:
    """What every store refuses in ``set_meta``: the schema version (the store's own) and non-text values."""
    if key == VERSION_KEY:
        raise ValueError(f"meta {key!r} belongs to the store")
    if not isinstance(value, str):
        raise TypeError(f"meta values are text, got {type(value).__name__} for {key!r}")


def encode_changes(name: str, records: Iterable[JobRecord], row_of: Callable[[JobRecord], tuple[Any, ...]],
                   events: Iterable[JobEvent], last_seq: int) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The rows a save writes: each record through ``row_of``, and each event as (seq, time, job_id,
    kind, state, detail), checked to continue the stored log (whose last event is ``last_seq``)
    without a gap; anything wrong raises :class:`StoreError` naming the store before a write."""
    try:
        rows = [row_of(r) for r in records]
    except (ValueError, TypeError) as exc:
        raise StoreError(f"{name}: save failed, nothing was written: a record cannot be stored: {exc}") from exc
    appended = [(e.seq, e.time, e.job_id, e.kind.value, e.state.value, e.detail) for e in events]
    for expected, row in enumerate(appended, start=last_seq + 1):
        if row[0] != expected:
            raise StoreError(f"{name}: event #{row[0]} (job {row[2]}) does not continue the stored "
                             f"log, which expects #{expected}")
    return rows, appended


def decode_state(name: str, job_rows: Iterable[tuple[Any, ...]], record_of: Callable[[tuple[Any, ...]], JobRecord],
                 event_rows: Iterable[tuple[Any, ...]], meta: dict[str, str]) -> StoredState:
    """A :class:`StoredState` from a store's rows (``record_of`` decodes a jobs row, whose first column
    is the job id; events rows are seq, time, job_id, kind, state, detail); an unreadable row raises
    :class:`~halyard.scheduling.state.StoreError` naming the store (``name``) and the job or event."""
    records = []
    for row in job_rows:
        try:
            records.append(record_of(row))
        except (ValueError, TypeError, KeyError) as exc:
            raise StoreError(f"{name}: job {row[0]!r} cannot be read back: {exc}") from exc
    events = []
    for seq, time, job_id, kind, state, detail in event_rows:
        try:
            events.append(JobEvent(seq, time, job_id, EventKind(kind), JobState(state), detail))
        except ValueError as exc:
            raise StoreError(f"{name}: event #{seq} (job {job_id}) cannot be read back: {exc}") from exc
    return StoredState(records, events, meta)


def _row(record: JobRecord) -> tuple[Any, ...]:
    values: list[Any] = [getattr(record, slot) for slot in _SLOTS]
    values[2] = record.state.value
    values[3] = _JSON.encode(spec_to_dict(record.spec))
    values[4] = None if record.allocation is None else _JSON.encode(allocation_to_dict(record.allocation))
    return tuple(values)


def _record(row: tuple[Any, ...]) -> JobRecord:
    data = dict(zip(_SLOTS, row, strict=True))
    data["spec"] = json.loads(data["spec"])
    if data["allocation"] is not None:
        data["allocation"] = json.loads(data["allocation"])
    return JobRecord.restore(data)
