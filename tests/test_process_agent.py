"""The process backend: real training processes (examples/train_numpy.py) under a real control plane."""

from __future__ import annotations

import asyncio
import json
import os
import sys

import pytest
from policy_fakes import OneResize
from worlds import EXAMPLE, World, train_spec

from halyard.agent.process import Enforcement, ProcessAgent
from halyard.datamodel import Allocation, EventKind, JobState, NodeAllocation
from halyard.policies import Plan, Policy


def events(world: World, job_id: str) -> list[EventKind]:
    return [e.kind for e in world.cp.core.log if e.job_id == job_id]


async def test_a_job_runs_its_command_to_completion_and_reports_progress(tmp_path):
    async with World("process", tmp_path) as w:
        await w.submit(train_spec("a", 60, pace_s=0.01))
        await w.wait_for(lambda: w.job("a").state is JobState.RUNNING)
        agent = w.agents["r0-n0"]
        await w.wait_for(lambda: "a" in agent.jobs and agent.jobs["a"].iterations_done >= 5)
        await w.wait_for(lambda: w.done("a") >= 5)  # the control plane follows the reported progress
        await w.wait_for(lambda: w.job("a").state is JobState.COMPLETED)
    summary = json.loads((tmp_path / "checkpoints" / "a" / "summary.json").read_text())
    assert summary["started_at"] == 0 and summary["loss"] < summary["first_batch_loss"]  # it learned
    log = (tmp_path / "logs" / "a-1-r0-n0.log").read_text()
    assert '"rank": 0' in log
    assert events(w, "a") == [EventKind.SUBMITTED, EventKind.STARTED, EventKind.COMPLETED]


async def test_preemption_checkpoints_and_the_next_attempt_resumes_from_it(tmp_path):
    async with World("process", tmp_path, policy="srtf") as w:
        await w.submit(train_spec("long", 400, pace_s=0.005))
        await w.wait_for(lambda: w.done("long") >= 30)
        await w.submit(train_spec("short", 20))  # SRTF preempts the long job for it
        await w.wait_for(lambda: w.job("long").preemptions == 1)
        checkpoint = w.job("long").iterations_done(w.cp.now())
        assert checkpoint >= 30  # what the worker really did, not the model's guess
        await w.wait_for(lambda: w.job("long").state is JobState.COMPLETED)
        assert w.job("short").state is JobState.COMPLETED
    summary = json.loads((tmp_path / "checkpoints" / "long" / "summary.json").read_text())
    assert summary["attempt"] == 2 and summary["started_at"] >= 30  # resumed, did not start over
    assert summary["loss"] < 0.5
    first = (tmp_path / "logs" / "long-1-r0-n0.log").read_text()
    assert "summary" not in first and '"attempt": 1' not in first  # the first run stopped before the end


