"""Ingest: SubmitJob and SubmitJobs throughput against GetCluster, and the control plane alone.

    .venv/bin/python benchmarks/bench_ingest.py [--calls 3000] [--in-flight 1,50] [--batch 100]
        [--batch-calls 300] [--client-procs 2] [--window-ms 1,0] [--queue 0] [--repeat 3] [--inproc 20000]

1. Over gRPC, against a `halyard controlplane` process (SQLite file, insecure loopback):
   GetCluster (a read that changes nothing and stores nothing: the gRPC ceiling of this
   server), unary SubmitJob, and SubmitJobs with ``--batch`` jobs per call, each at every
   ``--in-flight`` count of concurrent calls spread over ``--client-procs`` client
   processes (one Python client saturates before the server does). Every submission is
   answered only once it is stored. Printed per row: calls/s and jobs/s seen by the
   clients, the server's CPU per call and per job (utime + stime from /proc), jobs per
   second of server CPU (what one core sustains), how long a call waits for its answer as
   its client sees it (p50 / p99; a submission is answered once stored), and both ratios
   against GetCluster in the same run.
2. In-process (no gRPC): the control plane's own submit path (validation, the group commit's
   pass and SQLite transaction) with 1 and 50 submitters; 1 in flight is one pass and one
   commit per job, as before group commit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import grpc
import numpy as np
from bench_controlplane import cpu_seconds, start_controlplane

from halyard.clock import ManualClock
from halyard.controlplane.service import ControlPlane
from halyard.controlplane.store import SqliteStore
from halyard.datamodel import JobSpec, parse_cluster
from halyard.datamodel.limits import MAX_SUBMIT_BATCH
from halyard.emulator import PerformanceModel
from halyard.policies import make_policy
from halyard.testing.cluster import small_cluster_toml
from halyard.v1 import cluster_service_pb2 as cpb
from halyard.v1 import cluster_service_pb2_grpc as cgrpc
from halyard.v1 import job_service_pb2 as jpb
from halyard.v1 import job_service_pb2_grpc as jgrpc
from halyard.v1 import types_pb2 as tpb

PORT = 50631
NODES = 4
BARE_SERVER = """
import asyncio, sys, grpc
from halyard.v1 import cluster_service_pb2 as cpb, cluster_service_pb2_grpc as cgrpc
class Bare(cgrpc.ClusterServiceServicer):
    async def GetCluster(self, request, context):
        return cpb.ClusterStatus()
async def main():
    server = grpc.aio.server()
    cgrpc.add_ClusterServiceServicer_to_server(Bare(), server)
    server.add_insecure_port(f"127.0.0.1:{sys.argv[1]}")
    await server.start()
    print("listening", flush=True)
    await server.wait_for_termination()
asyncio.run(main())
"""


def _spec(job_id: str) -> tpb.JobSpec:
    return tpb.JobSpec(job_id=job_id, model="resnet50", num_gpus=1, iterations=10**9)


async def _client(address: str, mode: str, calls: int, in_flight: int, batch: int, tag: str) -> dict[str, float]:
    """One client process's share: ``calls`` calls, ``in_flight`` at a time; wall times as Unix seconds."""
    async with grpc.aio.insecure_channel(address) as channel:
        jobs, cluster = jgrpc.JobServiceStub(channel), cgrpc.ClusterServiceStub(channel)
        await cluster.GetCluster(cpb.GetClusterRequest())  # connected before the clock starts
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)  # every client starts together

        async def one(i: int) -> None:
            if mode == "get":
                await cluster.GetCluster(cpb.GetClusterRequest())
            elif mode == "submit":
                await jobs.SubmitJob(jpb.SubmitJobRequest(spec=_spec(f"{tag}-{i}")))
            else:
                reply = await jobs.SubmitJobs(jpb.SubmitJobsRequest(
                    jobs=[jpb.SubmitJobRequest(spec=_spec(f"{tag}-{i}-{k}")) for k in range(batch)]))
                bad = [r.error.message for r in reply.results if r.WhichOneof("result") != "job"]
                if bad:
                    raise RuntimeError(f"SubmitJobs refused {len(bad)} jobs: {bad[0]}")

        latencies: list[float] = []  # seconds from sending a call to its answer (for a submit: stored)

        async def worker(k: int) -> None:
            for i in range(k, calls, in_flight):
                sent = time.perf_counter()
                await one(i)
                latencies.append(time.perf_counter() - sent)
        started = time.time()
        await asyncio.gather(*(worker(k) for k in range(in_flight)))
        return {"start": started, "end": time.time(), "latencies": latencies}


