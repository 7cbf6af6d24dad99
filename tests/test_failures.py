"""Failure: lost agents, broken streams, and a control plane killed with SIGKILL.

DESIGN.md: an agent that stops heartbeating is declared dead after a timeout
and its jobs go back to the queue from their last checkpointed iteration;
after a crash the control plane reloads, agents reconnect and report what they
run, and no job is lost or run twice.
"""

from __future__ import annotations

import collections
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc

from halyard.controlplane.store import SqliteStore
from halyard.datamodel import EventKind, JobState
from halyard.testing import TestCluster
from halyard.testing.cluster import small_cluster_toml
from halyard.v1 import cluster_service_pb2 as cpb
from halyard.v1 import cluster_service_pb2_grpc as cgrpc
from halyard.v1 import job_service_pb2 as jpb
from halyard.v1 import job_service_pb2_grpc as jgrpc
from halyard.v1 import types_pb2 as tpb


def spec(job_id: str, gpus: int, iterations: int) -> tpb.JobSpec:
    return tpb.JobSpec(job_id=job_id, model="resnet50", num_gpus=gpus, iterations=iterations)


async def test_lost_agent_requeues_from_checkpoint_and_finishes_elsewhere():
    async with TestCluster(nodes=2, heartbeat_s=0.05, heartbeat_timeout_s=0.3) as tc:
        jobs = jgrpc.JobServiceStub(tc.channel)
        await jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec("a", 8, 10_000)))
        await tc.wait_for(lambda: tc.job("a").state is JobState.RUNNING)
        node = tc.job("a").allocation.node_names[0]
        await tc.wait_for(lambda: "a" in tc.agents[node].jobs)
        step = tc.job("a").iteration_s
        await tc.advance(1000.5 * step)  # 1000 whole iterations and half of the next
        await tc.stop_agent(node)
        await tc.wait_for(lambda: tc.job("a").preemptions == 1)
        record = tc.job("a")
        assert record.iterations_done(tc.now()) == 1000  # resumes from its last checkpoint
        await tc.wait_for(lambda: tc.job("a").state is JobState.RUNNING)
        assert tc.job("a").allocation.node_names != (node,)  # on the surviving node
        await tc.advance(tc.job("a").finish_time() - tc.now() + 1)
        await tc.wait_for(lambda: tc.job("a").state is JobState.COMPLETED)
        kinds = [e.kind for e in tc.control_plane.core.log if e.job_id == "a"]
        assert kinds == [EventKind.SUBMITTED, EventKind.STARTED, EventKind.PREEMPTED, EventKind.REQUEUED,
                         EventKind.STARTED, EventKind.COMPLETED]


async def test_broken_stream_reconnects_without_losing_the_job():
    async with TestCluster(nodes=1, heartbeat_s=0.05, heartbeat_timeout_s=2.0) as tc:
        jobs = jgrpc.JobServiceStub(tc.channel)
        await jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec("a", 4, 1000)))
        await tc.wait_for(lambda: "a" in tc.agents["r0-n0"].jobs)  # the Launch has arrived
        tc.break_stream("r0-n0")
        await tc.wait_for(lambda: "r0-n0" not in tc.control_plane.sessions)
        await tc.wait_for(lambda: "r0-n0" in tc.control_plane.sessions)  # it came back
        await tc.advance(tc.job("a").finish_time() + 1)
        await tc.wait_for(lambda: tc.job("a").state is JobState.COMPLETED)
        assert tc.job("a").preemptions == 0  # reconciliation kept it where it was


async def test_restarted_agent_without_the_job_gets_it_requeued():
    async with TestCluster(nodes=2, heartbeat_s=0.05, heartbeat_timeout_s=5.0) as tc:
        jobs = jgrpc.JobServiceStub(tc.channel)
        await jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec("a", 8, 1000)))
        await tc.wait_for(lambda: tc.job("a").state is JobState.RUNNING)
        node = tc.job("a").allocation.node_names[0]
        await tc.wait_for(lambda: "a" in tc.agents[node].jobs)
        await tc.restart_agent(node)  # a fresh agent reports no jobs: the old run is gone
        await tc.wait_for(lambda: tc.job("a").preemptions == 1)
        await tc.wait_for(lambda: tc.job("a").state is JobState.RUNNING)


# --- a real control plane process, killed with SIGKILL -----------------------------------------

