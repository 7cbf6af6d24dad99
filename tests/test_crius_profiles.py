"""Crius' agile estimation from the Profile / ProfileResult exchange (papers/crius-cell-scheduling.txt
§5.1, §6.1, §8.2): the same two profilings per Cell in simulation (the performance model) and on a
live control plane (agents over real gRPC), assembled by the same code into the same estimates."""

from __future__ import annotations

from dataclasses import replace

import pytest
from factories import two_type_toml
from policy_fakes import FakeJob, view_of

from halyard.controlplane.profiling import AgentProfiles
from halyard.datamodel import Allocation, EventKind, JobSpec, JobState, StagePlan, parse_cluster
from halyard.emulator import PerformanceModel
from halyard.experiments.replay import replay
from halyard.policies import PassState, make_policy
from halyard.policies.crius import (
    Cell,
    Crius,
    cell_allocation,
    estimate_cell,
    estimation_accuracy,
    job_cells,
    tuned_cell,
)
from halyard.policies.crius_profiles import ModelProfiles, ProfileRequest, cell_accuracy, profilings
from halyard.scheduling import Simulator
from halyard.testing.cluster import TestCluster
from halyard.traces import adapt_for_crius, generate_synergy_trace

SPEC = JobSpec("p", 0.0, "bert-large", 4, iterations=200, min_gpus=2, max_gpus=8)
TOML = two_type_toml(1, 8)  # r0-a40-0 (8 x A40), r0-a10-1 (8 x A10)


def test_two_profilings_assemble_to_what_running_the_plan_costs():
    """§5.1 Fig. 9: the 2^S plans of a Cell are costed from its DP-only and TP-only profilings alone;
    each assembled plan's time is the model's time of running it, and its memory verdict the same."""
    pm, cluster = PerformanceModel(), parse_cluster(TOML)
    v = view_of(cluster, 0.0, [], [], perf=pm)
    base = cell_allocation(v, "A40", 8)
    dp_req, tp_req = profilings(SPEC, "A40", base, [2, 2, 2, 2])
    assert [s.tensor for s in dp_req.allocation.stages] == [1] * 4
    assert [s.data for s in tp_req.allocation.stages] == [1] * 4
    dp, tp = pm.profile_stages(SPEC, dp_req.allocation, cluster), pm.profile_stages(SPEC, tp_req.allocation, cluster)
    mixed = (StagePlan(2, data=1, tensor=2), StagePlan(2, data=2, tensor=1), StagePlan(2, data=2, tensor=1),
             StagePlan(2, data=1, tensor=2))
    stages = (tp[0], dp[1], dp[2], tp[3])
    alloc = Allocation(base.nodes, stages=mixed)
    assert pm.assembled_iteration_s(SPEC, stages) == pm.job_timing(SPEC, alloc, cluster).iteration.total_s
    assert all(s.fits for s in stages) == pm.fits_plan(SPEC, alloc, cluster)
    assert tp[0].tensor_comm_s > 0.0 == dp[0].tensor_comm_s and dp[0].allreduce_s > 0.0
    assert dp[0].recv_s == 0.0 < dp[1].recv_s  # the first stage receives from no one


