"""One scheduling core, one performance model: `simulate` and `replay` make the same schedule.

The issue's rule: the same trace and policy through the in-process simulator
and through the real control plane (gRPC, emulated agents, accelerated clock)
give the same placements in the same order, and average JCT and makespan
within 2%.
"""

from __future__ import annotations

import asyncio

import pytest

from halyard.datamodel import EventKind, parse_cluster
from halyard.emulator import PerformanceModel
from halyard.experiments.replay import replay
from halyard.policies import make_policy
from halyard.scheduling import Simulator, summarize
from halyard.testing.cluster import WAIT_TIMEOUT_S, small_cluster_toml
from halyard.traces import generate_synergy_trace

TOLERANCE = 0.02
SPEEDUP = 5000.0  # 7 h of cluster time in about 6 s


def placements(core) -> list[tuple[str, str]]:
    return [(e.job_id, e.detail) for e in core.log if e.kind is EventKind.STARTED]


def assert_same_schedule(run, sim, expected: dict, jobs: int) -> None:
    """Replay ``run`` finished every job with the simulator's placements, JCT and makespan (within tolerance)."""
    got = run.summary
    assert got["completed"] == expected["completed"] == jobs
    assert placements(run.core) == placements(sim.core)
    assert got["avg_jct_s"] == pytest.approx(expected["avg_jct_s"], rel=TOLERANCE)
    assert got["makespan_s"] == pytest.approx(expected["makespan_s"], rel=TOLERANCE)


# A composed pipeline (no preset) keeps the invariant too.
@pytest.mark.parametrize("policy", ["fifo", "srtf", "ordering=srtf,placement=tiresias-skew"])
async def test_simulate_and_replay_make_the_same_schedule(policy):
    toml = small_cluster_toml(2)
    cluster = parse_cluster(toml)
    jobs = generate_synergy_trace(25, rate_per_hour=20, multi_gpu=True, seed=3, duration_scale=0.05)
    sim = Simulator(cluster, make_policy(policy), PerformanceModel())
    sim.run(jobs)
    expected = summarize(sim.core, policy=policy, trace_jobs=len(jobs), rejected=0, wall_s=1.0)
    run = await replay(jobs, cluster, toml, policy=policy, speedup=SPEEDUP)
    got = run.summary
    assert_same_schedule(run, sim, expected, len(jobs))
    assert got["preemptions"] == expected["preemptions"]
    assert got["speedup_achieved"] > SPEEDUP / 5


@pytest.mark.parametrize(("policy", "duration_scale"), [("synergy-tune:srtf", 0.02), ("synergy-tune:fifo", 0.1)])
async def test_synergy_tune_replays_its_simulation(policy, duration_scale):
    """CPU/memory allocations reach the emulated agents (Reconfigure; data stalls on the model both
    drivers build with ``performance_model_for``): the same schedule and JCTs, at the same high
    speed-up as above: in lockstep the control plane completes jobs on the model's schedule, so a
    Reconfigure that reaches an agent late cannot change it."""
    from halyard.scheduling.timing import performance_model_for

    toml = small_cluster_toml(2)
    cluster = parse_cluster(toml)
    jobs = generate_synergy_trace(16, rate_per_hour=60, split=(60, 30, 10), multi_gpu=True, seed=3,
                                  duration_scale=duration_scale)
    scheduler = make_policy(policy)
    sim = Simulator(cluster, scheduler, performance_model_for(scheduler))
    sim.run(jobs)
    expected = summarize(sim.core, policy=policy, trace_jobs=len(jobs), rejected=0, wall_s=1.0)
    assert any(e.kind is EventKind.RESOURCES for e in sim.core.log)
    run = await replay(jobs, cluster, toml, policy=policy, speedup=SPEEDUP)
    assert_same_schedule(run, sim, expected, len(jobs))


@pytest.mark.parametrize(("policy", "seed"), [("fifo+cassini", 1), ("srtf+cassini", 5), ("fifo+cassini-lock", 1)])
async def test_cassini_replays_its_simulation_with_the_same_shifts(policy, seed):
    """Issue 13, done when: a Cassini preset through `simulate` and `replay` gives the same placements
    and the same time-shifts (job, instant, seconds) in the same order, JCTs within the tolerance."""
    toml = small_cluster_toml(4, gpus_per_node=2)  # 4-GPU jobs span nodes and share their NICs
    cluster = parse_cluster(toml)
    jobs = generate_synergy_trace(20, rate_per_hour=30, multi_gpu=True, seed=seed, duration_scale=0.05)

    def shifts(core) -> list[tuple[float, str, str]]:
        return [(e.time, e.job_id, e.detail) for e in core.log if e.kind is EventKind.TIME_SHIFT]

    sim = Simulator(cluster, make_policy(policy), PerformanceModel())
    sim.run(jobs)
    expected = summarize(sim.core, policy=policy, trace_jobs=len(jobs), rejected=0, wall_s=1.0)
    assert shifts(sim.core)  # multi-node jobs shared NICs and were shifted
    if policy.endswith("-lock"):  # and some were paced on a common period (the agents keep the grid)
        assert any(r.allocation is not None and r.allocation.time_shift_period_s > 0 for r in sim.core.records.values())
    run = await replay(jobs, cluster, toml, policy=policy, speedup=SPEEDUP)
    assert run.summary["completed"] == expected["completed"] == len(jobs)
    assert placements(run.core) == placements(sim.core)
    # Replay's clock reads the trace's own time (src/halyard/experiments/replay.py), so every shift is the
    # simulator's: same job, same instant, same seconds, in the same order -- and there are some.
    assert shifts(run.core) == shifts(sim.core)
    assert run.summary["avg_jct_s"] == pytest.approx(expected["avg_jct_s"], rel=TOLERANCE)


