"""Forecasts from the live state (issue 37): the control plane's core run forward on a fork."""

from __future__ import annotations

import pytest

from halyard.controlplane.forecast import forecast_of, in_fork
from halyard.datamodel import JobState
from halyard.testing import TestCluster
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
