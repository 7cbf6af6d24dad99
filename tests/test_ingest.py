"""Ingest (issue 19, item 1): group commits, one pass per burst, SubmitJobs, answers only once stored."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time

import grpc
import pytest

from halyard.clock import ManualClock
from halyard.controlplane.errors import Unavailable
from halyard.controlplane.group_commit import GroupCommit
from halyard.controlplane.service import ControlPlane
from halyard.controlplane.store import SqliteStore
from halyard.datamodel import JobSpec, JobState
from halyard.datamodel.limits import MAX_REQUEST_BYTES, MAX_SUBMIT_BATCH
from halyard.emulator import PerformanceModel
from halyard.policies import make_policy
from halyard.scheduling.state import StoreError
from halyard.testing import TestCluster
from halyard.testing.cluster import WAIT_TIMEOUT_S, small_cluster_toml
from halyard.v1 import job_service_pb2 as jpb
from halyard.v1 import job_service_pb2_grpc as jgrpc
from halyard.v1 import types_pb2 as tpb

pytest_plugins = ["halyard.testing.pytest_plugin"]


def job(job_id: str) -> JobSpec:
    return JobSpec(job_id=job_id, submit_time=0.0, model="resnet50", num_gpus=1, iterations=1000)


def spec(job_id: str, **kw) -> tpb.JobSpec:
    return tpb.JobSpec(job_id=job_id, **({"model": "resnet50", "num_gpus": 1, "iterations": 1000} | kw))


def stored_ids(db) -> set[str]:
    """The jobs another connection sees committed in the state file."""
    with sqlite3.connect(db) as other:
        return {row[0] for row in other.execute("SELECT job_id FROM jobs")}


def control_plane(store: SqliteStore) -> ControlPlane:
    toml = small_cluster_toml(2)
    from halyard.datamodel import parse_cluster

    return ControlPlane(parse_cluster(toml), make_policy("fifo"), PerformanceModel(), ManualClock(0.0), store,
                        cluster_toml=toml)


async def test_a_burst_is_one_commit_and_one_pass_and_answered_only_once_stored(tmp_path):
    """200 submissions with no turn of the event loop between them: one transaction, then one pass."""
    db = tmp_path / "state.db"
    cp = control_plane(SqliteStore(db))
    await cp.start()
    commits: list[int] = []
    cp.commits.on_commit = commits.append
    passes = cp.core.passes
    try:
        for i in range(200):  # one burst: nothing yields to the loop in between
            cp.submit(job(f"j{i}"))
        assert stored_ids(db) == set()  # applied, not yet stored: no answer may go out yet
        waiters = [asyncio.create_task(cp.committed()) for _ in range(200)]
        await asyncio.gather(*waiters)
        assert stored_ids(db) == {f"j{i}" for i in range(200)}
        assert commits == [200]  # one SQLite transaction for the burst
        deadline = time.monotonic() + WAIT_TIMEOUT_S  # its pass comes when the loop gets to it
        while cp.core.passes == passes:
            assert time.monotonic() < deadline, "no scheduling pass after the burst"
            await asyncio.sleep(0.01)
        for _ in range(20):  # the loop turns a while: no second pass follows
            await asyncio.sleep(0.01)
        assert cp.core.passes == passes + 1  # and one scheduling pass after it
    finally:
        await cp.stop()


class FailingStore(SqliteStore):
    """A real SQLite store whose disk fails from the first save on."""

    def save(self, records, events) -> None:
        raise StoreError(f"{self.path}: save failed, nothing was written: disk I/O error")


async def test_a_failed_group_commit_fails_every_submission_in_it(tmp_path):
    cp = control_plane(FailingStore(tmp_path / "state.db"))
    await cp.start()
    try:
        for i in range(3):
            cp.submit(job(f"j{i}"))
        results = await asyncio.gather(*(cp.committed() for _ in range(3)), return_exceptions=True)
        assert all(isinstance(r, StoreError) and "not stored" in str(r) for r in results)
        assert cp.failed is not None and cp.fatal.is_set()
        with pytest.raises(Unavailable):  # and nothing later is taken
            cp.submit(job("later"))
    finally:
        await cp.stop()


async def test_a_group_commit_that_breaks_otherwise_stops_the_control_plane_and_its_waiters(tmp_path):
    """Not only a store error: any failure in the commit task fails its waiters (none waits forever)."""
    cp = control_plane(SqliteStore(tmp_path / "state.db"))
    await cp.start()

    def broken_hook(jobs: int) -> None:
        raise RuntimeError("metrics hook broke")

    cp.commits.on_commit = broken_hook
    try:
        cp.submit(job("j0"))
        result = await asyncio.wait_for(asyncio.gather(cp.committed(), return_exceptions=True),
                                        timeout=WAIT_TIMEOUT_S)
        assert isinstance(result[0], StoreError) and "metrics hook broke" in str(result[0])
        assert cp.failed is not None and cp.fatal.is_set()
    finally:
        await cp.stop()


async def test_submit_jobs_answers_each_job_in_order(halyard_cluster: TestCluster):
    tc = halyard_cluster
    jobs = jgrpc.JobServiceStub(tc.channel)
    passes = tc.control_plane.core.passes
    reply = await jobs.SubmitJobs(jpb.SubmitJobsRequest(jobs=[
        jpb.SubmitJobRequest(spec=spec("a")),
        jpb.SubmitJobRequest(spec=spec("b", model="nosuchnet")),
        jpb.SubmitJobRequest(spec=spec("a")),  # a duplicate of the first, in the same call
        jpb.SubmitJobRequest(),
        jpb.SubmitJobRequest(spec=spec("c", num_gpus=0)),
        *(jpb.SubmitJobRequest(spec=spec(f"w{i}")) for i in range(50)),
    ]))
    kinds = [r.WhichOneof("result") for r in reply.results]
    assert kinds == ["job", "error", "error", "error", "error"] + ["job"] * 50
    errors = reply.results[1:5]
    assert [e.error.code for e in errors] == [grpc.StatusCode.INVALID_ARGUMENT.value[0],
                                              grpc.StatusCode.ALREADY_EXISTS.value[0],
                                              grpc.StatusCode.INVALID_ARGUMENT.value[0],
                                              grpc.StatusCode.INVALID_ARGUMENT.value[0]]
    assert "jobs[1]" in errors[0].error.message and "unknown model 'nosuchnet'" in errors[0].error.message
    assert errors[1].error.message.startswith("jobs[2]: ")
    assert "jobs[3].spec" in errors[2].error.message
    assert "jobs[4].spec.num_gpus" in errors[3].error.message
    assert reply.results[0].job.spec.job_id == "a" and reply.results[0].job.state == tpb.PENDING
    records = tc.control_plane.core.records
    assert set(records) == {"a", *(f"w{i}" for i in range(50))}
    assert [r.job_id for r in records.values()] == ["a", *(f"w{i}" for i in range(50))]  # in call order
    stored = {r.job_id for r in tc.control_plane.store.load().records}
    assert stored == set(records)  # every accepted job was stored before the answer
    assert tc.control_plane.core.passes - passes <= 2  # one pass for the call (a round may add one)
    await tc.wait_for(lambda: records["a"].state is JobState.RUNNING)


async def test_submit_jobs_refuses_an_oversized_call_whole(halyard_cluster: TestCluster):
    jobs = jgrpc.JobServiceStub(halyard_cluster.channel)
    many = [jpb.SubmitJobRequest(spec=tpb.JobSpec(job_id=f"x{i}")) for i in range(MAX_SUBMIT_BATCH + 1)]
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await jobs.SubmitJobs(jpb.SubmitJobsRequest(jobs=many))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "'jobs'" in err.value.details() and str(MAX_SUBMIT_BATCH) in err.value.details()
    assert halyard_cluster.control_plane.core.records == {}


async def test_concurrent_submissions_share_commits(halyard_cluster: TestCluster):
    tc = halyard_cluster
    jobs = jgrpc.JobServiceStub(tc.channel)
    commits: list[int] = []
    tc.control_plane.commits.on_commit = commits.append
    await asyncio.gather(*(jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec(f"c{i}"))) for i in range(100)))
    assert sum(commits) == 100
    assert len(commits) < 100, commits  # at least one commit held more than one submission


def test_acknowledged_submissions_survive_kill_9(tmp_path):
    """A real daemon, 50 calls in flight (unary and batched), SIGKILL mid-stream: every job whose
    answer came back is in the state file."""
    cluster = tmp_path / "cluster.toml"
    cluster.write_text(small_cluster_toml(2), encoding="utf-8")
    db = tmp_path / "state.db"
    from test_failures import free_port

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "halyard.cli", "controlplane", "--cluster", str(cluster), "--db", str(db),
         "--listen", f"127.0.0.1:{port}", "--log-json", "--insecure"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=os.environ | {"PYTHONUNBUFFERED": "1"})
    acked: set[str] = set()
    try:
        assert proc.stdout.readline().startswith(b"listening on")

        async def load() -> None:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = jgrpc.JobServiceStub(channel)

                async def unary(k: int) -> None:
                    for i in range(10**6):
                        await stub.SubmitJob(jpb.SubmitJobRequest(spec=spec(f"u{k}-{i}")))
                        acked.add(f"u{k}-{i}")

                async def batched(k: int) -> None:
                    for i in range(10**6):
                        ids = [f"b{k}-{i}-{n}" for n in range(20)]
                        reply = await stub.SubmitJobs(jpb.SubmitJobsRequest(
                            jobs=[jpb.SubmitJobRequest(spec=spec(x)) for x in ids]))
                        assert all(r.WhichOneof("result") == "job" for r in reply.results)
                        acked.update(ids)

                async def killer() -> None:
                    while len(acked) < 1500:
                        await asyncio.sleep(0.005)
                    os.kill(proc.pid, signal.SIGKILL)  # with calls in flight

                tasks = [*(unary(k) for k in range(40)), *(batched(k) for k in range(10))]
                results = await asyncio.gather(killer(), *tasks, return_exceptions=True)
                assert all(isinstance(r, grpc.aio.AioRpcError) for r in results[1:])  # every caller cut off

        asyncio.run(load())
    finally:
        proc.kill()
        proc.wait()
    assert len(acked) >= 1500
    assert acked <= {r.job_id for r in SqliteStore(db).load().records}


async def test_halyard_submit_sends_a_file_of_many_jobs_in_batches(tmp_path):
    """`halyard submit --file` with [[job]] tables: one SubmitJobs call per MAX_SUBMIT_BATCH jobs, a line
    per job, a refused job named with its code and exit status 4, the others accepted."""
    from test_wait_reasons import halyard_status

    n = MAX_SUBMIT_BATCH + 5  # two calls
    lines = []
    for i in range(n):
        model = "nosuchnet" if i == 3 else "resnet50"
        lines.append(f'[[job]]\nid = "m{i}"\nmodel = "{model}"\ngpus = 1\niterations = 100\n')
    many = tmp_path / "many.toml"
    many.write_text("\n".join(lines), encoding="utf-8")
    async with TestCluster(nodes=1) as tc:
        connect = ("--control-plane", tc.address, "--insecure")
        code, out, err = await halyard_status("submit", "--file", str(many), "--tenant", "team-a", *connect)
        assert code == 4 and "m3: INVALID_ARGUMENT: jobs[3]: " in err and "unknown model 'nosuchnet'" in err
        assert "1 of 1005 jobs refused" in err
        assert len(out.splitlines()) == n - 1 and out.splitlines()[0] == "m0 PENDING (100 iterations)"
        records = tc.control_plane.core.records
        assert len(records) == n - 1 and "m3" not in records
        assert {r.spec.tenant for r in records.values()} == {"team-a"}  # the flag applies to every job
        code, _, err = await halyard_status("submit", "--file", str(many), "--id", "x", *connect)
        assert code == 2 and "--id" in err and "holds 1005" in err


def test_a_file_of_jobs_is_split_into_calls_within_both_request_limits():
    """By count (MAX_SUBMIT_BATCH) and by size (MAX_REQUEST_BYTES): long commands fill a call first."""
    from halyard.cli.client import _batches

    small = [tpb.JobSpec(job_id=f"j{i}", model="resnet50", num_gpus=1) for i in range(MAX_SUBMIT_BATCH + 5)]
    assert [len(b) for b in _batches(small)] == [MAX_SUBMIT_BATCH, 5]
    big = [tpb.JobSpec(job_id=f"b{i}", model="resnet50", num_gpus=1, command=["x" * (MAX_REQUEST_BYTES // 3)])
           for i in range(7)]
    batches = _batches(big)
    assert [len(b) for b in batches] == [2, 2, 2, 1]
    assert all(sum(s.ByteSize() for s in b) < MAX_REQUEST_BYTES for b in batches)


async def test_pacing_rests_after_submission_passes_only(monkeypatch, halyard_cluster: TestCluster):
    """A completion's pass runs at once even while the scheduler rests after a burst's pass: freed
    GPUs do not wait out the pacing rest (it is for passes the group commit triggers)."""
    from halyard.controlplane import service

    monkeypatch.setattr(service, "PASS_REST_RATIO", 1e9)  # every submission pass rests the longest
    monkeypatch.setattr(service, "MAX_PASS_REST_S", 30.0)
    tc = halyard_cluster
    jobs = jgrpc.JobServiceStub(tc.channel)
    gpus = tc.cluster.total_gpus
    await jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec("a", num_gpus=gpus, iterations=100)))
    await tc.wait_for(lambda: tc.job("a").state is JobState.RUNNING)  # its pass, then a 30 s rest
    await jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec("b", num_gpus=gpus, iterations=100)))  # waits for GPUs
    await tc.advance(tc.job("a").finish_time() - tc.now() + 1)
    # not 30 s later: half the rest bounds it (the time is what is checked; a loaded machine takes seconds)
    await tc.wait_for(lambda: tc.job("b").state is JobState.RUNNING, timeout=15)



async def test_a_lone_submitter_waits_for_the_window_only_in_rare_probes(tmp_path):
    """One caller at a time: a commit is made as soon as its one caller waits, except probes for a second
    caller that back off exponentially (commits 1, 3, 7, 15, 31, 63 of 100), not a window per commit."""
    cp = control_plane(SqliteStore(tmp_path / "state.db"))
    cp.commits.window_s = 0.1
    await cp.start()
    try:
        started = asyncio.get_running_loop().time()
        for i in range(100):
            cp.submit(job(f"j{i}"))
            await cp.committed()
        assert asyncio.get_running_loop().time() - started < 5.0  # a window per commit would take 10 s
        assert cp.commits._probe_gap == 64
    finally:
        await cp.stop()


async def test_probes_count_the_commits_other_paths_make():
    """A lone caller's submission is often stored by a pass's own persist before the group commit's gather sees
    its caller (the CI failure of session 18: the gap stood at 32 after 100 commits). Every commit of one
    caller counts towards the next probe, whichever path made it."""
    commits = GroupCommit(window_s=0.05)
    runner = asyncio.create_task(commits.run(lambda: commits.done() is None))
    try:
        started = asyncio.get_running_loop().time()
        for i in range(100):
            commits.add()
            if i % 2:
                commits.done()  # another change's commit (a pass persisting) takes the submission
                await asyncio.sleep(0)
            else:
                await commits.committed()
        assert asyncio.get_running_loop().time() - started < 2.5  # a window per commit would take 5 s
        assert commits._probe_gap == 64  # probes at commits 1, 3, 7, 15, 31 and 63
    finally:
        runner.cancel()


async def test_callers_in_a_loop_share_commits_over_grpc(halyard_cluster: TestCluster):
    """50 callers, each submitting again once answered (gRPC delivers their calls one at a time): a commit
    waits for the active callers, so it holds several times the submissions a commit that takes only the
    calls already delivered holds (measured: 7-9 against 1.01 on a 2-core VM; the fixed 1 ms window of
    before held about 2). Compared in one run, since how many join depends on the machine's speed."""
    tc = halyard_cluster
    jobs = jgrpc.JobServiceStub(tc.channel)
    commits: list[int] = []
    tc.control_plane.commits.on_commit = commits.append

    async def burst(name: str) -> float:
        commits.clear()

        async def caller(k: int) -> None:
            for i in range(20):
                await jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec(f"{name}-c{k}-{i}")))
        await asyncio.gather(*(caller(k) for k in range(50)))
        assert sum(commits) == 1000
        return sum(commits) / len(commits)

    window = tc.control_plane.commits.window_s
    tc.control_plane.commits.window_s = 0.0  # only the calls already delivered join a commit
    alone = await burst("alone")
    tc.control_plane.commits.window_s = window
    shared = await burst("shared")
    assert shared >= 4 * alone, (alone, shared)
