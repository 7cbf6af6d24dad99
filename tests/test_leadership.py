"""The leadership lease and its fence (issue 36), against a real throwaway PostgreSQL server."""

from __future__ import annotations

import asyncio
import time

import pytest
from factories import job

from halyard.controlplane.leadership import Leadership, LeaseSettings, LostLeadership
from halyard.controlplane.store_postgres import Fenced, PostgresStore
from halyard.datamodel import ValidationError
from halyard.policies import make_policy
from halyard.scheduling import SchedulingCore

SHORT = LeaseSettings(duration_s=1.5, renew_deadline_s=1.0, retry_period_s=0.2)


def candidate(url: str, port: int) -> Leadership:
    return Leadership(url, {"clients": f"127.0.0.1:{port}", "agents": f"127.0.0.1:{port}"}, SHORT)


def test_settings_are_ordered_as_kubernetes_requires():
    assert LeaseSettings() == LeaseSettings(15.0, 10.0, 2.0)
    with pytest.raises(ValidationError, match="renew deadline"):
        LeaseSettings(duration_s=5.0, renew_deadline_s=5.0, retry_period_s=1.0)


async def test_a_dead_leaders_session_hands_over_at_once_and_its_epoch_is_fenced(pg_url, small_cluster, perf):
    PostgresStore(pg_url).close()  # the schema
    a, b = candidate(pg_url, 1), candidate(pg_url, 2)
    assert await asyncio.wait_for(a.campaign(), 10) == 1
    store = PostgresStore(pg_url)
    store.fence(a.name, a.epoch)
    core = SchedulingCore(small_cluster, make_policy("fifo"), perf)
    core.submit(job(1, job_id="before"), 0.0)
    store.save(*core.take_changes())  # the leader writes
    waiting = asyncio.create_task(b.campaign())
    await asyncio.sleep(0.6)  # three retries: the lease is live and its session is there
    assert not waiting.done() and b.leader_address("clients") == "127.0.0.1:1"
    started = time.monotonic()
    await a.close()  # as a killed process's connection ends
    assert await asyncio.wait_for(waiting, 10) == 2
    assert time.monotonic() - started < SHORT.duration_s  # not the lease: the session's end
    core.submit(job(1, job_id="after"), 1.0)
    with pytest.raises(Fenced, match="no longer leads"):
        store.save(*core.take_changes())  # the former leader's write: refused, nothing written
    with PostgresStore(pg_url) as reader:
        assert [r.job_id for r in reader.load().records] == ["before"]
    store.close()
    await b.close()


async def test_a_paused_leader_loses_at_the_lease_end_and_cannot_renew(pg_url):
    PostgresStore(pg_url).close()
    a, b = candidate(pg_url, 1), candidate(pg_url, 2)
    await asyncio.wait_for(a.campaign(), 10)
    started = time.monotonic()
    # a does not renew (paused) but keeps its connection, and with it the session lock.
    assert await asyncio.wait_for(b.campaign(), 10) == 2
    waited = time.monotonic() - started
    assert SHORT.duration_s - 0.3 <= waited < SHORT.duration_s + 5, waited
    with pytest.raises(LostLeadership, match="taken over or expired"):
        await asyncio.wait_for(a.keep(), 10)  # resumed: its first renewal finds epoch 2
    keeper = asyncio.create_task(b.keep())
    await asyncio.sleep(3 * SHORT.retry_period_s)
    assert not keeper.done()  # the leader renews on
    keeper.cancel()
    await b.resign()
    c = candidate(pg_url, 3)
    assert await asyncio.wait_for(c.campaign(), 10) == 3  # a resignation hands over at once
    for one in (a, b, c):
        await one.close()