async def test_a_crashing_command_fails_with_its_exit_code_and_output(tmp_path):
    crash = [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"]
    async with World("process", tmp_path) as w:
        await w.submit(train_spec("crash", 10, command=crash))
        await w.wait_for(lambda: w.job("crash").state is JobState.FAILED)
    detail = next(e.detail for e in w.cp.core.log if e.kind is EventKind.FAILED)
    assert "exit code 3" in detail and "boom" in detail


async def test_processes_are_pinned_and_the_environment_is_set(tmp_path):
    probe = [sys.executable, "-c",
             "import json, os; print(json.dumps({'cpus': sorted(os.sched_getaffinity(0)), "
             "'env': {k: v for k, v in os.environ.items() if k.startswith('HALYARD_') or k == 'RANK'}}))"]
    async with World("process", tmp_path) as w:
        await w.submit(train_spec("probe", 10, command=probe))
        await w.wait_for(lambda: w.job("probe").state is JobState.FAILED)  # it never ran the iterations
    out = json.loads((tmp_path / "logs" / "probe-1-r0-n0.log").read_text().splitlines()[0])
    assert set(out["cpus"]) <= os.sched_getaffinity(0)
    env = out["env"]
    assert env["HALYARD_JOB_ID"] == "probe" and env["HALYARD_ATTEMPT"] == "1" and env["HALYARD_RANK"] == "0"
    assert env["HALYARD_WORLD_SIZE"] == "1" and env["HALYARD_MASTER_ADDR"] == "127.0.0.1" and env["RANK"] == "0"
    assert env["HALYARD_ITERATIONS_TOTAL"] == "10" and env["HALYARD_START_ITERATION"] == "0"
    assert env["HALYARD_CHECKPOINT_DIR"] == str(tmp_path / "checkpoints" / "probe")
    assert os.path.basename(env["HALYARD_AGENT_SOCKET"]) == "agent.sock"
    assert env["HALYARD_CPUS"] == "24" and env["HALYARD_MEMORY_MB"] == "500000"  # the whole test node
    assert len(env["HALYARD_CLOCK"].split(",")) == 3
    # One logical worker per GPU for a job that declares none.
    assert env["HALYARD_NUM_GPUS"] == env["HALYARD_LOGICAL_WORKERS"] == env["HALYARD_RANK_WORKERS"] == "8"
    assert env["HALYARD_GPU_WORKERS"] == ",".join(["1"] * 8) and env["HALYARD_WORKER_OFFSET"] == "0"


def test_enforcement_says_why_memory_is_not_enforced(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpu io\n")
    enforcement = Enforcement(cgroup_root=tmp_path)
    assert not enforcement.memory_enforced
    assert "memory: unenforced" in enforcement.describe()
    missing = Enforcement(cgroup_root=tmp_path / "nothing")
    assert "no cgroup v2" in missing.describe()


async def test_heartbeats_state_the_enforcement(tmp_path):
    async with World("process", tmp_path) as w:
        agent = w.agents["r0-n0"]
        assert isinstance(agent, ProcessAgent)
        beat = agent.heartbeat(0.0)
        assert beat.healthy and beat.detail.startswith("cpus: pinned") and "memory:" in beat.detail


@pytest.mark.parametrize("grace", [0.0, 5.0])
async def test_preempt_stops_the_process_within_the_grace_period(tmp_path, grace):
    from halyard.v1 import agent_service_pb2 as apb

    async with World("process", tmp_path) as w:
        await w.submit(train_spec("a", 100_000, pace_s=0.01))
        agent = w.agents["r0-n0"]
        await w.wait_for(lambda: "a" in agent.jobs and agent.jobs["a"].iterations_done >= 3)
        job = agent.jobs["a"]
        agent.on_preempt(apb.Preempt(job_id="a", attempt=job.attempt, grace_s=grace))
        await w.wait_for(lambda: job.exited.is_set())
        if grace:  # SIGTERM: the worker checkpointed the iterations it had finished
            assert job.checkpoint >= 3
            assert job.process.returncode == 0
        else:
            assert job.process.returncode < 0  # SIGKILL at once


async def test_a_launch_waits_for_the_stopping_process_that_holds_its_gpus(tmp_path):
    """The control plane frees a preempted job's GPUs at once; the agent starts the next job on them
    only after the old process has exited (here its checkpoint lasts until the test lets it end), so no
    GPU holds two."""
    from halyard.datamodel import Allocation, JobSpec, NodeAllocation
    from halyard.v1 import agent_service_pb2 as apb
    from halyard.wire import allocation_to_pb, spec_to_pb

    ready, release = tmp_path / "handler-installed", tmp_path / "checkpoint-done"
    slow_stop = [sys.executable, "-c", "import pathlib, signal, sys, time; "
                 f"release = pathlib.Path({str(release)!r}); "
                 "signal.signal(signal.SIGTERM, lambda *_: ([time.sleep(0.01) for _ in iter(release.exists, True)], "
                 "sys.exit(0))); "
                 f"pathlib.Path({str(ready)!r}).touch(); time.sleep(600)"]
    async with World("process", tmp_path) as w:
        await w.submit(train_spec("a", 100, command=slow_stop))
        agent = w.agents["r0-n0"]
        await w.wait_for(lambda: "a" in agent.jobs and agent.jobs["a"].process is not None)
        old = agent.jobs["a"]
        await w.wait_for(ready.exists)  # the script has installed its SIGTERM handler
        agent.on_preempt(apb.Preempt(job_id="a", attempt=old.attempt, grace_s=600.0))
        spec = JobSpec(job_id="b", submit_time=0.0, model="resnet50", num_gpus=2, iterations=1,
                       command=(sys.executable, "-c", "pass"))
        agent.on_launch(apb.Launch(job_id="b", attempt=1, spec=spec_to_pb(spec), leader=True, iterations_total=1,
                                   allocation=allocation_to_pb(Allocation((NodeAllocation("r0-n0", (6, 7), 2,
                                                                                          1000),)))))
        await asyncio.sleep(0.4)  # a chance to launch b too early; a cannot exit before `release` exists
        assert not old.exited.is_set() and agent.jobs["b"].process is None  # still waiting for a's GPUs 6, 7
        release.touch()
        await w.wait_for(lambda: old.exited.is_set())
        await w.wait_for(lambda: "b" not in agent.jobs or agent.jobs["b"].process is not None)


class PreemptBeforeItsFirstIteration(Policy):
    """Starts each pending job on r0-n0; preempts a running job once, as soon as the control plane's estimate
    (the model's rate since the start) says it has done 3 iterations, which the slow-starting script has not."""

    name = "preempt-early"
    needs_rounds = True
    acts_without_pending = True

    def __init__(self) -> None:
        self.preempted = False

    def schedule(self, view, state) -> Plan:
        plan = Plan()
        for pending in view.pending:
            plan.start(pending.job_id, Allocation((NodeAllocation("r0-n0", tuple(range(8)), 24, 500_000),)))
        for job in view.running.values():
            if not self.preempted and job.iterations_done(view.now) >= 3:
                plan.preempt(job.job_id)
                self.preempted = True
        return plan


async def test_an_attempt_preempted_before_its_first_checkpoint_resumes_from_what_really_ran(tmp_path):
    """Found on a real GPU (CUDA's start-up takes seconds): a policy's Preempt ends the attempt in the control
    plane at once, at its model's estimate of the progress, and relaunches from that estimate. Here the script
    sleeps through the estimate's first iterations, so the attempt stops with nothing checkpointed; the
    next attempt must start from 0 (the agent's record of what really ran), not from the estimate, where the
    script would look for a checkpoint that was never written."""
    slow_start = [sys.executable, "-c", "import runpy, sys, time; time.sleep(3); "
                  f"sys.argv = [{EXAMPLE!r}, '--samples', '400', '--dim', '8']; "
                  f"runpy.run_path({EXAMPLE!r}, run_name='__main__')"]
    async with World("process", tmp_path, policy=PreemptBeforeItsFirstIteration(), round_s=0.2) as w:
        await w.submit(train_spec("a", 20, command=slow_start))
        await w.wait_for(lambda: w.job("a").preemptions == 1)
        await w.wait_for(lambda: w.job("a").state in (JobState.COMPLETED, JobState.FAILED), timeout=60)
        assert w.job("a").state is JobState.COMPLETED, [e.detail for e in w.cp.core.log if e.job_id == "a"]
    summary = json.loads((tmp_path / "checkpoints" / "a" / "summary.json").read_text())
    assert summary["attempt"] == 2 and summary["started_at"] == 0


async def test_a_resize_checkpoints_and_resumes_on_the_new_gpus(tmp_path):
    """Issue 12: a running job resized from 2 GPUs to 1 on a process agent checkpoints on demand,
    restarts on the new GPU from that checkpoint with the new size, and completes. Each step's
    batches are a function of (logical worker, step), so a lost or repeated step would change
    the final weights: they equal those of an uninterrupted run."""
    import subprocess

    import numpy as np
    from worlds import EXAMPLE

    total, after = 300, 60
    policy = OneResize("e", Allocation((NodeAllocation("r0-n0", (0, 1), 6, 1000),)),
                       Allocation((NodeAllocation("r0-n0", (0,), 3, 500),)),
                       when=lambda view, job: job.iterations_done(view.now) >= after)
    spec = train_spec("e", total, gpus=2, pace_s=0.01, every=100_000, min_gpus=1, max_gpus=2, logical_workers=2)
    async with World("process", tmp_path, policy=policy, round_s=0.05) as w:
        await w.submit(spec)
        agent = w.agents["r0-n0"]
        await w.wait_for(lambda: "e" in agent.jobs)
        first_attempt = agent.jobs["e"]
        await w.wait_for(lambda: w.job("e").state is JobState.COMPLETED)
        record = w.job("e")
    assert events(w, "e") == [EventKind.SUBMITTED, EventKind.STARTED, EventKind.RESIZED, EventKind.COMPLETED]
    assert record.preemptions == 0 and record.allocation.num_gpus == 1 and record.allocation.nodes[0].workers == (2,)
    summary = json.loads((tmp_path / "checkpoints" / "e" / "summary.json").read_text())
    assert summary["attempt"] == 2 and summary["num_gpus"] == 1
    assert summary["logical_workers"] == 2 and summary["rank_workers"] == 2
    # The first attempt checkpointed every iteration it finished, on demand, and the second resumed there.
    assert first_attempt.attempt == 1 and first_attempt.restarting and first_attempt.exited.is_set()
    assert first_attempt.checkpoint >= first_attempt.iterations_done >= after / 2
    assert summary["started_at"] == first_attempt.checkpoint < total
    first = (tmp_path / "logs" / "e-1-r0-n0.log").read_text()
    assert "summary" not in first and '"attempt": 1' not in first  # the first attempt stopped early
    reference = tmp_path / "reference"
    subprocess.run([sys.executable, *spec.command[1:], "--iterations", str(total), "--min-iteration-s", "0"],
                   env=os.environ | {"HALYARD_CHECKPOINT_DIR": str(reference), "HALYARD_LOGICAL_WORKERS": "2"},
                   check=True, capture_output=True, timeout=60)
    assert spec.command[1] == EXAMPLE
    resized = np.load(tmp_path / "checkpoints" / "e" / "model.npz")
    straight = np.load(reference / "model.npz")
    assert int(resized["iteration"]) == int(straight["iteration"]) == total
    assert np.array_equal(resized["weights"], straight["weights"])


async def test_scaled_out_and_in_a_job_ends_as_if_never_resized(tmp_path):
    """Issue 15 (EasyScale D1 on CPU processes): maxP 4 logical workers start on 1 GPU (4 ESTs
    time-sliced), scale out to 4 GPUs (one each), then in to 2 (two each). Every resize is an
    on-demand checkpoint and a relaunch with the same maxP; the job ends with exactly the global
    steps asked for and bit-identical weights to an uninterrupted run of 4 logical workers."""
    import subprocess

    import numpy as np
    from policy_fakes import Resizes

    def on(*gpus: int, workers: tuple[int, ...]) -> Allocation:
        return Allocation((NodeAllocation("r0-n0", gpus, 3 * len(gpus), 500 * len(gpus), workers),))

    total = 300
    policy = Resizes("e", on(0, workers=(4,)), [
        (on(0, 1, 2, 3, workers=(1, 1, 1, 1)), lambda view, job: job.iterations_done(view.now) >= 60),
        (on(0, 1, workers=(2, 2)), lambda view, job: job.iterations_done(view.now) >= 150)])
    spec = train_spec("e", total, gpus=4, pace_s=0.01, every=100_000, min_gpus=1, max_gpus=4, logical_workers=4)
    async with World("process", tmp_path, policy=policy, round_s=0.05) as w:
        await w.submit(spec)
        await w.wait_for(lambda: w.job("e").state is JobState.COMPLETED)
        record = w.job("e")
    assert events(w, "e") == [EventKind.SUBMITTED, EventKind.STARTED, EventKind.RESIZED, EventKind.RESIZED,
                              EventKind.COMPLETED]
    assert [done for _, done in policy.resized] == sorted(done for _, done in policy.resized)
    assert record.allocation.nodes[0].workers == (2, 2)
    summary = json.loads((tmp_path / "checkpoints" / "e" / "summary.json").read_text())
    assert summary["attempt"] == 3 and summary["num_gpus"] == 2
    assert summary["logical_workers"] == 4 and summary["rank_workers"] == 4
    assert 150 <= summary["started_at"] < total  # the last attempt resumed from the scale-in checkpoint
    reference = tmp_path / "reference"
    subprocess.run([sys.executable, *spec.command[1:], "--iterations", str(total), "--min-iteration-s", "0"],
                   env=os.environ | {"HALYARD_CHECKPOINT_DIR": str(reference), "HALYARD_LOGICAL_WORKERS": "4"},
                   check=True, capture_output=True, timeout=60)
    resized = np.load(tmp_path / "checkpoints" / "e" / "model.npz")
    straight = np.load(reference / "model.npz")
    assert int(resized["iteration"]) == int(straight["iteration"]) == total
    assert np.array_equal(resized["weights"], straight["weights"])


async def test_crius_moves_a_cell_across_gpu_types_and_it_resumes_from_its_checkpoint(tmp_path):
    """Issue 14: under the real Crius policy a job runs as a 4-GPU Cell on the A40 server; a job
    that must have A40s arrives, ScaleResource moves the first job's Cell to the A10 server (§6.1
    "moves them to another type of GPU"), and back when the A40s are idle again (Algorithm 1 line
    12); the real training process checkpoints on demand, restarts from that checkpoint each time
    and ends with the weights of an uninterrupted run."""
    import subprocess

    import numpy as np
    from factories import two_type_toml
    from worlds import EXAMPLE

    total, after = 400, 60
    spec = train_spec("e", total, gpus=2, pace_s=0.01, every=100_000, min_gpus=1, max_gpus=4, logical_workers=4)
    pin = train_spec("pin", 20, gpus=4, pace_s=0.01)
    pin.gpu_type = "A40"
    async with World("process", tmp_path, policy="crius", round_s=0.05, cluster_toml=two_type_toml(1, 4)) as w:
        await w.submit(spec)
        await w.wait_for(lambda: w.done("e") >= after)
        assert w.job("e").allocation.node_names == ("r0-a40-0",) and w.job("e").num_gpus == 4  # 2 N_G, faster type
        await w.submit(pin)
        await w.wait_for(lambda: w.job("pin").state is JobState.COMPLETED and w.job("e").state is JobState.COMPLETED,
                         timeout=60)
        record = w.job("e")
        assert w.cp.profiles.exchanged > 0 and not w.cp.profiles.errors  # §5.1: process agents answered Profile
    # Moved to the A10s for the pinned job, and back to the idle A40s once it left (line 12).
    assert [(a, nodes) for a, j, nodes in w.decisions if j == "e"] == [
        ("Start", ("r0-a40-0",)), ("Migrate", ("r0-a10-1",)), ("Migrate", ("r0-a40-0",))]
    assert record.preemptions == 0 and [d for d in w.decisions if d[1] == "pin"] == [("Start", "pin", ("r0-a40-0",))]
    summary = json.loads((tmp_path / "checkpoints" / "e" / "summary.json").read_text())
    assert summary["attempt"] == 3 and after <= summary["started_at"] < total  # resumed, did not start over
    reference = tmp_path / "reference"
    subprocess.run([sys.executable, *spec.command[1:], "--iterations", str(total), "--min-iteration-s", "0"],
                   env=os.environ | {"HALYARD_CHECKPOINT_DIR": str(reference), "HALYARD_LOGICAL_WORKERS": "4"},
                   check=True, capture_output=True, timeout=60)
    assert spec.command[1] == EXAMPLE
    moved, straight = np.load(tmp_path / "checkpoints" / "e" / "model.npz"), np.load(reference / "model.npz")
    assert int(moved["iteration"]) == int(straight["iteration"]) == total
    assert np.array_equal(moved["weights"], straight["weights"])
