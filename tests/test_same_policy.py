"""Same policy, both worlds: one small trace through process-backend agents and through emulated agents.

The process world runs real training processes (examples/train_numpy.py) on
this machine; the emulated world runs the performance model. Their clocks and
speeds differ, so the check is on the kind of decisions the policy made: the
same placements, preemptions and resource changes, in the same order. The
trace is built so that SRTF's choices do not depend on speeds: a long job
starts, a short one arrives once the long one has made some progress and
preempts it, then the long one resumes from its checkpoint and finishes.
"""

from __future__ import annotations

import json

from worlds import World, train_spec

from halyard.datamodel import EventKind, JobState

LONG, SHORT = 300, 20  # iterations


async def run_trace(world: World) -> list[tuple]:
    # Emulated agents run only jobs without a command (issue 33): the same jobs, their command left out there.
    command = [] if world.backend == "emulated" else None
    await world.submit(train_spec("long", LONG, gpus=16, pace_s=0.005, command=command))  # both nodes: ranks 0, 1
    await world.wait_for(lambda: world.done("long") >= 30)
    await world.submit(train_spec("short", SHORT, gpus=8, command=command))
    await world.wait_for(lambda: world.job("short").state is JobState.COMPLETED)
    await world.wait_for(lambda: world.job("long").state is JobState.COMPLETED)
    return world.decisions


async def test_srtf_makes_the_same_decisions_on_real_processes_and_on_the_model(tmp_path):
    async with World("process", tmp_path / "process", nodes=2, policy="srtf") as real:
        real_decisions = await run_trace(real)
        real_log = [(e.kind, e.job_id) for e in real.cp.core.log]
    # Emulated: the model's resnet50 takes ~0.25 cluster s an iteration; 100x keeps the run short.
    async with World("emulated", tmp_path / "emulated", nodes=2, policy="srtf", speedup=100.0) as model:
        model_decisions = await run_trace(model)
        model_log = [(e.kind, e.job_id) for e in model.cp.core.log]
    assert real_decisions == model_decisions
    assert real_decisions == [("Start", "long", ("r0-n0", "r0-n1")), ("Preempt", "long", ()),
                              ("Start", "short", ("r0-n0",)), ("Start", "long", ("r0-n0", "r0-n1"))]
    assert real_log == model_log
    assert (EventKind.PREEMPTED, "long") in real_log
    # The real long job resumed from the checkpoint its first run wrote.
    summary = json.loads((tmp_path / "process" / "checkpoints" / "long" / "summary.json").read_text())
    assert summary["attempt"] == 2 and summary["started_at"] >= 30
    logs = sorted(p.name for p in (tmp_path / "process" / "logs").glob("long-*"))
    assert logs == ["long-1-r0-n0.log", "long-1-r0-n1.log", "long-2-r0-n0.log", "long-2-r0-n1.log"]
