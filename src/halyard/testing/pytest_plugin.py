"""pytest plugin: a ``halyard_cluster`` fixture (a started :class:`TestCluster`).

Enable it with ``pytest_plugins = ["halyard.testing.pytest_plugin"]`` in a
conftest.py (needs pytest-asyncio). Parametrise it indirectly::

    @pytest.mark.parametrize("halyard_cluster", [{"nodes": 2, "policy": "las"}], indirect=True)
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from halyard.testing.cluster import TestCluster


@pytest_asyncio.fixture
async def halyard_cluster(request) -> AsyncIterator[TestCluster]:
    options = getattr(request, "param", {}) or {}
    async with TestCluster(**options) as cluster:
        yield cluster
