"""Forecasts from the live state (issue 37): the control plane's core run forward on a fork."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time

import grpc
import pytest
from test_daemon import CLI, cli
from test_failures import free_port

from halyard.cli.client import forecast_line
from halyard.cli.node_spec import parse_node_spec
from halyard.controlplane.auth import TokenFile
from halyard.controlplane.dashboard import queue_view
from halyard.controlplane.forecast import ForecastError, ForecastSettings, forecast_of, in_fork, in_fork_async
from halyard.datamodel import JobState, ValidationError
from halyard.testing import TestCluster
from halyard.testing.cluster import WAIT_TIMEOUT_S, small_cluster_toml
from halyard.v1 import cluster_service_pb2 as cpb
from halyard.v1 import cluster_service_pb2_grpc as cgrpc
from halyard.v1 import job_service_pb2 as jpb
from halyard.v1 import job_service_pb2_grpc as jgrpc
from halyard.v1 import types_pb2 as tpb

pytest_plugins = ["halyard.testing.pytest_plugin"]


def spec(job_id: str, gpus: int = 1, iterations: int = 1000, **kw) -> tpb.JobSpec:
    return tpb.JobSpec(job_id=job_id, model="resnet50", num_gpus=gpus, iterations=iterations, **kw)


def test_a_fork_runs_on_a_copy_and_leaves_this_process_as_it_was():
    state = {"n": 1}

    def change() -> int:
        state["n"] = 99
        return state["n"] * 2

    assert in_fork(change) == 198
    assert state == {"n": 1}


async def test_a_forecast_child_killed_on_shutdown_ends_its_wait_at_once():
    children: set[int] = set()
    waiting = asyncio.ensure_future(in_fork_async(lambda: time.sleep(60), children))
    while not children:
        await asyncio.sleep(0.01)
    started = time.monotonic()
    os.kill(next(iter(children)), signal.SIGKILL)  # what Forecaster.stop does
    with pytest.raises(ForecastError, match="died without an answer"):
        await waiting
    assert time.monotonic() - started < 10 and not children


@pytest.mark.parametrize("halyard_cluster", [{"nodes": 2, "policy": "fifo"}], indirect=True)
async def test_fifo_head_of_queue_starts_when_forecast(halyard_cluster: TestCluster):
    """Under FIFO with no later arrival able to overtake, the forecast start of the head of the queue
    is exact up to the model (issue 37): here it is the actual start to the microsecond."""
    tc = halyard_cluster
    cp = tc.control_plane
    jobs = jgrpc.JobServiceStub(tc.channel)
    await jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec("big", gpus=16, iterations=3000)))
    await tc.wait_for(lambda: tc.job("big").state is JobState.RUNNING)
    await tc.advance(100.0)
    for job_id, gpus, iterations in (("head", 8, 2000), ("next", 16, 1000), ("small", 4, 500)):
        await jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec(job_id, gpus=gpus, iterations=iterations)))
    await tc.wait_for(lambda: len(cp.core.pending) == 3 and cp.last_pass_time >= 100.0)
    forecast = forecast_of(cp.core, cp.pacer, cp.now())
    assert forecast.jobs["big"].start is None  # running: already started
    head = forecast.jobs["head"]
    assert head.start == pytest.approx(tc.job("big").finish_time())
    assert {r.job_id for r in cp.core.pending} == {"head", "next", "small"}  # the live core is untouched
    # Step the manual clock to each forecast instant and let the control plane act there before moving on.
    f = forecast.jobs
    for t, running in ((head.start, ("head", "small")), (f["head"].finish, ("next",))):
        await tc.advance(t - tc.now())
        await tc.wait_for(lambda running=running: all(tc.job(j).state is JobState.RUNNING for j in running))
    await tc.advance(f["next"].finish + 1.0 - tc.now())
    await tc.wait_for(lambda: all(tc.job(j).state is JobState.COMPLETED for j in ("head", "next", "small")))
    for job_id in ("head", "next", "small"):
        assert tc.job(job_id).first_start == pytest.approx(f[job_id].start, abs=1e-6), job_id
        assert tc.job(job_id).end_time == pytest.approx(f[job_id].finish, abs=1e-6), job_id


async def _queue(tc: TestCluster, jobs: jgrpc.JobServiceStub, metadata=()) -> None:
    """One 16-GPU job running on the two nodes and three waiting behind it."""
    await jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec("big", gpus=16, iterations=3000)), metadata=metadata)
    await tc.wait_for(lambda: tc.job("big").state is JobState.RUNNING)
    for job_id, gpus, iterations in (("head", 8, 2000), ("next", 16, 1000), ("small", 4, 500)):
        await jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec(job_id, gpus=gpus, iterations=iterations)),
                             metadata=metadata)
    cp = tc.control_plane
    await tc.wait_for(lambda: len(cp.core.pending) == 3)


async def test_get_and_list_jobs_carry_the_forecast_and_its_error_is_measured():
    async with TestCluster(nodes=2, policy="fifo", forecast=ForecastSettings(period_s=0)) as tc:
        jobs = jgrpc.JobServiceStub(tc.channel)
        await _queue(tc, jobs)
        first = await jobs.GetJob(jpb.GetJobRequest(job_id="head"))  # asks for a forecast on demand
        assert not first.HasField("forecast")
        forecasts = tc.server.forecasts
        await tc.wait_for(lambda: forecasts.latest is not None and forecasts.latest["small"] is not None)
        head = await jobs.GetJob(jpb.GetJobRequest(job_id="head"))
        big_finish = tc.job("big").finish_time()
        assert head.forecast.expected_start == pytest.approx(big_finish)
        assert head.forecast.made_at == pytest.approx(tc.now())
        assert head.forecast.assumes == "no new arrivals" and not head.forecast.HasField("start_p10")
        wall = head.forecast.expected_start_unix - head.forecast.made_at_unix  # a manual clock maps 1:1
        assert wall == pytest.approx(big_finish - tc.now(), abs=5.0)
        listed = await jobs.ListJobs(jpb.ListJobsRequest())
        by_id = {j.spec.job_id: j for j in listed.jobs}
        assert not by_id["big"].forecast.HasField("expected_start")  # running: only its finish
        assert by_id["big"].forecast.expected_finish == pytest.approx(big_finish)
        assert by_id["next"].forecast.expected_start == pytest.approx(head.forecast.expected_finish)
        assert queue_view(tc.control_plane)["jobs"][0]["expected_start"] == pytest.approx(big_finish)  # dashboard
        line = forecast_line(head.forecast, head.forecast.made_at_unix + 20.0)
        assert line.startswith("expected to start in about ") and line.endswith("forecast made 20 s ago "
                                                                                 "(no new arrivals)")
        await tc.advance(big_finish - tc.now())
        await tc.wait_for(lambda: tc.job("head").state is JobState.RUNNING)
        scraped = tc.server.metrics.render().decode()
        assert "halyard_forecast_start_error_seconds_count 2.0" in scraped  # head and small started
        assert 'halyard_forecast_start_error_seconds_bucket{le="0.0"} 2.0' in scraped  # exactly when forecast


async def test_sampled_arrivals_give_a_band_around_the_forecast():
    settings = ForecastSettings(period_s=0, samples=4)
    async with TestCluster(nodes=2, policy="fifo", forecast=settings) as tc:
        jobs = jgrpc.JobServiceStub(tc.channel)
        await _queue(tc, jobs)
        forecast = await tc.server.forecasts.refresh()
        nxt = forecast.jobs["next"]
        assert forecast.samples == 4 and nxt.start_band is not None
        # FIFO: later arrivals queue behind; the band holds the no-arrival forecast (equal at p10)
        low, middle, high = nxt.start_band
        assert low == pytest.approx(nxt.start) and low <= middle <= high
        got = await jgrpc.JobServiceStub(tc.channel).GetJob(jpb.GetJobRequest(job_id="next"))
        assert (got.forecast.start_p10, got.forecast.start_p50, got.forecast.start_p90) == pytest.approx(
            (low, middle, high))


async def test_what_if_over_grpc_for_operators_only(tmp_path):
    tokens = TokenFile(tmp_path / "tokens.json")
    ops, _ = tokens.create("ops", "operator")
    alice, _ = tokens.create("alice", "tenant-user", "team-a")
    as_ops = (("authorization", f"Bearer {ops}"),)
    async with TestCluster(nodes=2, policy="fifo", tokens=tokens.path,
                           forecast=ForecastSettings(period_s=0)) as tc:
        jobs, cluster = jgrpc.JobServiceStub(tc.channel), cgrpc.ClusterServiceStub(tc.channel)
        await _queue(tc, jobs, as_ops)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await cluster.WhatIf(cpb.WhatIfRequest(drain=["r0-n1"]), metadata=(("authorization", f"Bearer {alice}"),))
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await cluster.WhatIf(cpb.WhatIfRequest(drain=["nowhere"]), metadata=as_ops)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "nowhere" in err.value.details()
        drained = await cluster.WhatIf(cpb.WhatIfRequest(drain=["r0-n1"]), metadata=as_ops)
        assert drained.change == "draining r0-n1" and drained.today.policy == drained.changed.policy == "fifo"
        # One 8-GPU node left: "next" (16 GPUs) never fits, so it does not end in the horizon.
        assert drained.today.unfinished == 0 and drained.changed.unfinished == 1
        assert drained.moves[0].job_id == "next" and not drained.moves[0].HasField("start_changed")
        cancelled = await cluster.WhatIf(cpb.WhatIfRequest(cancel=["head"]), metadata=as_ops)
        assert cancelled.changed.jobs == cancelled.today.jobs == 3  # big, next, small
        assert cancelled.changed.avg_wait_s < cancelled.today.avg_wait_s
        assert cancelled.moves[0].job_id == "next" and cancelled.moves[0].start_changed < cancelled.moves[0].start_today
        switched = await cluster.WhatIf(cpb.WhatIfRequest(policy="tiresias"), metadata=as_ops)
        assert (switched.today.policy, switched.changed.policy) == ("fifo", "tiresias")
        assert switched.changed.unfinished == 0
        assert {r.job_id for r in tc.control_plane.core.pending} == {"head", "next", "small"}  # nothing changed
        assert not tc.control_plane.drained


async def test_what_if_adds_a_node_over_grpc():
    """``--add-node``: a copy of the cluster with one more node, run forward (issue 37, what-if)."""
    async with TestCluster(nodes=2, policy="fifo", forecast=ForecastSettings(period_s=0)) as tc:
        jobs, cluster = jgrpc.JobServiceStub(tc.channel), cgrpc.ClusterServiceStub(tc.channel)
        await _queue(tc, jobs)
        now = tc.now()
        # A node like r0's first (8 V100): "head" (8 GPUs) starts on it at once, "small" (4) beside it.
        added = await cluster.WhatIf(cpb.WhatIfRequest(add_node=[tpb.NodeSpec(rack="r0")]))
        assert added.change == "adding r0-n2 (8 V100)"
        assert added.today.policy == added.changed.policy == "fifo"
        moved = {m.job_id: m for m in added.moves}
        assert moved["head"].start_changed == pytest.approx(now) and moved["head"].start_today > now
        assert added.changed.avg_wait_s < added.today.avg_wait_s
        # Two 8-GPU A100 nodes named by the caller (the rest as r0's first).
        bigger = await cluster.WhatIf(cpb.WhatIfRequest(add_node=[
            tpb.NodeSpec(rack="r0", name=f"new-{i}", gpu_type="A100") for i in range(2)]))
        assert bigger.change == "adding new-0 (8 A100), new-1 (8 A100)"
        assert {m.job_id: m for m in bigger.moves}["head"].start_changed == pytest.approx(now)
        for node, field, says in ((tpb.NodeSpec(rack="r9"), "add_node[0].rack", "no rack 'r9'"),
                                  (tpb.NodeSpec(gpu_type="Z999"), "add_node[0].gpu_type", "unknown GPU type 'Z999'"),
                                  (tpb.NodeSpec(name="r0-n1"), "add_node[0].name", "already a node"),
                                  (tpb.NodeSpec(fabric="carrier-pigeon"), "add_node[0].fabric", "unknown fabric"),
                                  (tpb.NodeSpec(gpus=100_000), "add_node[0].gpus", "between 1 and 64")):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await cluster.WhatIf(cpb.WhatIfRequest(add_node=[node]))
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, field
            assert field in err.value.details() and says in err.value.details(), err.value.details()
        assert len(tc.control_plane.cluster.nodes) == 2 and len(tc.control_plane.core.pending) == 3  # untouched


def test_the_daemon_forecasts_and_answers_what_if(tmp_path):
    """Issue 37's "done when": `halyard job ID` on a running control plane with a queued job shows a
    forecast, and `halyard whatif` answers on the live cluster (processes, the CLI, real gRPC)."""
    cluster = tmp_path / "c.toml"
    cluster.write_text(small_cluster_toml(1), encoding="utf-8")
    target = f"127.0.0.1:{free_port()}"
    cp = subprocess.Popen([*CLI, "controlplane", "--cluster", str(cluster), "--db", str(tmp_path / "s.db"),
                           "--listen", target, "--speedup", "1", "--insecure", "--forecast-period-s", "0.2"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    agent = subprocess.Popen([*CLI, "agent", "--control-plane", target, "--node", "r0-n0", "--insecure"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert cp.stdout.readline().decode().startswith("listening on")
        deadline = time.monotonic() + WAIT_TIMEOUT_S
        for job_id in ("j1", "j2"):  # one runs on the node's 8 GPUs, the other waits for them
            while (sub := cli("submit", "--control-plane", target, "--id", job_id, "--model", "resnet50",
                              "--gpus", "8", "--iterations", "200000")).returncode != 0:
                assert time.monotonic() < deadline, sub.stderr  # the agent may not have registered yet
                time.sleep(0.2)
        while "forecast:" not in (shown := cli("job", "--control-plane", target, "j2").stdout):
            assert time.monotonic() < deadline, shown
            time.sleep(0.2)
        (line,) = [x for x in shown.splitlines() if x.startswith("forecast:")]
        assert "expected to start in about" in line and "UTC), finish around" in line, line
        assert "(no new arrivals)" in line, line
        whatif = cli("whatif", "--control-plane", target, "--cancel", "j1")
        assert whatif.returncode == 0, whatif.stderr
        assert "cancelling j1: avg wait" in whatif.stdout and "j2 starts" in whatif.stdout, whatif.stdout
        grown = cli("whatif", "--control-plane", target, "--add-node", "rack=r0,gpus=8,memory_gb=1000")
        assert grown.returncode == 0, grown.stderr
        assert "adding r0-n1 (8 V100): avg wait" in grown.stdout and "j2 starts" in grown.stdout, grown.stdout
        wrong = cli("whatif", "--control-plane", target, "--add-node", "rack=r0,gpu=A100")
        assert wrong.returncode != 0 and "unknown key 'gpu'" in wrong.stderr and "gpu_type" in wrong.stderr, wrong
    finally:
        agent.terminate()
        cp.send_signal(signal.SIGTERM)
        assert cp.wait(timeout=15) == 0
        agent.wait(timeout=15)


def test_add_node_spec_is_the_cluster_files_words_and_errors_name_what_is_wrong():
    (one,) = parse_node_spec("rack=r3, gpu_type=A100, gpus=8, memory_gb=1000, nic_gbit_s=200, fabric=nvswitch")
    assert (one.rack, one.gpu_type, one.gpus, one.memory_mb, one.nic_gbyte_s, one.fabric) == (
        "r3", "A100", 8, 1_000_000, 25.0, "nvswitch")
    assert one.name == "" and one.cpus == 0  # left to the control plane: the rack's first node's
    assert [n.name for n in parse_node_spec("rack=r3,count=3,name=x{i}")] == ["x0", "x1", "x2"]
    for spec, says in (("gpu=A100", "unknown key 'gpu'"), ("gpus=eight", "gpus must be a whole number"),
                       ("gpus=-8", "gpus must be positive"), ("rack", "expected KEY=VALUE"),
                       ("rack=r1,rack=r2", "rack given twice"), ("", "is empty"),
                       ("count=2,name=x", "must contain {i}"), ("memory_gb=nan", "must be positive")):
        with pytest.raises(ValidationError, match=re.escape(says)) as err:
            parse_node_spec(spec)
        assert err.value.field == "--add-node"


def test_importing_halyard_turns_grpc_fork_support_off_unless_grpc_came_first():
    """Forecasts fork the control plane; with gRPC's fork support on (grpcio 1.85 measured) its fork
    handlers skip or abort while other threads call into gRPC, and forecast children die without an
    answer. So importing halyard first turns it off; gRPC imported before halyard cannot be fixed."""
    env = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    show = "import os, halyard; print(os.environ.get('GRPC_ENABLE_FORK_SUPPORT'), halyard.GRPC_FORK_SAFE)"
    first = subprocess.run([sys.executable, "-c", show], env=env, capture_output=True, text=True, check=True)
    assert first.stdout.split() == ["false", "True"]
    late = subprocess.run([sys.executable, "-c", "import grpc; " + show], env=env, capture_output=True, text=True,
                          check=True)
    assert late.stdout.split() == ["None", "False"]
    chosen = subprocess.run([sys.executable, "-c", show], env=env | {"GRPC_ENABLE_FORK_SUPPORT": "1"},
                            capture_output=True, text=True, check=True)
    assert chosen.stdout.split() == ["1", "False"]  # the user's choice stands; the server then forecasts nothing


async def test_replay_forecasts_read_over_grpc_are_the_actual_starts_under_fifo():
    """Issue 37, item 5's path: ``halyard replay``'s control plane (lockstep, real gRPC, emulated agents)
    makes the forecast, read back over gRPC; with every job in and FIFO, each waiting job starts when
    forecast. In lockstep the snapshot is the instant the core reached (Forecaster.instant), so a clock
    that ran ahead of it costs nothing."""
    from halyard.clock import ScaledClock
    from halyard.controlplane.server import ControlPlaneServer
    from halyard.datamodel import JobSpec, parse_cluster
    from halyard.experiments.replay import replay

    toml = small_cluster_toml(2)
    trace = [JobSpec(job_id=job_id, submit_time=t, model="resnet50", num_gpus=gpus, iterations=iterations)
             for job_id, t, gpus, iterations in (("big", 0.0, 16, 3000), ("head", 10.0, 8, 2000),
                                                 ("next", 20.0, 16, 1000), ("small", 30.0, 4, 500))]
    read: dict[str, float] = {}

    async def watch(server: ControlPlaneServer, clock: ScaledClock) -> None:
        await clock.sleep_until(40.0)  # every job is in
        await server.forecasts.refresh()
        async with grpc.aio.insecure_channel(server.address) as channel:
            listed = await jgrpc.JobServiceStub(channel).ListJobs(jpb.ListJobsRequest(states=[tpb.PENDING]))
        read.update((j.spec.job_id, j.forecast.expected_start) for j in listed.jobs
                    if j.forecast.HasField("expected_start"))

    run = await replay(trace, parse_cluster(toml), toml, policy="fifo", speedup=200.0,
                       forecast=ForecastSettings(period_s=0), watch=watch)
    assert set(read) == {"head", "next", "small"}  # "big" holds all 16 GPUs: the other three wait
    for job_id, start in read.items():
        assert run.core.records[job_id].first_start == pytest.approx(start, abs=1e-6), job_id


def _sampled_under_overload(policy: str, sample_horizon_s: float | None) -> None:
    """Sampled arrivals at a burst rate above what one 8-GPU node serves (40 one-GPU jobs in an hour,
    half of them about 2 h long): each sampled run ends, draws no arrival after the last present
    job's start (later ones move no start) nor past :func:`arrival_limit`, and its band holds the
    no-arrival forecast where it must."""
    from halyard.controlplane.forecast import arrival_limit, recent_specs, run_forward, sampled_arrivals, sampled_runs
    from halyard.datamodel import JobSpec, parse_cluster
    from halyard.policies import make_policy
    from halyard.scheduling import Simulator

    sim = Simulator(parse_cluster(small_cluster_toml(1)), make_policy(policy))
    core, pacer = sim.core, sim.pool.pacer
    jobs = [JobSpec(job_id=f"j{i}", submit_time=i * 90.0, model="resnet50", num_gpus=1,
                    iterations=2600 if i % 2 else 31000) for i in range(40)]
    checked: list[float] = []

    def check(_finished: int, _known: int, now: float) -> None:
        if checked or now < 3600.0 or len(core.pending) < 5:
            return
        checked.append(now)
        base = in_fork(lambda: run_forward(core, pacer, now))
        until = arrival_limit(base, now, sample_horizon_s)
        assert until == (now + sample_horizon_s if sample_horizon_s else max(base.starts.values()))
        mix, rate = recent_specs(core, now)
        assert rate * 3600.0 > 20.0  # the burst: far above the ~4 long jobs an hour the node serves
        for until_started in (True, False):
            runs = sampled_runs(core, pacer, now, base, 4, sample_horizon_s=sample_horizon_s,
                                until_started=until_started)
            for k, run in enumerate(runs):
                assert set(run.starts) == set(base.starts)  # every present job started: the run ended
                last_start = max(run.starts.values())
                drawn = [a.submit_time for a in sampled_arrivals(mix, rate, now, k, until)]
                assert run.arrived == sum(a <= last_start for a in drawn) > 0
                if until_started:
                    assert run.end_time == last_start  # starts only: it stops at the last present start
                else:
                    assert set(run.finishes) == set(base.finishes) and run.end_time == max(run.finishes.values())
                for job_id, start in base.starts.items():
                    if policy == "fifo":  # later arrivals queue behind: no start moves, the band is the forecast
                        assert run.starts[job_id] == start, job_id
                    else:  # one-GPU jobs on one node: more competition can only start a job later
                        assert run.starts[job_id] >= start, job_id
            if policy == "srtf":  # shorter arrivals overtake: some present job starts later than forecast
                assert any(r.starts[j] > s for r in runs for j, s in base.starts.items())

    sim.run(jobs, on_progress=check)
    assert checked


@pytest.mark.parametrize(("policy", "sample_horizon_s"), [("fifo", None), ("srtf", None), ("srtf", 86400.0)])
def test_sampled_arrivals_stop_once_every_present_job_started_so_an_overloaded_run_ends(policy, sample_horizon_s):
    _sampled_under_overload(policy, sample_horizon_s)
