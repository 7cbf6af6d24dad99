"""What the PostgreSQL store adds to the SQLite store's tests (tests/test_store.py runs those against both):
its schema migrations, its column layout and its URL handling, against a real throwaway server."""

from __future__ import annotations

import threading

import psycopg
import pytest

from halyard.controlplane import store as sqlite_store
from halyard.controlplane import store_postgres
from halyard.controlplane.store import SCHEMA_VERSION
from halyard.controlplane.store_postgres import MIGRATIONS, PostgresStore, is_postgres_url, redact
from halyard.scheduling.state import StoreError


def test_every_record_slot_has_a_place():
    placed = {"job_id", "arrival_seq", "state", "spec", "allocation", *store_postgres._INT_SLOTS,
              *store_postgres._NUMBER_SLOTS}
    assert sorted(placed) == sorted(sqlite_store._SLOTS)


def test_an_empty_database_is_migrated_once_even_by_concurrent_openers(pg_url):
    errors: list[BaseException] = []

    def open_it() -> None:
        try:
            PostgresStore(pg_url).close()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    with PostgresStore(pg_url) as store:
        assert store.get_meta("schema_version") == str(SCHEMA_VERSION) == str(max(MIGRATIONS))
    with psycopg.connect(pg_url) as db:
        tables = {r[0] for r in db.execute("SELECT table_name FROM information_schema.tables "
                                           "WHERE table_schema = 'public'")}
    assert tables == {"meta", "jobs", "events", "leader"}


def test_an_older_schema_is_brought_up_by_the_missing_steps(pg_url, monkeypatch):
    """A database at version N opened by a Halyard at N+1 runs step N+1 only, in one transaction."""
    PostgresStore(pg_url).close()
    monkeypatch.setattr(store_postgres, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    monkeypatch.setitem(MIGRATIONS, SCHEMA_VERSION + 1, ("CREATE TABLE added_later (x integer)",))
    with PostgresStore(pg_url) as store:
        assert store.get_meta("schema_version") == str(SCHEMA_VERSION + 1)
    monkeypatch.setitem(MIGRATIONS, SCHEMA_VERSION + 2, ("CREATE TABLE broken (",))  # a failing step
    monkeypatch.setattr(store_postgres, "SCHEMA_VERSION", SCHEMA_VERSION + 2)
    with pytest.raises(StoreError, match="not a usable Halyard state database"):
        PostgresStore(pg_url)
    monkeypatch.setattr(store_postgres, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    with PostgresStore(pg_url) as store:  # the failed step left nothing behind
        assert store.get_meta("schema_version") == str(SCHEMA_VERSION + 1)


def test_unreachable_server_is_named_without_the_password():
    url = "postgresql://halyard:secret@127.0.0.1:1/nowhere"
    with pytest.raises(StoreError, match=r"postgresql://halyard:\*\*\*@127.0.0.1:1/nowhere: cannot connect") as err:
        PostgresStore(url)
    assert "secret" not in str(err.value)
    assert redact("postgresql://u@h/db") == "postgresql://u@h/db"
    assert is_postgres_url("postgres://h/db") and not is_postgres_url("state.db")