async def test_agents_take_the_control_planes_model_settings():
    """An agent process builds its own performance model; Registered tells it to turn data stalls
    on when the control plane's policy is resource-sensitive (Synergy), so both compute the same."""
    from halyard.agent.emulated import EmulatedAgent
    from halyard.testing import TestCluster

    for policy, stalls in (("synergy-tune:fifo", True), ("fifo", False)):
        async with TestCluster(nodes=2, policy=policy) as tc:
            await tc.stop_agent("r0-n1")
            agent = EmulatedAgent(tc.address, "r0-n1", shared_clock=tc.clock)  # no shared model
            assert agent.perf.data_stalls is False
            agent.start()
            try:
                await asyncio.wait_for(agent.connected.wait(), WAIT_TIMEOUT_S)
                assert agent.perf.data_stalls is stalls
                assert tc.control_plane.perf.data_stalls is stalls
            finally:
                await agent.stop()


def resizes(core) -> list[tuple[str, str]]:
    return [(e.job_id, e.detail) for e in core.log if e.kind is EventKind.RESIZED]


async def test_easyscale_heter_replays_its_simulation():
    """The issue's done-when: EasyScale_heter on its own cluster (easyscale-64) makes the same
    starts and the same resizes (scale-outs granted round by round, EST mappings included) in the
    simulator and through the control plane with emulated agents, at the artifact's 60 s rounds."""
    from dataclasses import replace

    from halyard.datamodel import read_cluster_text
    from halyard.traces import generate_easyscale_trace

    policy = "easyscale-heter"
    toml, _ = read_cluster_text("easyscale-64")
    cluster = parse_cluster(toml)
    perf = PerformanceModel()
    jobs = generate_easyscale_trace(12, rate_per_hour=120, seed=1, duration_scale=0.01)
    jobs = [replace(j, iterations=perf.iterations_for(j, cluster), duration_s=None) for j in jobs]
    assert any(j.logical_workers > 1 for j in jobs)
    sim = Simulator(cluster, make_policy(policy), perf, round_s=60.0)
    sim.run(jobs)
    expected = summarize(sim.core, policy=policy, trace_jobs=len(jobs), rejected=0, wall_s=1.0)
    assert resizes(sim.core)  # jobs did scale out
    run = await replay(jobs, cluster, toml, policy=policy, speedup=SPEEDUP / 20, round_s=60.0)
    got = run.summary
    assert got["completed"] == expected["completed"] == len(jobs)
    assert placements(run.core) == placements(sim.core)
    assert resizes(run.core) == resizes(sim.core)
    assert got["avg_jct_s"] == pytest.approx(expected["avg_jct_s"], rel=TOLERANCE)
    assert got["makespan_s"] == pytest.approx(expected["makespan_s"], rel=TOLERANCE)


async def test_crius_replays_its_simulation():
    """Crius' Cells (stage plans, resizes and moves across GPU types, §6.1) on a heterogeneous
    cluster: simulate and replay make the same starts, resizes and migrations."""
    from factories import two_type_toml

    from halyard.traces import adapt_for_crius

    policy = "crius"
    toml = two_type_toml(2, 4)  # 2 x 4 A40 + 2 x 4 A10
    cluster = parse_cluster(toml)
    jobs = adapt_for_crius(generate_synergy_trace(16, rate_per_hour=60, multi_gpu=True, seed=3,
                                                  duration_scale=0.02), seed=0)
    sim = Simulator(cluster, make_policy(policy), PerformanceModel())
    sim.run(jobs)
    expected = summarize(sim.core, policy=policy, trace_jobs=len(jobs), rejected=0, wall_s=1.0)
    changes = [e for e in sim.core.log if e.kind in (EventKind.RESIZED, EventKind.MIGRATED)]
    assert changes  # the trace exercises ScaleResource, not only starts
    run = await replay(jobs, cluster, toml, policy=policy, speedup=SPEEDUP)
    got = run.summary
    assert got["completed"] == expected["completed"] == len(jobs)
    assert placements(run.core) == placements(sim.core)
    assert ([(e.job_id, e.kind, e.detail) for e in run.core.log if e.kind in (EventKind.RESIZED, EventKind.MIGRATED)]
            == [(e.job_id, e.kind, e.detail) for e in changes])
    assert got["avg_jct_s"] == pytest.approx(expected["avg_jct_s"], rel=TOLERANCE)
    assert got["makespan_s"] == pytest.approx(expected["makespan_s"], rel=TOLERANCE)



