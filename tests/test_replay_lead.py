"""Replay with agent processes starts at a measured lead (src/halyard/experiments/replay.py, _process_lead_s)."""

from __future__ import annotations

import asyncio

import pytest
import structlog

from halyard.datamodel import JobSpec, parse_cluster
from halyard.experiments import replay as replay_module
from halyard.scheduling.state import StoreError
from halyard.testing.cluster import small_cluster_toml

STARTED = "control plane listening"  # logged once per attempt (ControlPlaneServer.start)


@pytest.mark.slow
async def test_replay_with_agent_processes_needs_at_most_one_restart():
    """The first lead is one measured process start-up per round of processes over the cores, so it is
    not the in-process 0.25 s that every agent process misses; a late attempt is followed by one
    whose lead is what it measured, with a margin (the old growth needed two or three restarts)."""
    toml = small_cluster_toml(2)
    jobs = [JobSpec(job_id=f"j{i}", submit_time=10.0 * i, model="resnet50", num_gpus=8, iterations=200)
            for i in range(2)]
    with structlog.testing.capture_logs() as logs:
        run = await replay_module.replay(jobs, parse_cluster(toml), toml, policy="fifo", speedup=200.0,
                                         processes=True)
    assert run.summary["completed"] == 2
    assert sum(1 for e in logs if e["event"] == STARTED) <= 2



async def test_a_late_start_measures_the_profilings_too(monkeypatch):
    """Crius' replay takes the trace's stage profilings through its agents before the first arrival, so
    the lead must cover registration and profiling. A late attempt's next lead is what it measured of
    both, with a margin; before, it measured registration alone, so with profilings longer than the
    registrations every retry came late again (here the leads grow by only 1.01 per attempt: the old
    rule took 11 attempts and more)."""
    from factories import two_type_toml

    from halyard.traces import adapt_for_crius, generate_synergy_trace

    monkeypatch.setattr(replay_module, "REGISTER_LEAD_WALL_S", 0.001)  # the first attempt is late
    monkeypatch.setattr(replay_module, "LEAD_GROWTH", 1.01)
    toml = two_type_toml(2, 4)
    jobs = adapt_for_crius(generate_synergy_trace(6, rate_per_hour=60, multi_gpu=True, seed=3,
                                                  duration_scale=0.02), seed=0)
    with structlog.testing.capture_logs() as logs:
        run = await replay_module.replay(jobs, parse_cluster(toml), toml, policy="crius", speedup=5000.0)
    late = [e for e in logs if e["event"].startswith("replay: agents registered or profiled late")]
    assert run.summary["completed"] == len(jobs)
    assert late and all(e["profiled_s"] > 0.0 for e in late)
    # Each retry's lead covers what the late attempt measured, registration and profiling, with the margin
    # (the logged figures are rounded to the millisecond).
    margin = replay_module.LEAD_MARGIN
    assert all(e["lead_s"] >= margin * (e["registered_s"] + e["profiled_s"]) - 0.003 for e in late), late
    assert sum(1 for e in logs if e["event"] == STARTED) <= 5, late


class _DiskFailsAfter(replay_module.SqliteStore):
    """A real SQLite store whose disk fails once ``ok`` saves have gone through (the replay's own store)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.ok = 3  # per store, so no run sees another's count

    def save(self, records, events) -> None:
        if self.ok <= 0:
            raise StoreError(f"{self.path}: save failed, nothing was written: disk I/O error")
        self.ok -= 1
        super().save(records, events)


async def test_a_replay_whose_store_fails_stops_with_the_stores_error(monkeypatch, tmp_path):
    """note8 "not mended": the control plane stops taking submissions once its store fails (UNAVAILABLE), and
    replay retried them every 50 ms for ever. It now ends with the store's error and the first job it could
    not submit."""
    monkeypatch.setattr(replay_module, "SqliteStore", _DiskFailsAfter)
    toml = small_cluster_toml(2)
    jobs = [JobSpec(job_id=f"j{i}", submit_time=10.0 * i, model="resnet50", num_gpus=8, iterations=200)
            for i in range(8)]
    refused = r"state store failed \(.*disk I/O error\); job j\d and the \d after it were not submitted"
    with pytest.raises(replay_module.ReplayError, match=refused):
        await asyncio.wait_for(replay_module.replay(jobs, parse_cluster(toml), toml, policy="fifo", speedup=200.0,
                                                    db=tmp_path / "state.db"), 60.0)
