"""Time-shifts done right: shift, common period and epoch; 0 s is a shift; iterations on the grid.

Cassini §4.4.1 (Eq. 4.5) turns rotation angles into time-shifts within a common period;
§4.4.2 step 3: the agent delays the next iteration by the shift, measures the drift
and re-aligns. Here the grid is ``epoch + shift + k x period`` of the cluster clock,
the same in the simulator's pacer, the fabric, the emulated agents and the worker
library, and the measured drift travels in ``Progress.time_shift_drift_s``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from factories import job
from test_engine_actions import Scripted
from worlds import World, train_spec

from halyard.agent.emulated import EmulatedAgent
from halyard.agent.worker import clock_env, time_shift_env
from halyard.clock import ManualClock
from halyard.datamodel import Allocation, EventKind, JobState, NodeAllocation, parse_cluster
from halyard.emulator.fabric import Fabric
from halyard.policies import Plan, Policy
from halyard.scheduling import Simulator
from halyard.scheduling.core import PlanError
from halyard.scheduling.records import allocation_from_dict, allocation_to_dict
from halyard.testing.cluster import small_cluster_toml
from halyard.timeshift import DRIFT_TOLERANCE, drift_s, grid_at_or_after, paced_iteration_s
from halyard.v1 import agent_service_pb2 as apb
from halyard.v1 import job_service_pb2 as jpb
from halyard.v1 import job_service_pb2_grpc as jgrpc
from halyard.v1 import types_pb2 as tpb
from halyard.wire import allocation_from_pb, allocation_to_pb, spec_to_pb


def on(*parts: tuple[str, tuple[int, ...]]) -> Allocation:
    return Allocation(tuple(NodeAllocation(node, gpus, 0, 0) for node, gpus in parts))


def test_the_grid():
    assert grid_at_or_after(10.0, 0.3, 1.0) == pytest.approx(10.3)
    assert grid_at_or_after(10.3, 0.3, 1.0) == pytest.approx(10.3)  # on the grid: now
    assert drift_s(10.32, 0.3, 1.0) == pytest.approx(0.02)
    assert drift_s(10.28, 0.3, 1.0) == pytest.approx(-0.02)
    # Paced: an iteration shorter than the period waits for the next grid point; a longer one
    # waits for the first grid point after it; no period, no pacing.
    assert paced_iteration_s(0.7, 1.0) == pytest.approx(1.0)
    assert paced_iteration_s(2.5, 1.0) == pytest.approx(3.0)
    assert paced_iteration_s(1.0 + DRIFT_TOLERANCE / 2, 1.0) < 2.0  # late within tolerance: no full wait
    assert paced_iteration_s(0.7, 0.0) == 0.7


def test_a_shift_of_zero_is_a_shift_everywhere_it_travels():
    plain = on(("r0-n0", (0,)))
    assert not plain.has_time_shift and not Allocation(plain.nodes, 0.0).has_time_shift
    assert Allocation(plain.nodes, 0.25).has_time_shift  # a non-zero legacy shift always was one
    zero = plain.with_time_shift(0.0, 0.5, 100.0)
    assert zero.has_time_shift and zero.time_shift_s == 0.0
    cluster = parse_cluster(small_cluster_toml(1), source="t")
    for back in (allocation_from_pb(allocation_to_pb(zero), cluster),
                 allocation_from_dict(json.loads(json.dumps(allocation_to_dict(zero))))):
        assert back == zero
    # An older control plane sends only time_shift_s; 0 there meant none.
    legacy = tpb.Allocation(nodes=[tpb.NodeAllocation(node="r0-n0", gpus=[0])], time_shift_s=0.0)
    assert not allocation_from_pb(legacy, cluster).has_time_shift
    assert not allocation_from_dict({"nodes": [{"node": "r0-n0", "gpus": [0], "cpus": 0, "memory_mb": 0}],
                                     "time_shift_s": 0.0}).has_time_shift


def test_a_bad_period_is_refused(small_cluster, perf):
    policy = Scripted({0.0: [lambda p: p.start("a", on(("r0-n0", (0,)))), lambda p: p.set_time_shift("a", 0.0, -1.0)]})
    with pytest.raises(PlanError, match="period"):
        Simulator(small_cluster, policy, perf, round_s=100.0).run([job(1, job_id="a")])


def test_the_core_sets_the_epoch_and_the_simulator_paces_on_the_grid(small_cluster, perf):
    """SetTimeShift(seconds=0, period) at the pass at t=100: the grid is 100 + k x period, the next
    iteration waits for it, and every iteration then takes the period (the step fits in one)."""
    spec = job(1, job_id="a", iterations=2_000)
    alloc = on(("r0-n0", (0,)))
    step = perf.iteration_time(spec, alloc, small_cluster).total_s
    period = 2.5 * step
    policy = Scripted({0.0: [lambda p: p.start("a", alloc)], 100.0: [lambda p: p.set_time_shift("a", 0.0, period)]})
    sim = Simulator(small_cluster, policy, perf, round_s=100.0)
    sim.run([spec])
    record = sim.core.records["a"]
    shifted = record.allocation
    assert (shifted.has_time_shift, shifted.time_shift_s, shifted.time_shift_period_s,
            shifted.time_shift_epoch_s) == (True, 0.0, period, 100.0)
    done_at_100 = 100.0 / step
    assert record.end_time == pytest.approx(100.0 + (2_000 - done_at_100) * period)  # 100 is a grid point
    assert record.state is JobState.COMPLETED


def test_the_fabric_takes_a_zero_shift_as_the_phase(small_cluster, perf):
    """Two vgg11 jobs on the same NICs, started half an iteration apart, interleave their all-reduces;
    both shifted by 0 s on the same grid they collide -- a 0 s shift is not 'no shift'."""
    spec = job(4, model="vgg11")
    a = on(("r0-n0", (0, 1)), ("r0-n1", (0, 1)))
    b = on(("r0-n0", (2, 3)), ("r0-n1", (2, 3)))
    half = perf.iteration_time(spec, a, small_cluster).total_s / 2

    def slowdown(alloc_a: Allocation, alloc_b: Allocation) -> float:
        fabric = Fabric(perf, small_cluster)
        fabric.place("a", spec, alloc_a, 0.0)
        fabric.place("b", spec, alloc_b, half)
        fabric.settle()
        return fabric.slowdown("a")

    apart = slowdown(a, b)
    together = slowdown(a.with_time_shift(0.0, 0.0, 50.0), b.with_time_shift(0.0, 0.0, 50.0))
    assert together > apart + 0.05
    assert slowdown(Allocation(a.nodes, 0.0), Allocation(b.nodes, 0.0)) == apart  # legacy 0.0: no shift


async def test_the_emulated_agent_starts_on_the_grid_and_reports_drift(small_cluster, perf):
    agent = EmulatedAgent("127.0.0.1:1", small_cluster.node("r0-n0"), perf=perf)  # handlers only, no stream
    agent.cluster, agent.clock = small_cluster, ManualClock(10.0)
    spec = job(1, job_id="e", iterations=1_000)
    step = perf.iteration_time(spec, on(("r0-n0", (0,))), small_cluster).total_s
    period = 4 * step
    shifted = on(("r0-n0", (0,))).with_time_shift(0.0, period, 10.05)
    agent.on_launch(apb.Launch(job_id="e", attempt=1, spec=spec_to_pb(spec), allocation=allocation_to_pb(shifted),
                               leader=True, iterations_total=1_000, start_time=10.0, restore_s=0.0))
    emulated = agent.jobs["e"]
    assert emulated.start + emulated.restore_s == pytest.approx(10.05)  # waits for the grid point
    assert emulated.iteration_s == pytest.approx(period)  # one iteration per period
    [report] = agent.progress_reports(10.05 + 7.5 * period)
    assert report.HasField("time_shift_drift_s") and report.time_shift_drift_s == pytest.approx(0.0, abs=1e-9)
    # A new shift re-phases the job: its next start is on epoch + 0.3 x period + k x period.
    now = 10.05 + 7.5 * period
    agent.clock = ManualClock(now)
    agent.on_set_time_shift(apb.SetTimeShift(job_id="e", attempt=1, seconds=0.3 * period, period_s=period,
                                             epoch_s=now))
    emulated = agent.jobs["e"]
    assert emulated.start + emulated.restore_s == pytest.approx(now + 0.3 * period)
    assert emulated.iterations_at(now + 0.3 * period) == pytest.approx(7.5)  # waiting costs progress
    assert agent.progress_reports(now + 2.6 * period)[0].time_shift_drift_s == pytest.approx(0.0, abs=1e-9)
    # Without a shift there is no grid and no drift to report.
    agent.on_launch(apb.Launch(job_id="f", attempt=1, spec=spec_to_pb(job(1, job_id="f")),
                               allocation=allocation_to_pb(on(("r0-n0", (1,)))), leader=True,
                               iterations_total=10, start_time=now))
    assert not next(r for r in agent.progress_reports(now + 1.0) if r.job_id == "f").HasField("time_shift_drift_s")
    await agent.stop_jobs()


class StartShifted(Policy):
    """Starts each pending job on r0-n0 and time-shifts it in the same plan."""

    name = "start-shifted"

    def __init__(self, seconds: float, period_s: float) -> None:
        self.seconds, self.period_s = seconds, period_s

    def schedule(self, view, state) -> Plan:
        plan = Plan()
        for pending in view.pending:
            plan.start(pending.job_id, on(("r0-n0", tuple(range(8)))))
            plan.set_time_shift(pending.job_id, self.seconds, self.period_s)
        return plan


WORKER = textwrap.dedent("""
    import sys, time
    from halyard.agent.worker import Worker
    w = Worker(handle_sigterm=False)
    with open(sys.argv[1], "w") as out:
        for i in w.iterations():
            out.write(repr(w.clock.now()) + "\\n")
            time.sleep(0.01)