async def test_emulated_agents_answer_each_profiling_with_the_models_figures():
    """On a live control plane every profiling of a job's Cells is a Profile sent over a real gRPC
    stream to an agent of the Cell's GPU type; the answers equal the simulator's exactly, so the
    estimates and §8.2's accuracy from the exchanged profiles are the simulator's."""
    async with TestCluster(policy="crius", cluster_toml=TOML) as tc:
        cp = tc.control_plane
        requests = cp.core.policy.profile_requests(SPEC, cp.core.facts)
        assert {r.gpu_type for r in requests} == {"A40", "A10"} and len(requests) == len({r.key for r in requests})
        await cp.profiles.fetch(requests)
        assert cp.profiles.exchanged == len(requests) and not cp.profiles.errors
        model = ModelProfiles(cp.perf, cp.cluster)
        for r in requests:
            assert cp.profiles.cached(r) == model.stage_profiles(r)
        live = replace(view_of(cp.cluster, 0.0, [], [], perf=cp.perf), profiles=cp.profiles)
        sim = view_of(cp.cluster, 0.0, [], [], perf=cp.perf)
        assert job_cells(live, SPEC) == job_cells(sim, SPEC) and job_cells(live, SPEC)
        cell = Cell("A10", 8, 2)
        te, td = estimate_cell(live, SPEC, cell), tuned_cell(live, SPEC, cell)
        accuracy = cell_accuracy(live, SPEC, cell)
        assert accuracy == 1.0 - abs(te.iteration_s - td.iteration_s) / td.iteration_s  # §8.2
        assert accuracy == estimation_accuracy(te.iteration_s, td.iteration_s) == cell_accuracy(sim, SPEC, cell)
        assert 0.0 < accuracy <= 1.0 and te.iteration_s >= td.iteration_s  # the tuner searches a superset


async def test_a_profiling_the_agent_cannot_answer_says_why_and_leaves_the_cell_out():
    """An agent that cannot profile answers with an error naming itself and the reason (here a request
    with no stage plan); the control plane records it and the estimator treats it as unavailable."""
    async with TestCluster(policy="crius", cluster_toml=TOML) as tc:
        cp = tc.control_plane
        base = cell_allocation(view_of(cp.cluster, 0.0, [], [], perf=cp.perf), "A10", 4)
        bad = ProfileRequest(SPEC, "A10", base)  # no stages: not a stage profiling
        await cp.profiles.fetch([bad])
        assert cp.profiles.stage_profiles(bad) is None
        assert cp.profiles.errors[bad.key] == ("node r0-a10-1's agent (backend emulated) cannot profile: "
                                               "profile.allocation has no stages to profile")


async def test_a_pass_that_misses_profiles_waits_for_them_and_the_answers_run_the_next_pass():
    """A job submitted without its profilings (as after a restart): Crius waits with a reason instead of
    guessing, the profilings it missed are asked of the agents, and their answers start the job."""
    async with TestCluster(policy="crius", cluster_toml=TOML) as tc:
        cp = tc.control_plane
        fresh = AgentProfiles(cp)
        pending = FakeJob(SPEC)
        v = replace(view_of(cp.cluster, 0.0, [], [pending], perf=cp.perf), profiles=fresh)
        plan = Crius().schedule(v, PassState())
        assert not plan.actions
        assert "waiting for Cell profiles from the agents (bert-large on" in str(plan.unplaced["p"])
        cp.submit(replace(SPEC, submit_time=tc.now()))  # straight to the core: no prefetch
        await tc.wait_for(lambda: tc.job("p").state is JobState.RUNNING)
        assert cp.profiles.exchanged == len(cp.core.policy.profile_requests(SPEC, cp.core.facts))


@pytest.mark.parametrize("policy", ["crius"])
async def test_replay_exchanges_profiles_and_schedules_what_simulate_does(policy):
    """Replay's Crius estimates from ProfileResults of its emulated agents; profiling adds no event, so
    the event log is the simulator's (kinds, jobs and placements, in order)."""
    toml = two_type_toml(2, 4)
    cluster = parse_cluster(toml)
    jobs = adapt_for_crius(generate_synergy_trace(6, rate_per_hour=60, multi_gpu=True, seed=3,
                                                  duration_scale=0.02), seed=0)
    sim = Simulator(cluster, make_policy(policy), PerformanceModel())
    sim.run(jobs)
    run = await replay(jobs, cluster, toml, policy=policy, speedup=5000.0)
    assert run.core.profiles.exchanged > 0 and not run.core.profiles.errors
    assert [(e.job_id, e.kind, e.detail) for e in run.core.log] == [(e.job_id, e.kind, e.detail) for e in sim.core.log]
    assert all(e.kind is not EventKind.PREEMPTED for e in run.core.log)


