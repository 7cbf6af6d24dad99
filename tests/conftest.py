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