""")


def _agent_socket(tmp_path, received: list[dict]) -> tuple[str, socket.socket, threading.Thread]:
    path = str(tmp_path / "a.sock") if len(str(tmp_path)) < 90 else f"/tmp/halyard-ts-{os.getpid()}.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)

    def agent() -> None:
        conn, _ = server.accept()
        with conn, conn.makefile("r") as lines:
            received.extend(json.loads(line) for line in lines)

    thread = threading.Thread(target=agent, daemon=True)
    thread.start()
    return path, server, thread


@pytest.mark.parametrize("zero_is", ["shift", "legacy"])
def test_a_worker_process_starts_on_epoch_plus_shift_and_reports_drift(tmp_path, zero_is):
    """A real training process: HALYARD_TIME_SHIFT = 0 s, period 100 ms, an epoch off the period's
    multiples -- the starts land on epoch + k x 100 ms and each report carries its drift. The
    old variable alone with 0 (what agents set before) still means no shift: no pacing, no drift.
    (Bounds leave room for a loaded machine: a late start may skip to the next grid point.)"""
    received: list[dict] = []
    path, server, thread = _agent_socket(tmp_path, received)
    origin = time.time() - 100.0  # cluster time 100 s now
    epoch, period = 100.047, 0.1  # about half a period off the multiples of 0.1 s
    env = os.environ | {"HALYARD_AGENT_SOCKET": path, "HALYARD_JOB_ID": "w", "HALYARD_ITERATIONS_TOTAL": "8",
                        "HALYARD_CHECKPOINT_DIR": str(tmp_path / "ck"), "HALYARD_CLOCK": clock_env(origin, 0.0, 1.0),
                        "HALYARD_TIME_SHIFT_S": "0.0"}
    if zero_is == "shift":
        env["HALYARD_TIME_SHIFT"] = time_shift_env(0.0, period, epoch)
    starts_file = tmp_path / "starts.txt"
    subprocess.run([sys.executable, "-c", WORKER, str(starts_file)], env=env, timeout=30, check=True)
    thread.join(5)
    server.close()
    starts = [float(x) for x in starts_file.read_text().split()]
    iterations = [m for m in received if m["type"] == "iteration"]
    assert len(starts) == len(iterations) == 8
    if zero_is == "legacy":
        assert all("drift_s" not in m for m in iterations)
        assert starts[-1] - starts[0] < 3 * period  # back to back at about 10 ms
        return
    offsets = [drift_s(s, epoch, period) for s in starts]  # independent of the worker's own figure
    assert sorted(abs(o) for o in offsets)[len(offsets) // 2] < 0.15 * period, offsets  # on the grid
    assert 6.5 * period < starts[-1] - starts[0] < 9.5 * period  # one per period, not back to back
    errors = sorted(abs(m["drift_s"] - o) for m, o in zip(iterations, offsets, strict=True))
    assert errors[len(errors) // 2] < 0.01  # the reported drift is the start's (measured just before it)


async def test_a_process_job_shifted_by_zero_through_the_control_plane(tmp_path):
    """The whole path: a plan starts a job and shifts it by 0 s with a period; the core sets the
    epoch, the process agent launches the worker with the shift and forwards SetTimeShift, the
    worker paces on epoch + k x period and the agent reports its drift in Progress."""
    period = 0.1
    starts_file = tmp_path / "starts.txt"
    command = [sys.executable, "-c", WORKER, str(starts_file)]
    policy = StartShifted(0.0, period)
    async with World("process", tmp_path, policy=policy) as w:
        await w.submit(train_spec("z", 12, command=command))
        await w.wait_for(lambda: w.job("z").state is JobState.RUNNING)
        shift = w.job("z").allocation
        assert shift.has_time_shift and shift.time_shift_s == 0.0 and shift.time_shift_period_s == period
        agent = w.agents["r0-n0"]
        await w.wait_for(lambda: "z" in agent.jobs and agent.jobs["z"].drift_s is not None)
        [progress] = [p for p in agent.progress_reports(w.cp.now()) if p.job_id == "z"]
        assert progress.HasField("time_shift_drift_s")
        assert abs(progress.time_shift_drift_s) < 0.5 * period
        # The control plane keeps the measured drift on the job record and shows it: GetJob and a metric.
        await w.wait_for(lambda: w.job("z").time_shift_drift_s is not None)
        shown = await jgrpc.JobServiceStub(w.channel).GetJob(jpb.GetJobRequest(job_id="z"))
        assert shown.HasField("time_shift_drift_s") and abs(shown.time_shift_drift_s) < 0.5 * period
        scraped = w.server.metrics.render().decode()
        [line] = [x for x in scraped.splitlines() if x.startswith("halyard_time_shift_drift_max_seconds ")]
        assert 0.0 < float(line.split()[1]) < 0.5 * period  # measured off the grid by a little, never 0 exactly
        await w.wait_for(lambda: w.job("z").state is JobState.COMPLETED)
    starts = [float(x) for x in starts_file.read_text().split()]
    offsets = sorted(abs(drift_s(s, shift.time_shift_epoch_s, period)) for s in starts)
    assert offsets[len(offsets) // 2] < 0.2 * period, offsets  # on the grid counted from the pass
    assert starts[-1] - starts[0] >= 0.8 * (len(starts) - 1) * period  # paced, not back to back


class StartInterleaved(Policy):
    """Waits for both jobs, then starts them in one pass on halves of r0-n0, shifted 0 and half a period."""

    name = "start-interleaved"

    def __init__(self, period_s: float) -> None:
        self.period_s = period_s

    def schedule(self, view, state) -> Plan:
        plan = Plan()
        if len(view.pending) == 2:
            for k, pending in enumerate(sorted(view.pending, key=lambda j: j.job_id)):
                plan.start(pending.job_id, on(("r0-n0", tuple(range(4 * k, 4 * k + 4)))))
                plan.set_time_shift(pending.job_id, k * self.period_s / 2, self.period_s)
        return plan


async def test_two_process_jobs_interleave_their_iterations_as_planned(tmp_path):
    """Cassini §4.4.2 step 3 with two real processes: shifted by 0 and by half of a common period in
    one pass, each worker starts its iterations on its own grid, so their starts alternate: each of
    b's starts lies about half a period from a's nearest start."""
    period = 0.1
    files = {j: tmp_path / f"{j}.txt" for j in ("a", "b")}
    async with World("process", tmp_path, policy=StartInterleaved(period)) as w:
        for j in ("a", "b"):
            await w.submit(train_spec(j, 12, gpus=4, command=[sys.executable, "-c", WORKER, str(files[j])]))
        await w.wait_for(lambda: all(w.job(j).state is JobState.RUNNING for j in ("a", "b")))
        grids = {j: w.job(j).allocation for j in ("a", "b")}
        await w.wait_for(lambda: all(w.job(j).state is JobState.COMPLETED for j in ("a", "b")))
    assert grids["a"].time_shift_epoch_s == grids["b"].time_shift_epoch_s  # one pass, one epoch
    starts = {j: [float(x) for x in files[j].read_text().split()] for j in ("a", "b")}
    for j, grid in grids.items():  # each on its own grid: epoch + shift + k x period
        off = sorted(abs(drift_s(s, grid.time_shift_epoch_s + grid.time_shift_s, period)) for s in starts[j])
        assert off[len(off) // 2] < 0.2 * period, (j, off)
    gaps = sorted(min(abs(sb - sa) for sa in starts["a"]) for sb in starts["b"])
    assert 0.3 * period < gaps[len(gaps) // 2] <= 0.5 * period + 1e-9, gaps  # interleaved, not together


async def test_emulated_agents_run_a_shifted_job_as_the_simulator_does(tmp_path, perf):
    """Started and shifted by a quarter period in one plan: the first iteration waits for
    epoch + shift, then one iteration per period -- the simulator's pacer and the emulated
    agent (which decides when the job ends) agree on the job's completion time."""
    cluster = parse_cluster(small_cluster_toml(1), source="one.toml")
    spec = job(8, job_id="s", iterations=200)
    step = perf.iteration_time(spec, on(("r0-n0", tuple(range(8)))), cluster).total_s
    period = 2.5 * step
    sim = Simulator(cluster, StartShifted(0.25 * period, period), perf)
    sim.run([spec])
    simulated = sim.core.records["s"].end_time - spec.submit_time  # started at its submission
    assert simulated == pytest.approx(0.25 * period + spec.iterations * period)
    async with World("emulated", tmp_path, policy=StartShifted(0.25 * period, period), speedup=200.0) as w:
        await w.submit(tpb.JobSpec(job_id="s", model=spec.model, num_gpus=8, iterations=200))
        await w.wait_for(lambda: w.job("s").state is JobState.COMPLETED)
        started = next(e.time for e in w.cp.core.log if e.job_id == "s" and e.kind is EventKind.STARTED)
        assert w.job("s").end_time - started == pytest.approx(simulated, rel=0.01)


@pytest.mark.parametrize("drift", [float("nan"), float("inf"), -2e9])
def test_a_bad_drift_report_is_refused_by_name(drift):
    """A drift that is not a finite number of seconds never reaches a record (it would poison the store)."""
    from halyard.controlplane.agent_reports import check_report as _check_report
    from halyard.datamodel import ValidationError

    msg = apb.AgentMessage(progress=apb.Progress(job_id="j", iterations_done=1.0, time_shift_drift_s=drift))
    with pytest.raises(ValidationError, match=r"progress\.time_shift_drift_s"):
        _check_report(msg, "progress")
    _check_report(apb.AgentMessage(progress=apb.Progress(job_id="j", iterations_done=1.0,
                                                         time_shift_drift_s=-0.004)), "progress")  # late or early