async def test_the_gpu_backend_says_it_cannot_profile_stages(tmp_path):
    """§5.1's single-device profiling compiles a Cell's stages as they run distributed (Alpa); the gpu
    backend runs no such compiler, so it answers every Profile with an error saying so."""
    import asyncio

    from test_gpu_backend import FakeNvml

    from halyard.agent.gpu import GpuAgent
    from halyard.v1 import agent_service_pb2 as apb
    from halyard.wire import spec_to_pb

    agent = GpuAgent("127.0.0.1:1", "gpu-node", work_dir=tmp_path, nvml=FakeNvml())
    agent._outbox = asyncio.Queue()  # as once connected: what it sends lands here
    agent.on_profile(apb.Profile(job_id="p", spec=spec_to_pb(SPEC), request_id=7))
    answer = agent._outbox.get_nowait().profile_result
    assert answer.request_id == 7 and not answer.stages
    assert answer.error.startswith("node gpu-node's agent (backend gpu) cannot profile: stage profiling on real "
                                   "GPUs needs a compiler of distributed-equivalent stages")


def test_a_refused_profiling_is_not_remembered_as_an_infeasible_cell():
    """A Cell left out because its profiling was refused (an agent could not answer) is estimated
    once a source answers: the refusal is not memoised as "no plan fits" for the life of the facts."""
    pm, cluster = PerformanceModel(), parse_cluster(TOML)

    class RefusesOnce:
        def __init__(self) -> None:
            self.model, self.refused = ModelProfiles(pm, cluster), 0

        def stage_profiles(self, request: ProfileRequest):
            if self.refused < 2:  # the Cell's two profilings
                self.refused += 1
                return None
            return self.model.stage_profiles(request)

    v = replace(view_of(cluster, 0.0, [], [], perf=pm), profiles=RefusesOnce())
    cell = Cell("A40", 8, 4)
    assert estimate_cell(v, SPEC, cell) is None
    again = estimate_cell(v, SPEC, cell)
    plain = estimate_cell(view_of(cluster, 0.0, [], [], perf=pm), SPEC, cell)
    assert again is not None and plain is not None and again.iteration_s == plain.iteration_s


async def test_a_profiling_no_agent_answers_is_refused_for_a_while_then_asked_again():
    """No answering agent of the Cell's type (here the only A10 agent is held silent by the lost-agent
    guard) refuses the profiling, so the policy leaves the Cell out instead of waiting on it forever;
    after PROFILE_RETRY_S it is asked again and the agent, heard from again, answers."""
    from halyard.policies.crius_profiles import ProfilesPending

    async with TestCluster(policy="crius", cluster_toml=TOML) as tc:
        cp = tc.control_plane
        base = cell_allocation(view_of(cp.cluster, 0.0, [], [], perf=cp.perf), "A10", 4)
        request, _ = profilings(SPEC, "A10", base, [4])
        cp.sessions["r0-a10-1"].silent = True
        await cp.profiles.fetch([request])
        assert cp.profiles.stage_profiles(request) is None
        assert cp.profiles.errors[request.key] == "no agent of GPU type A10 answered (none connected)"
        cp.sessions["r0-a10-1"].silent = False
        await cp.profiles.fetch([request])  # still refused until its retry time
        assert cp.profiles.stage_profiles(request) is None
        cp.profiles._retry_at[request.key] = 0.0  # its retry time has come
        with pytest.raises(ProfilesPending):
            cp.profiles.stage_profiles(request)
        await cp.profiles.fetch([request])
        assert cp.profiles.stage_profiles(request) == ModelProfiles(cp.perf, cp.cluster).stage_profiles(request)


class _FailsOnceProfiled(Crius):
    """Crius with a bug that shows only once a job's profilings are in and it can start (a fault injected
    into the policy; the control plane, the gRPC streams and the agents' profiling are the real ones)."""

    def _schedule(self, view, state):
        plan = super()._schedule(view, state)  # the job waits while its profilings are awaited
        if plan.actions:
            raise RuntimeError("policy bug once profiled")
        return plan


