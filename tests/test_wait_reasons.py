"""'Why is my job waiting?': every registered policy says, and GetJob returns it over gRPC.

Two 8-GPU nodes; a 16-GPU job runs and a second 16-GPU job arrives at the same instant,
longer and later, so no ordering ranks it first (FIFO and Gandiva's FIFO walk the queue,
SRTF sees more remaining work, LAS/FTF/2D-LAS tie and break by arrival; Dally offers it
nothing, a never-run job does not preempt). What each policy must say follows from its
rule: the expected reason is built from the stage that gives it, not copied from a run.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

import pytest
from prometheus_client import generate_latest

from halyard.policies import make_policy, policy_names
from halyard.testing import TestCluster
from halyard.v1 import job_service_pb2 as jpb
from halyard.v1 import job_service_pb2_grpc as jgrpc
from halyard.v1 import types_pb2 as tpb


def expected(policy: str) -> tuple[str, str, str]:
    """(code, stage, reason) the policy's waiting job must report."""
    if policy.startswith("dally") and make_policy(policy).reauction:  # cluster-sim's reading: nobody is
        return "CANNOT_FIT_NOW", "delay-scheduling", "needs 16 GPUs; 0 free"  # preempted between lease ends
    if policy.startswith("dally"):  # the running job has no higher Nw_sens than the never-run one (1.0)
        return ("CANNOT_FIT_NOW", "delay-scheduling",
                "needs 16 GPUs; 0 free and no running job may be preempted for it")
    if policy.startswith("crius"):  # Algorithm 1: no Cell fits even with running jobs scaled
        return "CANNOT_FIT_NOW", policy, "needs 16 GPUs of one type; no Cell fits with up to 3 jobs scaled (0 free)"
    if policy.startswith("elasticflow"):  # minimum shares in (deadline) order; no deadline: it waits
        return ("CANNOT_FIT_NOW", policy,
                "its minimum share of 16 GPUs does not fit beside the earlier jobs' (0 left)")
    if policy.startswith("pollux"):  # two fixed 16-GPU jobs: speedup 1 each, one fits; the running one keeps it
        return "CANNOT_FIT_NOW", policy, "the goodput search gives it no GPUs this pass (16 schedulable)"
    if policy == "gavel":  # the LP gives the round's GPUs to the job of higher priority
        return ("WAITING_BY_POLICY", "gavel",
                "the max-throughput allocation gives the GPUs to jobs of higher priority this round")
    ordering = dict(make_policy(policy).stages())["ordering"]
    if ordering == "fifo" and ":" not in policy:  # the in-order pass stops where nothing fits
        return "CANNOT_FIT_NOW", "fifo", "0 usable GPUs free; every job still waiting needs more"
    return ("CANNOT_FIT_NOW", ordering,
            f"needs 16 GPUs; jobs ahead of it in {ordering} order hold or take the schedulable GPUs (0 left)")


async def hog_and_late(tc: TestCluster, *, hog_iterations: int = 1000,
                       late_iterations: int = 1000) -> jgrpc.JobServiceStub:
    """Two 16-GPU jobs at the same instant on a 16-GPU cluster; returns once the first runs."""
    stub = jgrpc.JobServiceStub(tc.channel)
    for job_id, iterations in (("hog", hog_iterations), ("late", late_iterations)):
        await stub.SubmitJob(jpb.SubmitJobRequest(spec=tpb.JobSpec(
            job_id=job_id, model="resnet50", num_gpus=16, iterations=iterations)))
    await tc.wait_for(lambda: tc.job("hog").state.value == "RUNNING")
    # Passes are paced under a stream of arrivals (docs/decisions/control-plane.md, "Group commit"): wait for the one
    # that looked at the late job, which may come a few pass-lengths after the one that started hog.
    await tc.wait_for(lambda: tc.control_plane.core.wait_of(tc.job("late")) is not None)
    return stub


@pytest.mark.parametrize("policy", policy_names())
async def test_get_job_says_why_a_job_waits(policy):
    async with TestCluster(nodes=2, policy=policy) as tc:
        stub = await hog_and_late(tc, late_iterations=5000)
        late = await stub.GetJob(jpb.GetJobRequest(job_id="late"))
        assert late.state == tpb.PENDING
        code, stage, reason = expected(policy)
        assert (jpb.WaitCode.Name(late.wait.code), late.wait.stage, late.wait.reason) == (code, stage, reason)
        running = await stub.GetJob(jpb.GetJobRequest(job_id="hog"))
        assert not running.HasField("wait")  # a running job does not wait
        listed = await stub.ListJobs(jpb.ListJobsRequest(states=[tpb.PENDING]))
        assert [(j.spec.job_id, j.wait.reason) for j in listed.jobs] == [("late", reason)]
        assert tc.control_plane.core.waiting == {code: 1}
        exposed = generate_latest(tc.server.metrics.registry).decode()
        assert f'halyard_waiting_jobs{{code="{code}"}} 1.0' in exposed


async def test_the_reason_goes_once_the_job_starts():
    async with TestCluster(nodes=2, policy="fifo") as tc:
        stub = await hog_and_late(tc, hog_iterations=100, late_iterations=100)
        assert (await stub.GetJob(jpb.GetJobRequest(job_id="late"))).HasField("wait")
        await tc.advance(3600)
        await tc.wait_for(lambda: tc.job("late").state.value != "PENDING")
        assert not (await stub.GetJob(jpb.GetJobRequest(job_id="late"))).HasField("wait")
        assert tc.control_plane.core.waiting == {}


async def halyard_status(*args: str) -> tuple[int, str, str]:
    """The `halyard` command as a user runs it (a real process; the test cluster keeps serving):
    exit status, stdout, stderr."""
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "halyard.cli", *args,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                env=os.environ | {"COLUMNS": "200"})
    out, err = await proc.communicate()
    return proc.returncode, out.decode(), err.decode()


async def halyard(*args: str) -> str:
    """``halyard_status`` for a command that must succeed: its stdout."""
    code, out, err = await halyard_status(*args)
    assert code == 0, err
    return out


async def test_halyard_job_and_jobs_print_the_reason():
    async with TestCluster(nodes=2, policy="dally") as tc:
        await hog_and_late(tc)
        shown = await halyard("job", "late", "--control-plane", tc.address, "--insecure")
        assert "waiting:    CANNOT_FIT_NOW (delay-scheduling): needs 16 GPUs; 0 free" in shown
        listed = await halyard("jobs", "--control-plane", tc.address, "--insecure")
        assert "CANNOT_FIT_NOW (delay-scheduling): needs 16 GPUs; 0 free" in listed
        assert "hog" in (await halyard("job", "hog", "--control-plane", tc.address, "--insecure"))


async def test_halyard_policies_lists_presets_and_stages():
    listed = json.loads(await halyard("policies", "--json"))
    assert set(listed["policies"]) == set(policy_names())
    assert listed["policies"]["gandiva"][-1] == ["adjust", "gandiva-migration"]
    assert "synergy-tune" in listed["stages"]["placement"]