def _drive(pid: int, mode: str, calls: int, in_flight: int, procs: int, batch: int, tag: str,
           port: int = PORT) -> dict[str, float]:
    """Run ``procs`` client processes together; the wall time from the first start to the last end."""
    cmd = [sys.executable, __file__, "--client", mode, "--batch", str(batch), "--port", str(port)]
    share, flight = calls // procs, max(1, in_flight // procs)
    children = [subprocess.Popen([*cmd, "--calls", str(share), "--in-flight", str(flight), "--tag", f"{tag}p{p}"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE) for p in range(procs)]
    for child in children:
        if child.stdout.readline() != b"ready\n":
            raise SystemExit(f"a {mode} client did not connect")
    cpu0 = cpu_seconds(pid)
    reports = []
    for child in children:
        child.stdin.write(b"go\n")
        child.stdin.flush()
    for child in children:
        out, _ = child.communicate()
        if child.returncode != 0:
            raise SystemExit(f"a {mode} client failed (exit {child.returncode})")
        reports.append(json.loads(out))
    cpu = cpu_seconds(pid) - cpu0
    wall = max(r["end"] for r in reports) - min(r["start"] for r in reports)
    n = share * procs
    jobs = n * (batch if mode == "batch" else 1 if mode == "submit" else 0)
    p50, p99 = np.percentile([x for r in reports for x in r["latencies"]], [50, 99])
    return {"calls": n, "jobs": jobs, "wall": wall, "cpu": cpu, "p50_ms": 1e3 * p50, "p99_ms": 1e3 * p99}


def _commit_counts(http: int) -> tuple[float, float]:
    """(submissions, commits) so far, from the daemon's halyard_submit_commit_jobs histogram."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{http}/metrics", timeout=10).read().decode()
    name = "halyard_submit_commit_jobs_"
    values = dict(line.rsplit(" ", 1) for line in text.splitlines() if line.startswith(name))
    return float(values.get(name + "sum", 0)), float(values.get(name + "count", 0))


class Daemon:
    """A fresh `halyard controlplane` (its own empty database) with ``queue`` pending jobs put in first
    (SubmitJobs, not timed): every run of a row starts from the same state."""

    def __init__(self, folder: Path, window: float, queue: int) -> None:
        self.folder, self.window, self.queue, self.runs = folder, window, queue, 0

    def __enter__(self) -> Daemon:
        self.runs += 1
        where = self.folder / f"d{self.window:g}-{self.runs}"
        where.mkdir()
        self.proc = start_controlplane(where, NODES, PORT, "--group-commit-window-ms", f"{self.window:g}",
                                       "--http", f"127.0.0.1:{PORT + 1}")
        if self.queue:
            _drive(self.proc.pid, "batch", max(1, self.queue // MAX_SUBMIT_BATCH), 4, 1, MAX_SUBMIT_BATCH, "queue")
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait()


def _median_run(repeat: int, daemon: Daemon, mode: str, calls: int, in_flight: int, procs: int, batch: int,
                tag: str) -> dict[str, float]:
    """:func:`_drive` ``repeat`` times, each on a fresh daemon: the median wall time and median server CPU
    (a shared machine is noisy), and the jobs per group commit over all runs."""
    runs, jobs, commits = [], 0.0, 0.0
    for k in range(repeat):
        with daemon:
            jobs0, commits0 = _commit_counts(PORT + 1)
            runs.append(_drive(daemon.proc.pid, mode, calls, in_flight, procs, batch, f"{tag}r{k}"))
            jobs1, commits1 = _commit_counts(PORT + 1)
            jobs, commits = jobs + jobs1 - jobs0, commits + commits1 - commits0
    return runs[0] | {"wall": statistics.median(r["wall"] for r in runs),
                      "cpu": statistics.median(r["cpu"] for r in runs), "per_commit": jobs / max(1.0, commits),
                      "p50_ms": statistics.median(r["p50_ms"] for r in runs),
                      "p99_ms": statistics.median(r["p99_ms"] for r in runs)}


def bench_floor(folder: Path, calls: int, flight: int, procs: int, repeat: int) -> None:
    """The same GetCluster load against a bare grpc.aio server whose handler returns an empty message:
    what gRPC alone costs per unary call here, so the most unary calls one core can answer."""
    proc = subprocess.Popen([sys.executable, "-c", BARE_SERVER, str(PORT + 2)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline().startswith(b"listening")
        runs = [_drive(proc.pid, "get", calls, flight, procs, 1, "f", PORT + 2) for _ in range(repeat)]
        r = runs[0] | {"wall": statistics.median(r["wall"] for r in runs),
                       "cpu": statistics.median(r["cpu"] for r in runs)}
        print(f"{flight:3d} in flight: bare grpc.aio server, empty reply: {r['calls'] / r['wall']:7.0f} calls/s, "
              f"server {1e3 * r['cpu'] / r['calls']:.3f} ms CPU/call = {r['calls'] / r['cpu']:7.0f} calls per "
              f"CPU-second (the ceiling of any unary RPC on one core), answered in {r['p50_ms']:.2f} ms (p50)")
    finally:
        proc.terminate()
        proc.wait()


def bench_grpc(folder: Path, calls: int, batch_calls: int, in_flight: list[int], batch: int, procs: int,
               windows: list[float], repeat: int, queue: int) -> None:
    for window in windows:
        daemon = Daemon(folder, window, queue)
        print(f"-- halyard controlplane --group-commit-window-ms {window:g}, {queue} jobs pending at the start "
              f"(median of {repeat} runs a row, each on a fresh daemon)")
        for flight in in_flight:
            p = min(procs, flight)
            base = _median_run(repeat, daemon, "get", calls, flight, p, batch, "g")
            base_rate, base_core = base["calls"] / base["wall"], base["calls"] / base["cpu"]
            print(f"{flight:3d} in flight, {p} client process(es): GetCluster {base_rate:7.0f} calls/s, "
                  f"server {1e3 * base['cpu'] / base['calls']:.3f} ms CPU/call = {base_core:7.0f} calls per "
                  f"CPU-second, answered in {base['p50_ms']:.2f} / {base['p99_ms']:.2f} ms (p50 / p99)")
            for mode, label in (("submit", "SubmitJob"), ("batch", f"SubmitJobs x{batch}")):
                n = calls if mode == "submit" else batch_calls
                r = _median_run(repeat, daemon, mode, n, flight, p, batch, f"{mode[0]}{flight}")
                rate, core = r["jobs"] / r["wall"], r["jobs"] / r["cpu"]
                print(f"    {label:15s} {r['calls'] / r['wall']:7.0f} calls/s {rate:8.0f} jobs/s, server "
                      f"{1e3 * r['cpu'] / r['calls']:.3f} ms CPU/call, {1e3 * r['cpu'] / r['jobs']:.3f} ms/job = "
                      f"{core:7.0f} jobs per CPU-second, {r['per_commit']:5.1f} jobs/commit, acknowledged (stored) "
                      f"in {r['p50_ms']:.2f} / {r['p99_ms']:.2f} ms (p50 / p99);  vs GetCluster: "
                      f"jobs/s {rate / base_rate:.2f}x, per CPU-second {core / base_core:.2f}x")


async def bench_inproc(folder: Path, n: int, in_flight: list[int]) -> None:
    toml = small_cluster_toml(NODES)
    cluster = parse_cluster(toml)
    rates = {}
    for flight in in_flight:
        store = SqliteStore(folder / f"inproc-{flight}.db")
        cp = ControlPlane(cluster, make_policy("fifo"), PerformanceModel(), ManualClock(0.0), store, cluster_toml=toml)
        await cp.start()
        commits: list[int] = []
        cp.commits.on_commit = commits.append

        async def submitter(k: int, cp: ControlPlane = cp, flight: int = flight) -> None:
            for i in range(k, n, flight):
                cp.submit(JobSpec(job_id=f"j{i}", submit_time=0.0, model="resnet50", num_gpus=1, iterations=10**9))
                await cp.committed()
        started = time.perf_counter()
        await asyncio.gather(*(submitter(k) for k in range(flight)))
        rates[flight] = n / (time.perf_counter() - started)
        await cp.stop()
        store.close()
        print(f"in-process control plane, {flight:3d} submitter(s): {rates[flight]:8.0f} submits/s, "
              f"{len(commits)} commits ({n / len(commits):.1f} jobs each), {cp.core.passes} passes"
              + (f";  {rates[flight] / rates[in_flight[0]]:.2f}x {in_flight[0]} submitter(s)" if flight != in_flight[0]
                 else ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=3000, help="GetCluster and SubmitJob calls per row")
    ap.add_argument("--in-flight", default="1,50")
    ap.add_argument("--batch", type=int, default=100, help="jobs per SubmitJobs call")
    ap.add_argument("--batch-calls", type=int, default=300, help="SubmitJobs calls per row")
    ap.add_argument("--window-ms", default="1,0", help="the daemon's --group-commit-window-ms, one run each")
    ap.add_argument("--queue", type=int, default=0, help="pending jobs put in before each run (a long queue)")
    ap.add_argument("--client-procs", type=int, default=2)
    ap.add_argument("--inproc", type=int, default=20000, help="submissions for the in-process rows (0: skip)")
    ap.add_argument("--client", choices=["get", "submit", "batch"], help=argparse.SUPPRESS)
    ap.add_argument("--tag", default="", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=PORT, help=argparse.SUPPRESS)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each row; the median is printed")
    args = ap.parse_args()
    if args.client:
        report = asyncio.run(_client(f"127.0.0.1:{args.port}", args.client, args.calls, int(args.in_flight),
                                     args.batch, args.tag))
        print(json.dumps(report))
        return
    from halyard.logs import configure_logging

    configure_logging(level="error")
    in_flight = [int(x) for x in args.in_flight.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        bench_grpc(Path(tmp), args.calls, args.batch_calls, in_flight, args.batch, args.client_procs,
                   [float(x) for x in args.window_ms.split(",")], args.repeat, args.queue)
        bench_floor(Path(tmp), args.calls, max(in_flight), min(args.client_procs, max(in_flight)), args.repeat)
        if args.inproc:
            asyncio.run(bench_inproc(Path(tmp), args.inproc, in_flight))


if __name__ == "__main__":
    main()