async def _lockstep_cluster(policy, toml: str):
    """A replay-style control plane (lockstep, accelerated clock) with one emulated agent per node over
    real gRPC, all registered; returns (control plane, server, agents)."""
    import asyncio

    from halyard.agent.cluster_copy import ClusterCopy
    from halyard.agent.emulated import EmulatedAgent
    from halyard.clock import ScaledClock
    from halyard.controlplane.server import ControlPlaneServer
    from halyard.controlplane.service import ControlPlane
    from halyard.controlplane.store import SqliteStore
    from halyard.scheduling.timing import performance_model_for

    cluster = parse_cluster(toml)
    perf = performance_model_for(policy)
    cp = ControlPlane(cluster, policy, perf, ScaledClock(100.0), SqliteStore(":memory:"), cluster_toml=toml,
                      lockstep=True)
    server = ControlPlaneServer(cp, listen="127.0.0.1:0")
    await server.start()
    copy = ClusterCopy(cluster, toml, cp.cluster_digest)
    agents = [EmulatedAgent(server.address, node, perf=perf, cluster=copy) for node in cluster.nodes]
    for agent in agents:
        agent.start()
    for _ in range(2000):
        if len(cp.sessions) == len(cluster.nodes):
            break
        await asyncio.sleep(0.005)
    assert len(cp.sessions) == len(cluster.nodes)
    return cp, server, agents


async def test_a_failed_pass_after_profilings_arrive_is_said_on_healthz():
    """In lockstep (replay) the pass that the arrival of missed profilings runs is not the scheduling
    loop's, so a policy failure there was only logged; it now sets ``pass_error``, which /healthz says."""
    import asyncio

    cp, server, agents = await _lockstep_cluster(_FailsOnceProfiled(), TOML)
    try:
        cp.submit(replace(SPEC, submit_time=cp.now()))  # straight to the core: no prefetch, the pass misses
        assert cp.pass_error is None and cp.scheduler_problem() is None
        wanted = len(cp.core.policy.profile_requests(SPEC, cp.core.facts))
        for _ in range(2000):
            if cp.profiles.exchanged >= wanted and cp.pass_error is not None:
                break
            await asyncio.sleep(0.005)
        assert cp.profiles.exchanged >= wanted
        assert cp.scheduler_problem() == "the last scheduling pass failed: RuntimeError: policy bug once profiled"
    finally:
        for agent in agents:
            await agent.stop()
        await server.stop()


async def test_a_job_whose_profilings_are_asked_does_not_hold_up_the_others():
    """A pass that misses one job's profilings (its Profile requests go out after the pass) schedules
    every other job at once: only that job waits. Before, the whole pass waited, so a job whose Cells
    were all profiled started only once the other job's profilings were answered (up to
    PROFILE_ANSWER_S per agent of a type)."""
    async with TestCluster(policy="crius", cluster_toml=TOML) as tc:
        cp = tc.control_plane
        y_spec = replace(SPEC, job_id="y")
        x_spec = JobSpec("x", 0.0, "bert-large", 2, iterations=200, min_gpus=1, max_gpus=4)
        await cp.profiles.fetch(cp.core.policy.profile_requests(y_spec, cp.core.facts))
        x_requests = cp.core.policy.profile_requests(x_spec, cp.core.facts)
        assert x_requests and not any(cp.profiles.answered(r) for r in x_requests)
        profiled_at_start: dict[str, bool] = {}  # job -> whether x's profilings were in when it started
        cp.on_action = lambda a: profiled_at_start.setdefault(
            a.job_id, all(cp.profiles.answered(r) for r in x_requests))
        now = tc.now()
        cp.submit(replace(x_spec, submit_time=now))  # first in arrival order, not profiled
        cp.submit(replace(y_spec, submit_time=now))
        await tc.wait_for(lambda: all(tc.job(j).state is JobState.RUNNING for j in "xy"), timeout=10)
        assert profiled_at_start == {"y": False, "x": True}
