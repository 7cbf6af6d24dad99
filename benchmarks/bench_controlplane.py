"""Control plane speed: SubmitJob throughput, agents held at 1 s heartbeats, replay speed-up.

    .venv/bin/python benchmarks/bench_controlplane.py [--submits 2000] [--agents 64,256,512]
        [--replay-jobs 2000] [--replay-nodes 64] [--speedup 2000]

1. SubmitJob throughput against a `halyard controlplane` process (one client,
   and 8 concurrent clients), with GetCluster (a read that changes nothing and
   persists nothing) measured in the same run as the baseline: the ratio says
   what validation, scheduling and the SQLite commit add per request.
2. Agents held: N emulated agents (1 s heartbeats) connected to a control
   plane process for 10 s; its CPU use from /proc (per cent of one core),
   against the same process idle with no agents.
3. Replay: a 2,000-job Synergy trace over 64 nodes through simulate and
   replay; the speed-up reached and whether the placements match.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

from halyard.agent.emulated import EmulatedAgent
from halyard.datamodel import EventKind, parse_cluster
from halyard.emulator import PerformanceModel
from halyard.experiments.replay import replay
from halyard.policies import make_policy
from halyard.scheduling import Simulator, summarize
from halyard.testing.cluster import small_cluster_toml
from halyard.traces import generate_synergy_trace
from halyard.v1 import cluster_service_pb2 as cpb
from halyard.v1 import cluster_service_pb2_grpc as cgrpc
from halyard.v1 import job_service_pb2 as jpb
from halyard.v1 import job_service_pb2_grpc as jgrpc
from halyard.v1 import types_pb2 as tpb

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def start_controlplane(folder: Path, nodes: int, port: int, *extra: str) -> subprocess.Popen[bytes]:
    cluster = folder / "cluster.toml"
    cluster.write_text(small_cluster_toml(nodes), encoding="utf-8")
    proc = subprocess.Popen([sys.executable, "-m", "halyard.cli", "controlplane", "--cluster", str(cluster),
                             "--db", str(folder / f"state-{port}.db"), "--listen", f"127.0.0.1:{port}",
                             "--log-json", "--insecure", *extra], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout.readline().startswith(b"listening on")
    return proc


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


async def rate(n: int, clients: int, call) -> float:
    async def worker(k: int) -> None:
        for i in range(k, n, clients):
            await call(i)
    started = time.perf_counter()
    await asyncio.gather(*(worker(k) for k in range(clients)))
    return n / (time.perf_counter() - started)


async def bench_submit(folder: Path, n: int, in_flight: list[int]) -> None:
    proc = start_controlplane(folder, 4, 50611)
    try:
        async with grpc.aio.insecure_channel("127.0.0.1:50611") as channel:
            jobs, cluster = jgrpc.JobServiceStub(channel), cgrpc.ClusterServiceStub(channel)
            for clients in in_flight:
                base = await rate(n, clients, lambda i: cluster.GetCluster(cpb.GetClusterRequest()))
                sub = await rate(n, clients, lambda i, c=clients: jobs.SubmitJob(jpb.SubmitJobRequest(spec=tpb.JobSpec(
                    job_id=f"c{c}-{i}", model="resnet50", num_gpus=1, iterations=10**9))))
                print(f"SubmitJob, {clients} client(s): {sub:8.0f} jobs/s   GetCluster {base:8.0f}/s   "
                      f"ratio {sub / base:.2f}")
    finally:
        proc.terminate()
        proc.wait()


async def bench_agents(folder: Path, counts: list[int], window_s: float = 10.0) -> None:
    for n in counts:
        proc = start_controlplane(folder, n, 50612 + n)
        cluster = parse_cluster(small_cluster_toml(n))
        try:
            await asyncio.sleep(1.0)
            idle0 = cpu_seconds(proc.pid)
            await asyncio.sleep(window_s)
            idle = (cpu_seconds(proc.pid) - idle0) / window_s
            agents = [EmulatedAgent(f"127.0.0.1:{50612 + n}", node) for node in cluster.nodes]
            for agent in agents:
                agent.start()
            await asyncio.wait_for(asyncio.gather(*(a.connected.wait() for a in agents)), 60)
            busy0 = cpu_seconds(proc.pid)
            await asyncio.sleep(window_s)
            busy = (cpu_seconds(proc.pid) - busy0) / window_s
            print(f"{n:5d} agents at 1 s heartbeats: control plane CPU {100 * busy:5.1f}% of a core "
                  f"(idle {100 * idle:4.1f}%), {1e3 * (busy - idle) / n:.3f} ms CPU per agent-second")
            for agent in agents:
                await agent.stop()
        finally:
            proc.terminate()
            proc.wait()


async def bench_replay(jobs_n: int, nodes: int, speedup: float) -> None:
    toml = small_cluster_toml(nodes)
    cluster = parse_cluster(toml)
    jobs = generate_synergy_trace(jobs_n, rate_per_hour=60 * nodes / 8, multi_gpu=True, seed=1,
                                  duration_scale=0.05)
    sim = Simulator(cluster, make_policy("fifo"), PerformanceModel())
    started = time.perf_counter()
    sim.run(jobs)
    sim_wall = time.perf_counter() - started
    expected = summarize(sim.core, policy="fifo", trace_jobs=len(jobs), rejected=0, wall_s=sim_wall)
    run = await replay(jobs, cluster, toml, policy="fifo", speedup=speedup)
    got = run.summary

    def starts(core):
        return [(e.job_id, e.detail) for e in core.log if e.kind is EventKind.STARTED]

    same = starts(run.core) == starts(sim.core)
    print(f"replay {jobs_n} jobs over {nodes} nodes at {speedup:g}x: reached {got['speedup_achieved']:.0f}x "
          f"({got['wall_s']:.1f} s wall; simulate {sim_wall:.2f} s), same placements in the same order: {same}, "
          f"avg JCT {got['avg_jct_s'] / expected['avg_jct_s'] - 1:+.3%}, "
          f"makespan {got['makespan_s'] / expected['makespan_s'] - 1:+.3%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--submits", type=int, default=2000)
    ap.add_argument("--in-flight", default="1,8,50", help="concurrent SubmitJob calls, e.g. 1,8,50")
    ap.add_argument("--agents", default="64,256,512")
    ap.add_argument("--replay-jobs", type=int, default=2000)
    ap.add_argument("--replay-nodes", type=int, default=64)
    ap.add_argument("--speedup", type=float, default=2000.0)
    ap.add_argument("--only", choices=["submit", "agents", "replay"], default=None)
    args = ap.parse_args()
    from halyard.logs import configure_logging

    configure_logging(level="error")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if args.only in (None, "submit"):
            asyncio.run(bench_submit(folder, args.submits, [int(x) for x in args.in_flight.split(",")]))
        if args.only in (None, "agents"):
            asyncio.run(bench_agents(folder, [int(x) for x in args.agents.split(",")]))
    if args.only in (None, "replay"):
        asyncio.run(bench_replay(args.replay_jobs, args.replay_nodes, args.speedup))


if __name__ == "__main__":
    main()