SPEEDUP = 400.0  # cluster seconds per wall second
# Wall seconds a condition on the real processes may take (start-up, a wave of jobs, a restart): it only
# bounds a failure, so it is sized for a loaded shared machine, not for how fast a quiet one is.
DEADLINE_S = 300.0
ITERATIONS = 3000  # resnet50 on V100: ~700 cluster seconds, ~1.7 wall seconds per wave at SPEEDUP


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_controlplane(cluster: Path, db: Path, port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "halyard.cli", "controlplane", "--cluster", str(cluster), "--db", str(db),
         "--listen", f"127.0.0.1:{port}", "--speedup", str(SPEEDUP), "--heartbeat-s", "0.1",
         "--heartbeat-timeout-s", "3", "--log-json", "--insecure"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=os.environ | {"PYTHONUNBUFFERED": "1"})
    line = proc.stdout.readline().decode()
    assert line.startswith("listening on"), line
    return proc


def test_controlplane_killed_mid_run_loses_nothing_and_runs_nothing_twice(tmp_path):
    cluster = tmp_path / "cluster.toml"
    cluster.write_text(small_cluster_toml(2), encoding="utf-8")
    db, port = tmp_path / "state.db", free_port()
    cp = start_controlplane(cluster, db, port)
    agents = [subprocess.Popen([sys.executable, "-m", "halyard.cli", "agent", "--control-plane",
                                f"127.0.0.1:{port}", "--node", node, "--cluster", str(cluster), "--insecure"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
              for node in ("r0-n0", "r0-n1")]
    ids = [f"j{i}" for i in range(8)]
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = jgrpc.JobServiceStub(channel)
            wait_until(lambda: cluster_ready(channel), DEADLINE_S)
            for job_id in ids:
                stub.SubmitJob(jpb.SubmitJobRequest(spec=spec(job_id, 4, ITERATIONS)), timeout=5)
            wait_until(lambda: states(stub).count(tpb.COMPLETED) >= 1, DEADLINE_S)
        os.kill(cp.pid, signal.SIGKILL)  # mid-run: some done, some running, some waiting
        cp.wait()
        cp = start_controlplane(cluster, db, port)
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = jgrpc.JobServiceStub(channel)
            wait_until(lambda: states(stub) == [tpb.COMPLETED] * len(ids), DEADLINE_S)
    finally:
        for proc in (cp, *agents):
            proc.send_signal(signal.SIGTERM)
        for proc in (cp, *agents):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
    events = SqliteStore(db).load().events
    by_job = collections.defaultdict(list)
    for e in events:
        by_job[e.job_id].append(e.kind)
    assert sorted(by_job) == ids  # none lost
    for job_id, kinds in by_job.items():
        assert kinds.count(EventKind.SUBMITTED) == 1 and kinds.count(EventKind.COMPLETED) == 1, (job_id, kinds)
        running = 0  # never two runs at once: every start is closed by a requeue or the completion
        for kind in kinds:
            running += {EventKind.STARTED: 1, EventKind.PREEMPTED: -1, EventKind.COMPLETED: -1}.get(kind, 0)
            assert running in (0, 1), (job_id, kinds)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


def states(stub) -> list[int]:
    return [j.state for j in stub.ListJobs(jpb.ListJobsRequest(page_size=100), timeout=5).jobs]


def cluster_ready(channel) -> bool:
    status = cgrpc.ClusterServiceStub(channel).GetCluster(cpb.GetClusterRequest(), timeout=5)
    return all(n.connected for n in status.nodes)


def wait_until(predicate, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return
        except grpc.RpcError:
            pass  # the control plane is (re)starting
        if time.monotonic() > deadline:
            raise TimeoutError(f"not reached within {timeout} s")
        time.sleep(0.05)


async def test_losing_any_node_of_a_multi_node_job_requeues_it():
    async with TestCluster(nodes=3, heartbeat_s=0.05, heartbeat_timeout_s=0.3) as tc:
        jobs = jgrpc.JobServiceStub(tc.channel)
        await jobs.SubmitJob(jpb.SubmitJobRequest(spec=spec("wide", 16, 10_000)))
        await tc.wait_for(lambda: tc.job("wide").state is JobState.RUNNING)
        leader, follower = tc.job("wide").allocation.node_names
        await tc.wait_for(lambda: all("wide" in tc.agents[n].jobs for n in (leader, follower)))
        assert tc.agents[leader].jobs["wide"].leader and not tc.agents[follower].jobs["wide"].leader
        first = tc.job("wide").attempt
        await tc.stop_agent(follower)  # the follower, not the leader
        await tc.wait_for(lambda: tc.job("wide").preemptions == 1)
        await tc.wait_for(lambda: tc.job("wide").state is JobState.RUNNING)
        again = tc.job("wide")
        # the two nodes left, the leader among them: it stopped the old attempt and runs the new one
        assert sorted(again.allocation.node_names) == sorted(set(tc.agents) - {follower})
        assert again.attempt != first
        await tc.wait_for(lambda: all(getattr(tc.agents[n].jobs.get("wide"), "attempt", None) == again.attempt
                                      for n in again.allocation.node_names))