async def test_yarn_cs_strict_fifo_replays_its_simulation():
    """EasyScale's baseline on its own cluster and the artifact's job mix: strict FIFO holds jobs behind
    a 32-GPU head in the control plane exactly as in the simulator (same starts, same JCTs)."""
    from dataclasses import replace

    from halyard.datamodel import read_cluster_text
    from halyard.traces import ARTIFACT_DEMAND, generate_easyscale_trace

    policy = "yarn-cs"
    toml, _ = read_cluster_text("easyscale-64")
    cluster = parse_cluster(toml)
    perf = PerformanceModel()
    jobs = generate_easyscale_trace(12, rate_per_hour=120, seed=1, elastic=False, duration_scale=0.01,
                                    demand=ARTIFACT_DEMAND)
    jobs = [replace(j, iterations=perf.iterations_for(j, cluster), duration_s=None) for j in jobs]
    sim = Simulator(cluster, make_policy(policy), perf)
    sim.run(jobs)
    expected = summarize(sim.core, policy=policy, trace_jobs=len(jobs), rejected=0, wall_s=1.0)
    assert max(r.queued_s for r in sim.core.records.values()) > 0  # jobs queue (backfilling would start 5 early)
    run = await replay(jobs, cluster, toml, policy=policy, speedup=SPEEDUP)
    assert_same_schedule(run, sim, expected, len(jobs))


async def test_a_baseline_replays_large_models_with_their_runtime_plans():
    """Crius §8.1: FCFS runs models that fit no single GPU (bert-6.7b, wresnet-4b) with the fastest
    tensor/pipeline plan that fits the GPUs it picked (policies/adaptive.py); the plan travels in the
    allocation, so the emulated agents cost what the simulator costs."""
    from factories import two_type_toml

    from halyard.traces import adapt_for_crius

    policy = "fcfs"
    toml = two_type_toml(2, 4)  # 2 x 4 A40 + 2 x 4 A10
    cluster = parse_cluster(toml)
    jobs = adapt_for_crius(generate_synergy_trace(8, rate_per_hour=60, multi_gpu=True, seed=3, duration_scale=0.02),
                           seed=0, models=("bert-6.7b", "wresnet-4b"), gpu_choices=(4, 8))
    pm = PerformanceModel()
    assert all(not pm.fits_memory(j, t) for j in jobs for t in ("A40", "A10"))
    sim = Simulator(cluster, make_policy(policy), pm)
    sim.run(jobs)
    expected = summarize(sim.core, policy=policy, trace_jobs=len(jobs), rejected=0, wall_s=1.0)
    run = await replay(jobs, cluster, toml, policy=policy, speedup=SPEEDUP)
    got = run.summary
    assert got["completed"] == expected["completed"] == len(jobs)
    assert placements(run.core) == placements(sim.core)
    assert got["avg_jct_s"] == pytest.approx(expected["avg_jct_s"], rel=TOLERANCE)


async def test_cassini_on_the_switched_testbed_replays_its_simulation():
    """Switch-to-switch links travel too: agents parse the same cluster text ([[links]] included) and
    route over the same links, so Th+Cassini on Fig. 4.10's testbed gives the same placements and
    shifts through `replay` as through `simulate`."""
    from halyard.datamodel import read_cluster_text

    policy = "themis+cassini"
    toml, _ = read_cluster_text("cassini-testbed")
    cluster = parse_cluster(toml)
    jobs = [j for j in generate_synergy_trace(60, rate_per_hour=300, multi_gpu=True, seed=1, duration_scale=0.05)
            if 2 <= j.num_gpus <= 12][:16]  # multi-server jobs of Themis' 1-12 workers (Cassini §4.5.1)
    sim = Simulator(cluster, make_policy(policy), PerformanceModel())
    sim.run(jobs)
    expected = summarize(sim.core, policy=policy, trace_jobs=len(jobs), rejected=0, wall_s=1.0)

    def shifted(core) -> list[str]:
        return [e.job_id for e in core.log if e.kind is EventKind.TIME_SHIFT]

    tors = [{part.split("-")[0] for part in detail.split(";")} for _, detail in placements(sim.core)]
    assert shifted(sim.core) and any(len(t) > 1 for t in tors)  # jobs crossed switch links and were shifted
    run = await replay(jobs, cluster, toml, policy=policy, speedup=SPEEDUP)
    assert run.summary["completed"] == expected["completed"] == len(jobs)
    assert placements(run.core) == placements(sim.core)
    assert shifted(run.core) == shifted(sim.core)
    assert run.summary["avg_jct_s"] == pytest.approx(expected["avg_jct_s"], rel=TOLERANCE)
