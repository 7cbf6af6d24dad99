"""The gpu backend end to end on a real GPU: a control plane and a ``GpuAgent`` over gRPC on loopback run
examples/train_torch.py (PyTorch on CUDA) through the worker library.

One job goes through every command a policy can give a real process: a start with a Cassini time-shift,
a Synergy CPU/memory change, a preemption that checkpoints and a resume that continues from the
checkpoint. The test checks each where it lands: in the process (what the script saw, from its log and
summary), in the agent (NVML utilisation and health in the heartbeat) and in the control plane (progress,
measured iteration time, drift, events).

It needs PyTorch with CUDA and NVML (``pip install -e '.[gpu]'`` and a CUDA build of torch) and skips
without them, naming what is missing: CI has no GPU. ``benchmarks/gpu_check.sh`` runs it on a GPU server
with ``-s`` so the log shows each step.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
from pathlib import Path

import pytest
from worlds import World

from halyard.agent.gpu import GpuUnavailable, load_nvml, local_gpus
from halyard.datamodel import Allocation, EventKind, JobState, NodeAllocation
from halyard.policies import Plan, Policy
from halyard.testing.cluster import small_cluster_toml
from halyard.v1 import types_pb2 as tpb

EXAMPLE = str(Path(__file__).resolve().parents[1] / "examples" / "train_torch.py")
ITERATIONS = 90
RESOURCES_AT = 20  # iterations done when the policy changes the CPU share
PREEMPT_AT = 45  # ... and when it preempts the job
CHECKPOINT_EVERY = 10
PERIOD_S = 0.05  # the time-shift grid's period: longer than a ResNet-18 step at 64 px, batch 64, on any GPU
CPUS_FIRST, CPUS_THEN = 4, 2
HOST_MEMORY_MB = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 10**6
MEMORY_FIRST_MB, MEMORY_THEN_MB = HOST_MEMORY_MB // 2, HOST_MEMORY_MB // 3  # a CUDA process needs a few GB


def _gpu_or_skip_reason() -> str | None:
    try:
        import torch
    except ImportError:
        return "needs PyTorch (a CUDA build)"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no CUDA device"
    try:
        load_nvml()
    except GpuUnavailable as exc:  # no nvidia-ml-py, or NVML did not start
        return str(exc)
    return None


SKIP_REASON = _gpu_or_skip_reason()
pytestmark = pytest.mark.skipif(SKIP_REASON is not None, reason=str(SKIP_REASON))


class GpuJourney(Policy):
    """Starts each pending job on GPU 0 of r0-n0 shifted by 0 s on a ``PERIOD_S`` grid (a preempted job again
    the same way); once told (``change_resources``, ``preempt``: the test sets them when the worker has
    really done ``RESOURCES_AT`` and ``PREEMPT_AT`` iterations, which the control plane's estimate between
    reports may run ahead of), changes the running job's CPU/memory share, then preempts it, once each."""

    name = "gpu-journey"
    needs_rounds = True  # its steps follow the test's flags, not events: a pass every round
    acts_without_pending = True

    def __init__(self) -> None:
        self.change_resources = self.preempt = False
        self.resources_changed = self.preempted = False

    def __deepcopy__(self, memo: dict) -> GpuJourney:
        """The test steers this instance: the copy the core makes for jobs with a command must be it."""
        return self

    def schedule(self, view, state) -> Plan:
        plan = Plan()
        for pending in view.pending:
            plan.start(pending.job_id, Allocation((NodeAllocation("r0-n0", (0,), CPUS_FIRST, MEMORY_FIRST_MB),)))
            plan.set_time_shift(pending.job_id, 0.0, PERIOD_S)
        for job in view.running.values():
            if self.change_resources and not self.resources_changed:
                plan.set_resources(job.job_id, "r0-n0", CPUS_THEN, MEMORY_THEN_MB)
                self.resources_changed = True
            elif self.preempt and not self.preempted:
                plan.preempt(job.job_id)
                self.preempted = True
        return plan


def step(text: str) -> None:
    print(f"[gpu-check] {text}", flush=True)


