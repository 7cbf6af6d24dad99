"""The control plane's state in PostgreSQL: ``--db postgresql://...``, for active and standby control planes.

The same interface and the same rule as :class:`~halyard.controlplane.store.SqliteStore`: a
:meth:`PostgresStore.save` is one transaction, and the control plane answers a submission only once
the commit that holds it has returned (group commits: one transaction per burst). What PostgreSQL
adds is that several control planes can reach one store, so every write is *fenced*
(:meth:`PostgresStore.fence`): the transaction first checks, in the database and under the lease
row's lock, that this process still holds the leadership epoch it was elected with and that its
lease has not expired by the database's clock; if not, nothing is written and :class:`Fenced` is
raised. A leader that was paused past its lease (SIGSTOP, a long GC, a VM migration) and resumes
therefore commits nothing (:mod:`halyard.controlplane.leadership` holds the lease).

Driver: psycopg 3 (``pip install 'halyard[postgres]'``). It is maintained by the PostgreSQL
adapter's long-time authors and has both a blocking and an asyncio API over one connection type:
the store keeps the blocking call the :class:`Store` interface has (the control plane saves between
two awaits, as with SQLite) while the lease is renewed on an asyncio connection. asyncpg is
asyncio-only, so the store would have needed a second, asynchronous interface.

Schema: the version is ``meta.schema_version``; :data:`MIGRATIONS` brings an older database up,
step by step, each in the opening transaction (serialised between processes by an advisory lock),
and a database newer than this Halyard is refused, naming it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from halyard.controlplane.store import (
    SCHEMA_VERSION,
    VERSION_KEY,
    Store,
    allocation_to_dict,
    check_meta,
    decode_state,
    encode_changes,
    spec_to_dict,
)
from halyard.datamodel import JobEvent
from halyard.scheduling.records import JobRecord
from halyard.scheduling.state import StoredState, StoreError

__all__ = ["MIGRATIONS", "Fenced", "PostgresStore", "is_postgres_url", "redact"]

# pg_advisory_xact_lock key serialising schema migrations between control planes: "halyard" in ASCII.
_MIGRATION_LOCK = 0x68616C79617264
# A leader's data connection may sit inside a transaction at most this long (the server ends the
# session past it): a process paused mid-transaction cannot hold the lease row's lock, and with it a
# standby's takeover, for longer. Well under the default lease (15 s).
IDLE_IN_TRANSACTION_TIMEOUT_MS = 5_000
CONNECT_TIMEOUT_S = 5

# Integer slots are bigint columns; the others (times, rates, progress) keep each value's Python type
# (an int stays an int, inf stays inf) in one JSON text column: PostgreSQL's columns have one type, and
# jsonb would turn 1e300 into an int and refuse inf.
_INT_SLOTS = ("num_gpus", "iterations_total", "preemptions", "restarts", "epoch", "attempt")
_NUMBER_SLOTS = (
    "ideal_iteration_s", "iteration_s", "pending_since", "queued_s", "first_start", "last_assignment_time",
    "end_time", "_done", "_anchor", "_resume_at", "_rate", "_gpu_s", "_run_s", "_run_start",
    "exposed_iteration_s", "_exposed_s",
)

# version -> the statements that bring version - 1 to it. Append; never edit a released step.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        "CREATE TABLE meta (key text PRIMARY KEY, value text NOT NULL)",
        f"""CREATE TABLE jobs (
            job_id text PRIMARY KEY,
            arrival_seq bigint NOT NULL UNIQUE,
            state text NOT NULL,
            spec text NOT NULL,
            allocation text,
            {', '.join(f'{s} bigint NOT NULL' for s in _INT_SLOTS)},
            numbers text NOT NULL,
            CHECK (state != 'RUNNING' OR allocation IS NOT NULL),
            CHECK (state != 'PENDING' OR allocation IS NULL))""",
        """CREATE TABLE events (
            seq bigint PRIMARY KEY,
            time double precision NOT NULL,
            job_id text NOT NULL REFERENCES jobs (job_id),
            kind text NOT NULL,
            state text NOT NULL,
            detail text NOT NULL)""",
        "CREATE INDEX events_by_job ON events (job_id)",
        # The leadership lease (leadership.py): one row per name, timed by the database's clock.
        """CREATE TABLE leader (
            name text PRIMARY KEY,
            holder text NOT NULL,
            address text NOT NULL,
            epoch bigint NOT NULL,
            acquired_at timestamptz NOT NULL,
            renewed_at timestamptz NOT NULL,
            expires_at timestamptz NOT NULL,
            writes bigint NOT NULL DEFAULT 0)""",
    ),
}
assert max(MIGRATIONS) == SCHEMA_VERSION, "a schema version without its migration"

_COLUMNS = ("job_id", "arrival_seq", "state", "spec", "allocation", *_INT_SLOTS, "numbers")
_UPSERT = (f"INSERT INTO jobs ({', '.join(_COLUMNS)}) VALUES ({', '.join(['%s'] * len(_COLUMNS))}) "
           f"ON CONFLICT (job_id) DO UPDATE SET {', '.join(f'{c} = excluded.{c}' for c in _COLUMNS[1:])}")
_APPEND = "INSERT INTO events (seq, time, job_id, kind, state, detail) VALUES (%s, %s, %s, %s, %s, %s)"
# The fence: this process's epoch is still the lease's, and the lease is still running by the
# database's clock. The UPDATE takes the row's lock, so a takeover (leadership.py) waits for this
# transaction to end: whatever it commits comes before the next leader reads the state.
_FENCE = ("UPDATE leader SET writes = writes + 1 WHERE name = %s AND epoch = %s "
          "AND expires_at > clock_timestamp()")
_JSON = json.JSONEncoder(separators=(",", ":"))


class Fenced(StoreError):
    """A write by a control plane that no longer holds the leadership (its epoch is old or its lease
    ran out): nothing was written."""


def is_postgres_url(db: object) -> bool:
    return isinstance(db, str) and db.startswith(("postgresql://", "postgres://"))


def redact(url: str) -> str:
    """The URL without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0].split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[1]}"))


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise StoreError("a postgresql:// --db needs the PostgreSQL driver: pip install 'halyard[postgres]'") from None
    return psycopg


