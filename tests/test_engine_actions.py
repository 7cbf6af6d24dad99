"""Every Plan action kind, issued by a scripted policy and carried out by the engine."""

from __future__ import annotations

import pytest
from factories import job

from halyard.datamodel import Allocation, EventKind, JobState, NodeAllocation
from halyard.policies import ClusterView, PassState, Plan, Policy
from halyard.scheduling import Simulator

ROUND_S = 100.0


def on(node: str, *gpus: int, cpus: int = 3, mem: int = 62_500) -> Allocation:
    return Allocation((NodeAllocation(node, gpus, cpus * len(gpus), mem * len(gpus)),))


class Scripted(Policy):
    """Issues a fixed plan at each round; records the views it saw."""

    name = "scripted"
    needs_rounds = True
    acts_without_pending = True

    def __init__(self, script: dict[float, list]) -> None:
        self.script = script
        self.seen: list[float] = []

    def schedule(self, view: ClusterView, state: PassState) -> Plan:
        self.seen.append(view.now)
        plan = Plan()
        for step in self.script.get(view.now, []):
            step(plan)
        return plan


def test_each_action_through_the_engine(small_cluster, perf):
    a = job(1, job_id="a", iterations=5_000)
    e = job(2, job_id="e", iterations=5_000, min_gpus=1, max_gpus=4)
    policy = Scripted({
        0.0: [lambda p: p.start("a", on("r0-n0", 0)), lambda p: p.start("e", on("r0-n1", 0, 1))],
        100.0: [lambda p: p.migrate("a", on("r1-n0", 3)), lambda p: p.resize("e", on("r0-n1", 0, 1, 2, 3))],
        200.0: [lambda p: p.set_time_shift("a", 0.05), lambda p: p.set_resources("e", "r0-n1", 12, 250_000)],
        300.0: [lambda p: p.preempt("a")],
        400.0: [lambda p: p.start("a", on("r1-n1", 1))],
    })
    sim = Simulator(small_cluster, policy, perf, round_s=ROUND_S)
    sim.run([a, e])
    ra, re = sim.core.records["a"], sim.core.records["e"]
    assert policy.seen[:5] == [0.0, 100.0, 200.0, 300.0, 400.0]
    kinds = [(ev.time, ev.job_id, ev.kind) for ev in sim.core.log if ev.kind is not EventKind.SUBMITTED]
    assert kinds[:9] == [
        (0.0, "a", EventKind.STARTED), (0.0, "e", EventKind.STARTED),
        (100.0, "a", EventKind.MIGRATED), (100.0, "e", EventKind.RESIZED),
        (200.0, "a", EventKind.TIME_SHIFT), (200.0, "e", EventKind.RESOURCES),
        (300.0, "a", EventKind.PREEMPTED), (300.0, "a", EventKind.REQUEUED),
        (400.0, "a", EventKind.STARTED),
    ]
    assert ra.state is re.state is JobState.COMPLETED
    assert (ra.preemptions, ra.restarts) == (1, 2)  # migrate + restart after preemption
    assert re.restarts == 1  # the resize
    assert re.allocation.num_gpus == 4 and re.allocation.nodes[0].cpus == 12
    assert sim.core.free.total_gpus == 16

    # a's timeline: 100 s at full speed, a restore after the migration, run to 300 s,
    # checkpoint (whole iterations), restore again at 400 s, then the rest.
    step = perf.iteration_time(a, on("r0-n0", 0), small_cluster).total_s
    restore = perf.restart_cost_s(a)
    done_at_100 = int(100.0 / step)
    done_at_300 = int(done_at_100 + (300.0 - 100.0 - restore) / step)
    assert ra.end_time == pytest.approx(400.0 + restore + (5_000 - done_at_300) * step)


def test_time_shift_does_not_restart(small_cluster, perf):
    def finish(script: dict[float, list]) -> float:
        sim = Simulator(small_cluster, Scripted(script), perf, round_s=ROUND_S)
        sim.run([job(1, job_id="a", iterations=20_000)])
        return sim.core.records["a"].end_time

    start = [lambda p: p.start("a", on("r0-n0", 0))]
    plain = finish({0.0: start})
    shifted = finish({0.0: start, 100.0: [lambda p: p.set_time_shift("a", 0.1)]})
    migrated = finish({0.0: start, 100.0: [lambda p: p.migrate("a", on("r0-n1", 0))]})
    # v0 models no link sharing, so a shift keeps progress and speed; a migration restores.
    assert shifted == pytest.approx(plain)
    assert migrated > plain