async def run_journey(tmp_path: Path, backend: str = "gpu", script_args: tuple[str, ...] = ()) -> dict:
    """Runs the journey on a one-node World of ``backend`` and returns what each side observed."""
    command = [sys.executable, EXAMPLE, "--checkpoint-every", str(CHECKPOINT_EVERY), *script_args]
    spec = tpb.JobSpec(job_id="a", model="resnet18", num_gpus=1, iterations=ITERATIONS, command=command)
    # The job's process imports halyard from wherever this process does: pass the path on when one is set.
    pass_env = ("PYTHONPATH",) if os.environ.get("PYTHONPATH") else ()
    seen: dict = {}
    gpu_type, gpus = local_gpus() if backend == "gpu" else ("V100", 1)
    cluster = small_cluster_toml(1, gpus, gpu_type=gpu_type, cpus=len(os.sched_getaffinity(0)),
                                 memory_gb=HOST_MEMORY_MB // 1000)  # this machine as a one-node cluster
    policy = GpuJourney()
    async with World(backend, tmp_path, policy=policy, round_s=0.2, cluster_toml=cluster, pass_env=pass_env) as w:
        agent = w.agents["r0-n0"]
        step(f"agent registered ({backend} backend): {getattr(agent, 'gpu_type', '-')}")
        await w.submit(spec)
        await w.wait_for(lambda: w.job("a").state is JobState.RUNNING, timeout=60)
        record = w.job("a")
        beats = []  # the agent's heartbeats while the job runs, until the policy preempts it

        async def until_worker_did(iterations: int) -> None:
            """Sample heartbeats and the control plane's view of the job until the worker has really done
            ``iterations`` (as it reported them to its agent)."""
            while (job := agent.jobs.get("a")) is None or job.iterations_done < iterations:
                beats.append(agent.heartbeat(w.cp.now()))
                if w.job("a").time_shift_drift_s is not None:  # what the control plane holds from the reports
                    seen["measured_s"], seen["drift_s"] = w.job("a").iteration_s, w.job("a").time_shift_drift_s
                assert len(beats) < 6000, "the job made no progress in 5 minutes"
                await asyncio.sleep(0.05)

        await until_worker_did(5)
        step(f"running: the worker reported {agent.jobs['a'].iterations_done:.0f} iterations; "
             f"the control plane has {w.done('a'):.0f}; allocation {record.allocation.nodes[0]}")
        await until_worker_did(RESOURCES_AT)
        policy.change_resources = True
        await w.wait_for(lambda: any(e.kind is EventKind.RESOURCES for e in w.cp.core.log), timeout=30)
        step(f"CPU/memory share changed at iteration {agent.jobs['a'].iterations_done:.0f}")
        await until_worker_did(PREEMPT_AT)
        policy.preempt = True
        reported = agent.jobs["a"].iterations_done
        await w.wait_for(lambda: any(e.kind is EventKind.PREEMPTED for e in w.cp.core.log), timeout=30)
        step(f"preempted once the worker had reported {reported:.0f} iterations")
        seen["beats"], seen["ideal_s"] = beats, record.ideal_iteration_s
        step(f"heartbeats while running: max utilisation {max(b.gpu_utilization for b in beats):.0%}, "
             f"healthy {all(b.healthy for b in beats)}; last detail: {beats[-1].detail}")
        step(f"control plane: measured iteration {seen.get('measured_s')} s (the model's {seen['ideal_s']} s at the "
             f"catalog's batch), time-shift drift {seen.get('drift_s')} s")
        await w.wait_for(lambda: w.job("a").state is JobState.COMPLETED, timeout=300)
        seen["events"] = [e.kind for e in w.cp.core.log if e.job_id == "a"]
        step(f"events: {[k.name for k in seen['events']]}")
    log = (tmp_path / "logs" / "a-1-r0-n0.log").read_text()
    first = [json.loads(x) for x in log.splitlines() if x.startswith("{")]
    seen["cpus"] = [line["cpus"] for line in first if "cpus" in line]
    seen["affinity"] = [line["affinity"] for line in first if "affinity" in line]
    step(f"attempt 1 saw CPU shares {seen['cpus']} and affinities {seen['affinity']}")
    seen["summary"] = json.loads((tmp_path / "checkpoints" / "a" / "summary.json").read_text())
    step(f"attempt 2 summary: {seen['summary']}")
    return seen


async def test_a_pytorch_job_on_a_real_gpu_is_shifted_resized_preempted_and_resumed(tmp_path):
    seen = await run_journey(tmp_path)
    beats = seen["beats"]
    assert max(b.gpu_utilization for b in beats) > 0.0  # NVML saw the GPU busy
    assert all(b.healthy for b in beats) and beats[-1].detail.startswith("gpu0 ")  # per-GPU detail from NVML
    measured = seen.get("measured_s", 0.0)
    assert 0.0 < measured < 1.0 and measured != seen["ideal_s"]  # what the worker measured, not the model's
    assert seen.get("drift_s") is not None and abs(seen["drift_s"]) < PERIOD_S / 2  # paced on the shift's grid
    assert seen["events"].count(EventKind.PREEMPTED) == 1 and seen["events"][-1] is EventKind.COMPLETED
    assert seen["cpus"] == [CPUS_FIRST, CPUS_THEN]  # the worker learnt the new share and set torch's threads
    assert seen["affinity"][0] == CPUS_FIRST and seen["affinity"][-1] == CPUS_THEN  # the agent re-pinned it
    summary = seen["summary"]
    assert summary["attempt"] == 2 and summary["cuda_visible_devices"] == "0" and summary["device"] != "cpu"
    assert PREEMPT_AT <= summary["started_at"] < ITERATIONS  # resumed from the checkpoint, did not start over
    assert summary["iterations_run"] == ITERATIONS - summary["started_at"]
    assert summary["final_loss"] < math.log(10)  # it learnt: below chance on its 10 classes
