"""Soak: SIGKILL the control plane N times while thousands of jobs run; count lost, duplicated, re-run.

    .venv/bin/python benchmarks/soak_kill.py [--jobs 2000] [--kills 20] [--nodes 4] [--speedup 200]
        [--seed 1] [--out soak.json]

A `halyard controlplane` process (insecure mode, loopback, a SQLite file) and one
emulated `halyard agent` process per node; a client submits the jobs at a steady
rate (retrying while the control plane is down; ALREADY_EXISTS means an earlier
try was stored before its answer was lost), while a killer sends the control plane
SIGKILL every few seconds and starts it again on the same database and port. When
every job has ended, the store is read back and counted:

* lost: a job the client saw accepted that the store does not hold, or that did
  not end COMPLETED;
* duplicated: a job submitted (SUBMITTED) or completed (COMPLETED) more than once;
* re-run: a job an agent ran more than once: more than one Launch received by its
  leader (the agents' JSON logs). The policy is FIFO, which never preempts, so a
  second run means a requeue of a job that had run: an exit lost around a kill, or
  an agent not back within the heartbeat timeout. A job whose Launch was lost in the
  kill (its start was stored, the agent never got it) is requeued and runs once; the
  store counts it as started twice, which is reported apart (``restarted_in_store``).

Sends traffic to 127.0.0.1 only and stops by itself (``--timeout-s``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

from halyard.testing.cluster import small_cluster_toml
from halyard.v1 import job_service_pb2 as jpb
from halyard.v1 import job_service_pb2_grpc as jgrpc
from halyard.v1 import types_pb2 as tpb

CLI = [sys.executable, "-m", "halyard.cli"]
RETRY = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}
HEARTBEAT_TIMEOUT_S = 10.0  # agents reconnect with at most 2 s backoff; a restart takes 1-3 s


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ControlPlane:
    def __init__(self, folder: Path, cluster: Path, port: int, speedup: float) -> None:
        self.args = [*CLI, "controlplane", "--cluster", str(cluster), "--db", str(folder / "state.db"), "--listen",
                     f"127.0.0.1:{port}", "--insecure", "--speedup", str(speedup), "--heartbeat-s", "0.2",
                     "--heartbeat-timeout-s", str(HEARTBEAT_TIMEOUT_S), "--log-json"]
        self.log = open(folder / "controlplane.log", "ab")  # noqa: SIM115 - appended across restarts
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=self.log,
                                     env=os.environ | {"PYTHONUNBUFFERED": "1"})
        line = self.proc.stdout.readline()
        if not line.startswith(b"listening on"):
            raise SystemExit(f"the control plane did not start: {line!r}")

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)


async def submit_all(stub: jgrpc.JobServiceStub, specs: list[tpb.JobSpec], rate: float,
                     accepted: set[str]) -> None:
    started = time.monotonic()
    for i, spec in enumerate(specs):
        await asyncio.sleep(max(0.0, started + i / rate - time.monotonic()))
        while True:
            try:
                await stub.SubmitJob(jpb.SubmitJobRequest(spec=spec), timeout=5)
                break
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.ALREADY_EXISTS:
                    break  # stored by an earlier try whose answer was lost in the kill
                if exc.code() not in RETRY:
                    raise SystemExit(f"SubmitJob {spec.job_id}: {exc.code().name}: {exc.details()}") from None
                await asyncio.sleep(0.05)
        accepted.add(spec.job_id)


async def all_ended(stub: jgrpc.JobServiceStub, count: int) -> bool:
    try:
        jobs, token = [], ""
        while True:
            page = await stub.ListJobs(jpb.ListJobsRequest(page_size=1000, page_token=token), timeout=5)
            jobs.extend(page.jobs)
            if not (token := page.next_page_token):
                break
    except grpc.aio.AioRpcError:
        return False
    return len(jobs) == count and all(j.state in (tpb.COMPLETED, tpb.FAILED, tpb.CANCELLED) for j in jobs)


async def soak(args: argparse.Namespace, folder: Path) -> dict[str, object]:
    cluster = folder / "cluster.toml"
    cluster.write_text(small_cluster_toml(args.nodes), encoding="utf-8")
    port = free_port()
    cp = ControlPlane(folder, cluster, port, args.speedup)
    cp.start()
    nodes = [f"r{i // 4}-n{i % 4}" for i in range(args.nodes)]
    agent_logs = [open(folder / f"agent-{node}.log", "wb") for node in nodes]  # noqa: SIM115
    agents = [subprocess.Popen([*CLI, "agent", "--control-plane", f"127.0.0.1:{port}", "--node", node, "--cluster",
                                str(cluster), "--insecure", "--log-json"], stdout=subprocess.DEVNULL, stderr=out)
              for node, out in zip(nodes, agent_logs, strict=True)]
    rng = random.Random(args.seed)
    specs = [tpb.JobSpec(job_id=f"s{i}", model="resnet50", num_gpus=rng.choice([1, 1, 2, 4, 8]),
                         iterations=rng.randint(50, 600)) for i in range(args.jobs)]
    accepted: set[str] = set()
    kills, wall = 0, time.monotonic()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = jgrpc.JobServiceStub(channel)
            submitter = asyncio.create_task(submit_all(stub, specs, args.rate, accepted))
            submit_span = args.jobs / args.rate
            interval = submit_span / (args.kills + 1)
            for _ in range(args.kills):
                await asyncio.sleep(interval * rng.uniform(0.6, 1.4))
                cp.kill()
                kills += 1
                await asyncio.sleep(rng.uniform(0.0, 0.5))  # down for a moment: calls fail and are retried
                cp.start()
                print(f"kill {kills}/{args.kills}: {len(accepted)} of {args.jobs} jobs accepted", flush=True)
            await submitter
            deadline = time.monotonic() + args.timeout_s
            while not await all_ended(stub, args.jobs):
                if time.monotonic() > deadline:
                    print("timed out waiting for the jobs to end", flush=True)
                    break
                await asyncio.sleep(0.5)
    finally:
        for agent in agents:
            agent.terminate()
        status = cp.stop()
        for agent in agents:
            with contextlib.suppress(subprocess.TimeoutExpired):
                agent.wait(timeout=10)
        for out in agent_logs:
            out.close()
    return count(folder, accepted, kills, time.monotonic() - wall, status)


def launches(folder: Path) -> collections.Counter[str]:
    """Launches each job's leader agent received (distinct attempts), from the agents' JSON logs."""
    seen: set[tuple[str, int]] = set()
    for path in folder.glob("agent-*.log"):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if entry.get("event") == "launch received" and entry.get("leader"):
                    seen.add((entry["job"], int(entry["attempt"])))
    return collections.Counter(job for job, _ in seen)


def count(folder: Path, accepted: set[str], kills: int, wall_s: float, status: int) -> dict[str, object]:
    with contextlib.closing(sqlite3.connect(folder / "state.db")) as conn:
        states = dict(conn.execute("SELECT job_id, state FROM jobs").fetchall())
        events = conn.execute("SELECT job_id, kind, detail FROM events ORDER BY seq").fetchall()
    per_job: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    requeues: collections.Counter[str] = collections.Counter()
    for job_id, kind, detail in events:
        per_job[job_id][kind] += 1
        if kind in ("REQUEUED", "PREEMPTED"):
            requeues[detail.split(":")[0][:60]] += 1
    lost = sorted(j for j in accepted if states.get(j) != "COMPLETED")
    duplicated = sorted(j for j, c in per_job.items() if c["SUBMITTED"] > 1 or c["COMPLETED"] > 1)
    ran = launches(folder)
    rerun = sorted(j for j, n in ran.items() if n > 1)
    restarted = sorted(j for j, c in per_job.items() if c["STARTED"] > 1)
    return {"jobs_accepted": len(accepted), "jobs_stored": len(states), "kills": kills, "wall_s": round(wall_s, 1),
            "final_exit_status": status, "lost": len(lost), "duplicated": len(duplicated), "rerun": len(rerun),
            "lost_ids": lost[:20], "duplicated_ids": duplicated[:20], "rerun_ids": rerun[:20],
            "jobs_launched_by_agents": len(ran), "restarted_in_store": len(restarted),
            "restarted_in_store_ids": restarted[:20],
            "requeue_reasons": dict(requeues)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--speedup", type=float, default=200.0, help="cluster seconds per wall second")
    parser.add_argument("--rate", type=float, default=40.0, help="jobs submitted per wall second")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout-s", type=float, default=600.0, help="wall seconds to wait for the last jobs")
    parser.add_argument("--out", type=Path, default=None, help="write the counts as JSON here")
    parser.add_argument("--keep", type=Path, default=None, metavar="DIR",
                        help="run in DIR and keep the database and logs (default: a temporary directory)")
    args = parser.parse_args()
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        result = asyncio.run(soak(args, args.keep))
    else:
        with tempfile.TemporaryDirectory(prefix="halyard-soak-") as tmp:
            result = asyncio.run(soak(args, Path(tmp)))
    print(json.dumps(result, indent=2))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    ok = result["lost"] == result["duplicated"] == result["rerun"] == 0 and result["jobs_accepted"] == args.jobs
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
