"""The shortcuts that make the Tiresias rule set matched to SymbioticLab/Tiresias cheaper (issue 38), each held to
its plain computation on the side-by-side harness's own inputs (benchmarks/tiresias_public_perjob.py).

* ``Simulator.skip_quiet_rounds``: after a round whose pass the core skipped as quiet, the next round is pushed
  to the first one at or after the policy's ``quiet_until`` (``SchedulingCore.skipped_until``) instead of
  every round being pushed and skipped one by one: with 1-s rounds (step ``second-rounds``) that was 435,091
  skipped rounds on workload philly-all.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from halyard.datamodel import load_cluster
from halyard.scheduling import Simulator
from halyard.traces import read_trace

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
try:
    import tiresias_public_perjob as harness
finally:
    sys.path.pop(0)

MATCHED = harness.variants()[-1]  # every step on: reference lists, late demotion, 1-s rounds


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The harness's philly-1000 workload (480 Philly-sample jobs on 1 x 16 x 4 GPUs), as it writes it."""
    folder = tmp_path_factory.mktemp("tiresias-public")
    start, jobs, compress, cluster = harness.WORKLOADS["philly-1000"]
    harness.write_inputs(harness.draw(start, jobs, compress), harness.CLUSTER_SPECS[cluster], folder)
    return folder


def simulate(folder: Path, variant: str, *, skip_quiet_rounds: bool = True, rounds_only: bool = False) -> Simulator:
    """The harness's Halyard side of ``variant`` on ``folder``; the simulator, with its run's end as ``end_time``."""
    policy, perf = harness.halyard_policy_and_perf(variant)
    sim = Simulator(load_cluster(str(folder / "cluster.toml")), policy, perf,
                    round_s=1.0 if "second-rounds" in variant.split("+") else 300.0, rounds_only=rounds_only)
    sim.skip_quiet_rounds = skip_quiet_rounds
    sim.end_time = sim.run(list(read_trace(folder / "halyard.csv", strict=True).jobs)).end_time
    return sim


def log_of(sim: Simulator) -> list[tuple[object, ...]]:
    return [(e.seq, e.time, e.job_id, e.kind, e.state, e.detail) for e in sim.core.log]


@pytest.mark.parametrize(("variant", "rounds_only"), [(MATCHED, False), ("tiresias", False), (MATCHED, True)])
def test_rounds_pushed_past_quiet_ones_leave_the_schedule_as_it_was(inputs: Path, variant: str,
                                                                    rounds_only: bool) -> None:
    """The same event log, event for event, with every round pushed and skipped by the core and with the rounds
    the core's ``skipped_until`` vouches for never pushed; the same passes run, and the rounds pushed past are
    counted as the passes the core would have skipped. With 1-s rounds far fewer rounds are pushed (the
    simulator's push count, ``_seq``). With ``rounds_only`` an arrival that falls on a round pushed past is
    still scheduled at that round."""
    fast = simulate(inputs, variant, rounds_only=rounds_only)
    plain = simulate(inputs, variant, skip_quiet_rounds=False, rounds_only=rounds_only)
    assert log_of(fast) == log_of(plain)
    assert fast.end_time == plain.end_time
    assert (fast.core.passes, fast.core.skipped_passes) == (plain.core.passes, plain.core.skipped_passes)
    if variant == MATCHED:
        assert fast._seq < plain._seq / 4
