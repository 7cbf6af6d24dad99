"""Crius keeps its running jobs' Cells and scaling operations from pass to pass (policies/crius.py,
``_RunningCells``): the same schedule as deriving them again from the view at every pass."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from factories import record_plans

from halyard.datamodel import load_cluster
from halyard.emulator import PerformanceModel
from halyard.policies import make_policy
from halyard.scheduling import Simulator

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
try:
    from reproduce_crius import for_policy, window
finally:
    sys.path.pop(0)


def _run(policy_name: str, seed: int, squeeze: float, *, incremental: bool):
    """§8.3's 6-hour Philly window (benchmarks/reproduce_crius.py) on crius-64, arrivals ``squeeze`` x
    closer so that jobs queue: the event log and every pass's actions and reasons."""
    jobs = [dataclasses.replace(j, submit_time=j.submit_time * squeeze) for j in window(seed)]
    policy = make_policy(policy_name)
    policy.incremental = incremental
    sim = Simulator(load_cluster("crius-64"), policy, PerformanceModel())
    plans = record_plans(policy)
    sim.run(for_policy(policy_name, jobs))
    return [(e.seq, repr(e.time), e.job_id, e.kind.name, e.state, e.detail) for e in sim.core.log], plans


@pytest.mark.parametrize(("policy_name", "seed", "squeeze"), [
    ("crius", 0, 0.25), ("crius", 1, 0.1), ("crius-na", 0, 0.25), ("crius-nh", 2, 0.25),
    ("crius-no-suspend", 0, 0.1), ("crius-ddl", 0, 0.25),
])
def test_kept_cells_schedule_as_cells_derived_every_pass(policy_name, seed, squeeze):
    kept_log, kept_plans = _run(policy_name, seed, squeeze, incremental=True)
    fresh_log, fresh_plans = _run(policy_name, seed, squeeze, incremental=False)
    assert kept_log == fresh_log
    assert kept_plans == fresh_plans  # every pass's actions, and every waiting job's reason
    kinds = [kind for _, _, _, kind, _, _ in kept_log]
    # the loads make Algorithm 1 scale running jobs (ScaleResource, line 12) and jobs wait
    assert kinds.count("RESIZED") + kinds.count("MIGRATED") > 0, kinds
    assert sum(bool(reasons) for _, _, reasons in kept_plans) > 10
