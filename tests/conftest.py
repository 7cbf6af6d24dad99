"""Shared fixtures: small real clusters and the real performance model."""

from __future__ import annotations

import pytest
from factories import SMALL_CLUSTER_TOML

from halyard.datamodel import Cluster, parse_cluster


@pytest.fixture(scope="session")
def perf():
    from halyard.emulator import PerformanceModel

    return PerformanceModel()


@pytest.fixture(scope="session")
def small_cluster() -> Cluster:
    return parse_cluster(SMALL_CLUSTER_TOML, source="small.toml")


# --- PostgreSQL (issue 36): a throwaway server per test session, a fresh database per use ----------------


@pytest.fixture(scope="session")
def pg_server():
    """A real PostgreSQL server (initdb + pg_ctl in a temporary directory, loopback port); skipped, naming
    why, only where the server binaries or the driver are absent."""
    from halyard.testing.postgres import find_binaries, postgres_server

    found, why = find_binaries()
    if found is None:
        pytest.skip(why)
    pytest.importorskip("psycopg", reason="the PostgreSQL driver is not installed: pip install 'halyard[postgres]'")
    with postgres_server() as server:
        yield server


@pytest.fixture
def pg_url(pg_server) -> str:
    """The URL of a new, empty database on the session's server."""
    return pg_server.create_database()
