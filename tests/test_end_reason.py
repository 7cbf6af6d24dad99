"""`halyard job ID` (and GetJob, `--json`) says why a job failed (issue 33, point 6): the reason was only
in the event stream. Job.end_reason carries its terminal event's detail, kept across a restart."""

from __future__ import annotations

import asyncio
import json
import os
import sys

from factories import job
from worlds import World, train_spec

from halyard.controlplane.store import SqliteStore
from halyard.datamodel import JobState
from halyard.policies import make_policy
from halyard.scheduling import SchedulingCore
from halyard.v1 import job_service_pb2 as jpb
from halyard.v1 import job_service_pb2_grpc as jgrpc
from halyard.v1 import types_pb2 as tpb

CRASH = [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"]


async def halyard(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "halyard.cli", *args,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                env=os.environ | {"HALYARD_INSECURE": "1"})
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, out.decode(), err.decode()


async def test_getjob_and_halyard_job_say_why_a_job_failed(tmp_path):
    async with World("process", tmp_path) as w:
        await w.submit(train_spec("crash", 10, command=CRASH))
        await w.submit(train_spec("fine", 10))
        await w.wait_for(lambda: w.job("crash").state is JobState.FAILED
                         and w.job("fine").state is JobState.COMPLETED)
        stub = jgrpc.JobServiceStub(w.channel)
        failed = await stub.GetJob(jpb.GetJobRequest(job_id="crash"))
        assert failed.state == tpb.FAILED and "exit code 3" in failed.end_reason and "boom" in failed.end_reason
        assert (await stub.GetJob(jpb.GetJobRequest(job_id="fine"))).end_reason == ""
        listed = await stub.ListJobs(jpb.ListJobsRequest())
        assert {j.spec.job_id: j.end_reason for j in listed.jobs}["crash"] == failed.end_reason
        target = w.server.address
        code, out, err = await halyard("job", "crash", "--control-plane", target)
        assert code == 0, err
        assert "state:      FAILED" in out and "failed:     exit code 3" in out
        code, out, err = await halyard("jobs", "--control-plane", target)
        assert code == 0 and "exit code 3" in out, err
        code, out, err = await halyard("job", "crash", "--control-plane", target, "--json")
        assert code == 0 and "exit code 3" in json.loads(out)["end_reason"], err


def test_the_reason_is_kept_across_a_restart(small_cluster, perf, tmp_path):
    """Not a column: the store keeps the FAILED event, and the core reads the reason back from it."""
    core = SchedulingCore(small_cluster, make_policy("fifo"), perf)
    core.submit(job(1, job_id="a"), 0.0)
    core.submit(job(1, job_id="b"), 0.0)
    core.schedule(0.0)
    core.fail("a", 5.0, "exit code 0 before its last iteration")
    core.complete("b", 6.0)
    path = tmp_path / "state.db"
    with SqliteStore(path) as store:
        store.save(*core.take_changes())
    with SqliteStore(path) as store:
        state = store.load()
    again = SchedulingCore(small_cluster, make_policy("fifo"), perf)
    again.restore(state)
    assert again.records["a"].end_reason == "exit code 0 before its last iteration"
    assert again.records["b"].end_reason == ""