class PostgresStore(Store):
    """State in one PostgreSQL database (tables ``meta``, ``jobs``, ``events``, ``leader``).

    One connection, used from one thread (the asyncio loop) at a time, as :class:`SqliteStore`.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.name = redact(url)
        self._psycopg = _psycopg()
        self._fence: tuple[str, int] | None = None
        try:
            self._db = self._psycopg.connect(
                url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S, application_name="halyard-controlplane",
                options=f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_TIMEOUT_MS}")
        except self._psycopg.Error as exc:
            raise StoreError(f"{self.name}: cannot connect to the state database: {_first_line(exc)}") from exc
        try:
            self._migrate()
            self._last_seq = self._max_seq()
        except BaseException:
            self._db.close()
            raise

    # --- schema -----------------------------------------------------------------

    def _migrate(self) -> None:
        psycopg = self._psycopg
        try:
            with self._db.transaction():
                self._db.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
                version = self._version()
                if version > SCHEMA_VERSION:
                    raise StoreError(f"{self.name}: the state database has schema version {version}, newer than "
                                     f"this Halyard reads ({SCHEMA_VERSION}); use a newer Halyard or another --db")
                for step in range(version + 1, SCHEMA_VERSION + 1):
                    for statement in MIGRATIONS[step]:
                        self._db.execute(statement)
                    self._db.execute("INSERT INTO meta (key, value) VALUES (%s, %s) ON CONFLICT (key) "
                                     "DO UPDATE SET value = excluded.value", (VERSION_KEY, str(step)))
        except psycopg.Error as exc:
            raise StoreError(f"{self.name}: not a usable Halyard state database: {_first_line(exc)}") from exc

    def _version(self) -> int:
        """The stored schema version; 0 for an empty database."""
        tables = {r[0] for r in self._db.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()")}
        if not tables:
            return 0
        if not {"meta", "jobs", "events"} <= tables:
            raise StoreError(f"{self.name}: not a Halyard state database (tables: {', '.join(sorted(tables))})")
        row = self._db.execute("SELECT value FROM meta WHERE key = %s", (VERSION_KEY,)).fetchone()
        try:
            return int(row[0])
        except (TypeError, ValueError):
            raise StoreError(f"{self.name}: the state database has no valid schema version "
                             f"(meta {VERSION_KEY!r} = {row[0] if row else None!r})") from None

    def _max_seq(self) -> int:
        return self._db.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0]

    # --- fencing ----------------------------------------------------------------

    def fence(self, name: str, epoch: int) -> None:
        """From now on every write checks that leadership ``name`` is at ``epoch`` and unexpired."""
        self._fence = (name, epoch)

    def _check_fence(self) -> None:
        if self._fence is None:
            return
        if self._db.execute(_FENCE, self._fence).rowcount != 1:
            name, epoch = self._fence
            raise Fenced(f"{self.name}: this control plane no longer leads {name!r} (its epoch {epoch} is "
                         "not the lease's, or the lease expired): nothing was written")

    # --- the Store interface ------------------------------------------------------

    def save(self, records: Iterable[JobRecord], events: Iterable[JobEvent]) -> None:
        """Upsert ``records`` and append ``events`` in one fenced transaction: all of it, or none."""
        rows, appended = encode_changes(self.name, records, _row, events, self._last_seq)
        if not rows and not appended:
            return
        self._write(lambda cur: (cur.executemany(_UPSERT, rows) if rows else None,
                                 cur.executemany(_APPEND, appended) if appended else None), "save")
        if appended:
            self._last_seq = appended[-1][0]

    def _write(self, body: Any, what: str) -> None:
        psycopg = self._psycopg
        try:
            with self._db.transaction(), self._db.cursor() as cur:
                self._check_fence()
                body(cur)
        except Fenced:
            raise
        except (psycopg.Error, OverflowError, ValueError, TypeError) as exc:
            raise StoreError(f"{self.name}: {what} failed, nothing was written: {_first_line(exc)}") from exc

    def load(self) -> StoredState:
        psycopg = self._psycopg
        try:
            with self._db.transaction():
                self._db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")  # one consistent read
                job_rows = self._db.execute(f"SELECT {', '.join(_COLUMNS)} FROM jobs ORDER BY arrival_seq").fetchall()
                event_rows = self._db.execute("SELECT seq, time, job_id, kind, state, detail FROM events "
                                              "ORDER BY seq").fetchall()
                meta = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        except psycopg.Error as exc:
            raise StoreError(f"{self.name}: cannot read the state database: {_first_line(exc)}") from exc
        state = decode_state(self.name, job_rows, _record, event_rows, meta)
        self._last_seq = state.events[-1].seq if state.events else 0  # a standby that takes over continues the log
        return state

    def get_meta(self, key: str) -> str | None:
        try:
            row = self._db.execute("SELECT value FROM meta WHERE key = %s", (key,)).fetchone()
        except self._psycopg.Error as exc:
            raise StoreError(f"{self.name}: cannot read meta {key!r}: {_first_line(exc)}") from exc
        return None if row is None else row[0]

    def set_meta(self, key: str, value: str) -> None:
        """Set one meta value (committed at once, fenced as every write). The schema version is the store's."""
        check_meta(key, value)
        self._write(lambda cur: cur.execute("INSERT INTO meta (key, value) VALUES (%s, %s) ON CONFLICT (key) "
                                            "DO UPDATE SET value = excluded.value", (key, value)),
                    f"write of meta {key!r}")

    def set_meta_once(self, key: str, value: str) -> str:
        """Set ``key`` unless it is set, unfenced (the same value whoever wins); the stored value."""
        try:
            with self._db.transaction():
                self._db.execute("INSERT INTO meta (key, value) VALUES (%s, %s) ON CONFLICT (key) DO NOTHING",
                                 (key, value))
                return self._db.execute("SELECT value FROM meta WHERE key = %s", (key,)).fetchone()[0]
        except self._psycopg.Error as exc:
            raise StoreError(f"{self.name}: cannot write meta {key!r}: {_first_line(exc)}") from exc

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _row(record: JobRecord) -> tuple[Any, ...]:
    numbers = _JSON.encode({slot.lstrip("_"): getattr(record, slot) for slot in _NUMBER_SLOTS})
    allocation = None if record.allocation is None else _JSON.encode(allocation_to_dict(record.allocation))
    return (record.job_id, record.arrival_seq, record.state.value, _JSON.encode(spec_to_dict(record.spec)),
            allocation, *(getattr(record, s) for s in _INT_SLOTS), numbers)


def _record(row: tuple[Any, ...]) -> JobRecord:
    job_id, arrival_seq, state, spec, allocation, *rest = row
    data: dict[str, Any] = {"job_id": job_id, "arrival_seq": arrival_seq, "state": state, "spec": json.loads(spec),
                            "allocation": None if allocation is None else json.loads(allocation)}
    data.update(zip(_INT_SLOTS, rest[:-1], strict=True))
    numbers = json.loads(rest[-1])
    data.update({slot: numbers[slot.lstrip("_")] for slot in _NUMBER_SLOTS})
    return JobRecord.restore(data)
