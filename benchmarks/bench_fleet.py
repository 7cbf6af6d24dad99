"""Agent fleet: N emulated agents in M processes start together against one control plane.

    .venv/bin/python benchmarks/bench_fleet.py [--agents 100,1000,2000,5000] [--processes 4]
        [--hold-s 10] [--idle-s 3] [--connect-timeout-s 120] [--full-cluster] [--mtls] [--jobs 0]

For each N: a `halyard controlplane` process (real sockets, SQLite, 1 s heartbeats, 5 s
timeout) on a cluster of N nodes (4 per rack); M worker processes each parse the cluster
file once and start their share of the agents at one agreed instant (a cold start: every
agent dials at once), each agent on its own TCP connection. Reported per N:

* connect time, p50/p99/max: from the agreed start to the agent's Registered;
* agents that never connected within --connect-timeout-s;
* re-registrations (an agent registered more than once: its stream was cut, typically
  after the control plane declared it silent) and the control plane's own count of
  "agent missed its heartbeats" (from its log) up to the end of the hold, and apart
  from it those logged while the workers tear the fleet down;
* silent agents: agent streams that went 2.5 s (half the heartbeat timeout, what the lost-agent
  guard judges on) or more without a processed message after their Registered, at any time
  from the connect storm to the end of the hold (the control plane's
  ``halyard_agent_quiet_streams_total``, each stream once);
* agents silent past the heartbeat timeout but held by the lost-agent guard (the most at any
  poll of the control plane's /metrics, ``halyard_agents_silent``) and the share of polls on which
  the guard held (``halyard_agent_disruption`` > 0: many silent at once; controlplane/disruption.py);
* control-plane CPU (process CPU seconds per wall second, from /proc) while idle before
  the agents start (the baseline of the same run), while they connect, and holding
  1 s heartbeats for --hold-s once all are in; per agent it is the held CPU over idle.
* the workers' CPU, to tell a slow client from a slow control plane.

--bare runs, in the same run and after the others, the largest fleet against a bare grpc.aio
AgentService instead (it answers Register with the agent's node and reads every message, nothing
else): what gRPC alone costs per agent-second here, so the most agents one core can hold.

--mtls runs the fleet as production does: a cluster CA, a certificate per node, and every agent
on its own mutual-TLS connection to the control plane's agent port (the handshakes are the
connect storm's heaviest part); without it, plaintext on one loopback port (insecure mode).

--jobs J submits J jobs of a whole node each (8 GPUs, running far longer than the run) before the
agents start: as the fleet registers, each node that comes up is placed work by a scheduling
pass over the queue, as after a restart of a loaded cluster (with J > N, J - N stay pending).

--restart then kills the control plane (SIGKILL) and starts it again on the same store and ports:
every agent reconnects within its backoff (at most 2.4 s) and registers again, reporting its
jobs for reconciliation; the restarted control plane's silent agents and guard are reported.

--full-cluster makes the agents register without the file's digest, so the control plane
ships the whole cluster file to each and each agent parses it: the protocol before
node-scoped registration, for comparison in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
from bench_controlplane import cpu_seconds

from halyard.testing.cluster import small_cluster_toml

BARE_SERVER = """
import asyncio, sys, time, grpc
from halyard.datamodel import cluster_digest, parse_cluster
from halyard.v1 import agent_service_pb2 as apb, agent_service_pb2_grpc as agrpc
from halyard.wire import node_to_pb
text = open(sys.argv[2]).read()
cluster, digest = parse_cluster(text), cluster_digest(text)
class Bare(agrpc.AgentServiceServicer):
    async def Connect(self, requests, context):
        first = await anext(aiter(requests))
        name = first.register.node.name
        yield apb.ControlMessage(registered=apb.Registered(
            node=name, node_spec=node_to_pb(cluster.node(name)), cluster_digest=digest, heartbeat_interval_s=1.0,
            clock=apb.ClockParams(kind=apb.ACCELERATED, wall_origin_unix_s=time.time(), speedup=1.0)))
        async for _ in requests:
            pass
async def main():
    server = grpc.aio.server()
    agrpc.add_AgentServiceServicer_to_server(Bare(), server)
    server.add_insecure_port("127.0.0.1:" + sys.argv[1])
    await server.start()
    print("listening on", sys.argv[1], flush=True)
    await server.wait_for_termination()
asyncio.run(main())
"""
START_MARGIN_S = 0.5  # the agreed start lies this far after "go", so every worker is waiting for it
POLL_S = 0.2
OWN_CONNECTION = (("grpc.use_local_subchannel_pool", 1),)  # one TCP connection per agent, as separate machines


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class GuardWatch:
    """Polls the control plane's /metrics in a thread: the most silent agents seen, and how often the
    lost-agent guard held (many agents silent at once)."""

    def __init__(self, http_port: int) -> None:
        self.url = f"http://127.0.0.1:{http_port}/metrics"
        self.most_silent = 0
        self.quiet_streams = 0  # the latest halyard_agent_quiet_streams_total
        self.polls = 0
        self.holding = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(POLL_S * 5):
            try:
                text = urllib.request.urlopen(self.url, timeout=10).read().decode()
            except OSError:
                continue  # a starved control plane answers late: skip this poll
            values = dict(line.rsplit(" ", 1) for line in text.splitlines()
                          if line.startswith(("halyard_agents_silent ", "halyard_agent_disruption ",
                                              "halyard_agent_quiet_streams_total ")))
            self.polls += 1
            self.quiet_streams = int(float(values.get("halyard_agent_quiet_streams_total", self.quiet_streams)))
            self.most_silent = max(self.most_silent, int(float(values.get("halyard_agents_silent", 0))))
            self.holding += float(values.get("halyard_agent_disruption", 0)) > 0

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

    def final_quiet_streams(self) -> int:
        """One last read of the quiet-stream counter (the polls may have missed the end of the hold)."""
        try:
            text = urllib.request.urlopen(self.url, timeout=30).read().decode()
        except OSError:
            return self.quiet_streams
        for line in text.splitlines():
            if line.startswith("halyard_agent_quiet_streams_total "):
                self.quiet_streams = int(float(line.rsplit(" ", 1)[1]))
        return self.quiet_streams


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, 100 * q)) if values else float("nan")


# --- the worker process: its share of the agents -----------------------------------------------

async def worker_main(target: str, cluster_path: str, first: int, count: int, full_cluster: bool,
                      certs: Path | None) -> None:
    from halyard.agent.cluster_copy import ClusterCopy
    from halyard.agent.emulated import EmulatedAgent
    from halyard.emulator import PerformanceModel
    from halyard.logs import configure_logging
    from halyard.tls import ClientTLS

    configure_logging(json=True, level="error")  # the agents' info lines would cost more than they measure
    copy = ClusterCopy.load(cluster_path)
    perf = PerformanceModel()  # one per process, as replay shares it: building one loads the model catalog
    nodes = copy.cluster.nodes[first:first + count]
    registered: dict[str, list[float]] = {n.name: [] for n in nodes}

    class FleetAgent(EmulatedAgent):
        def _on_registered(self, msg) -> None:
            super()._on_registered(msg)
            registered[self.node_name].append(time.time())

    agents = [FleetAgent(target, n, perf=perf, cluster=None if full_cluster else copy, channel_options=OWN_CONNECTION,
                         tls=ClientTLS.for_node(certs, n.name) if certs is not None else None)
              for n in nodes]
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[str] = asyncio.Queue()
    threading.Thread(target=lambda: [loop.call_soon_threadsafe(lines.put_nowait, line) for line in sys.stdin],
                     daemon=True).start()
    print("ready", flush=True)  # after the imports, the parse and the agents' construction
    start_at = float((await lines.get()).split()[1])
    await asyncio.sleep(max(0.0, start_at - time.time()))
    cpu0 = time.process_time()
    for agent in agents:
        agent.start()
    stop = asyncio.create_task(lines.get())
    last = -1
    while not stop.done():
        now_in = sum(1 for times in registered.values() if times)
        if now_in != last:
            print(f"connected {now_in}", flush=True)
            last = now_in
        await asyncio.wait({stop}, timeout=POLL_S)
    busy = time.process_time() - cpu0
    connect = [times[0] - start_at for times in registered.values() if times]
    print("result " + json.dumps({"connect_s": connect, "never": sum(1 for t in registered.values() if not t),
                                  "reregistrations": sum(max(0, len(t) - 1) for t in registered.values()),
                                  "cpu_s": busy}), flush=True)
    await asyncio.gather(*(agent.stop() for agent in agents))


# --- the parent: control plane, workers, figures -------------------------------------------------

JOB_GPUS = 8  # small_cluster_toml's GPUs per node: each job takes a whole node


def submit_jobs(target: str, count: int, certs: Path | None) -> None:
    """``count`` long jobs of a node each, in SubmitJobs batches (an operator's certificate with --mtls)."""
    import grpc

    from halyard.datamodel.limits import MAX_SUBMIT_BATCH
    from halyard.tls import ClientTLS
    from halyard.v1 import job_service_pb2 as jpb
    from halyard.v1 import job_service_pb2_grpc as jgrpc
    from halyard.v1 import types_pb2 as tpb

    async def run() -> None:
        channel = (grpc.aio.secure_channel(target, ClientTLS.from_files(
            certs / "ca.crt", certs / "operator-bench.crt", certs / "operator-bench.key").credentials())
            if certs is not None else grpc.aio.insecure_channel(target))
        async with channel:
            stub = jgrpc.JobServiceStub(channel)
            for first in range(0, count, MAX_SUBMIT_BATCH):
                batch = [jpb.SubmitJobRequest(spec=tpb.JobSpec(job_id=f"j{i}", model="resnet50", num_gpus=JOB_GPUS,
                                                               iterations=10**9))
                         for i in range(first, min(count, first + MAX_SUBMIT_BATCH))]
                answer = await stub.SubmitJobs(jpb.SubmitJobsRequest(jobs=batch), timeout=120)
                refused = [r.error.message for r in answer.results if r.HasField("error")]
                if refused:
                    raise RuntimeError(f"{len(refused)} jobs refused, e.g. {refused[0]}")
    asyncio.run(run())


def make_certs(folder: Path, cluster: Path) -> Path:
    """A cluster CA, the control plane's certificate and one node certificate per node of ``cluster``."""
    from halyard.datamodel import parse_cluster
    from halyard.tls import init_ca, issue

    init_ca(folder)
    issue(folder, "operator", "bench")  # submits the jobs (--jobs) on the agent port, as operators' certificates do
    for node in parse_cluster(cluster.read_text(encoding="utf-8"), source=str(cluster)).nodes:
        issue(folder, "node", node.name)
    return folder

class Worker:
    def __init__(self, target: str, cluster: Path, first: int, count: int, full_cluster: bool,
                 certs: Path | None) -> None:
        args = [sys.executable, __file__, "--worker", target, str(cluster), str(first), str(count)]
        args += (["--full-cluster"] if full_cluster else []) + (["--certs", str(certs)] if certs else [])
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.connected = 0
        self.result: dict | None = None
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            word, _, rest = line.strip().partition(" ")
            if word == "ready":
                self.ready.set()
            elif word == "connected":
                self.connected = int(rest)
            elif word == "result":
                self.result = json.loads(rest)

    def send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()


def run_fleet(folder: Path, n: int, processes: int, args: argparse.Namespace, *, bare: bool = False) -> dict:
    cluster = folder / f"cluster-{n}.toml"
    cluster.write_text(small_cluster_toml(n), encoding="utf-8")
    port, http_port, agent_port = free_port(), free_port(), free_port()
    log_path = folder / f"controlplane-{n}{'-bare' if bare else ''}.log"
    certs = make_certs(folder / f"certs-{n}", cluster) if args.mtls and not bare else None
    security = (["--certs", str(certs), "--agent-listen", f"127.0.0.1:{agent_port}"] if certs is not None
                else ["--insecure"])
    server = ([sys.executable, "-c", BARE_SERVER, str(port), str(cluster)] if bare else
              [sys.executable, "-m", "halyard.cli", "controlplane", "--cluster", str(cluster),
               "--db", str(folder / f"state-{n}.db"), "--listen", f"127.0.0.1:{port}",
               "--log-json", *security, "--http", f"127.0.0.1:{http_port}"])
    target = f"127.0.0.1:{agent_port if certs is not None else port}"
    with log_path.open("w") as log_file:
        cp = subprocess.Popen(server, stdout=subprocess.PIPE, stderr=log_file)
    workers: list[Worker] = []
    watch: GuardWatch | None = None
    restarted: GuardWatch | None = None
    try:
        assert cp.stdout.readline().startswith(b"listening on")
        share = -(-n // processes)
        workers = [Worker(target, cluster, first, min(share, n - first), args.full_cluster, certs)
                   for first in range(0, n, share)]
        for w in workers:
            if not w.ready.wait(120):
                raise RuntimeError("a fleet worker did not start within 120 s")
        if args.jobs and not bare:
            submit_jobs(target, args.jobs, certs)
        cpu0, t0 = cpu_seconds(cp.pid), time.monotonic()
        time.sleep(args.idle_s)
        idle = (cpu_seconds(cp.pid) - cpu0) / (time.monotonic() - t0)
        watch = None if bare else GuardWatch(http_port)
        start_at = time.time() + START_MARGIN_S
        for w in workers:
            w.send(f"go {start_at}")
        time.sleep(START_MARGIN_S)
        cpu0, t0 = cpu_seconds(cp.pid), time.monotonic()
        while sum(w.connected for w in workers) < n and time.monotonic() - t0 < args.connect_timeout_s:
            time.sleep(POLL_S)
        connect_wall = time.monotonic() - t0
        connecting = (cpu_seconds(cp.pid) - cpu0) / connect_wall
        cpu0, t0 = cpu_seconds(cp.pid), time.monotonic()
        time.sleep(args.hold_s)
        held = (cpu_seconds(cp.pid) - cpu0) / (time.monotonic() - t0)
        wall = time.monotonic() - t0 + connect_wall
        measured_log = log_path.stat().st_size  # what the control plane logged before the fleet stops
        if watch is not None:
            watch.stop()
            watch.final_quiet_streams()
        if args.restart and not bare:  # kill -9, start again on the same store and ports: every agent re-dials
            cp.kill()
            cp.wait()
            with (folder / f"controlplane-{n}-restarted.log").open("w") as log_file:
                cp = subprocess.Popen(server, stdout=subprocess.PIPE, stderr=log_file)
            assert cp.stdout.readline().startswith(b"listening on")
            restarted = GuardWatch(http_port)
            time.sleep(args.hold_s)
            restarted.stop()
            restarted.final_quiet_streams()
        for w in workers:
            w.send("stop")
        deadline = time.monotonic() + 60
        while any(w.result is None for w in workers) and time.monotonic() < deadline:
            time.sleep(POLL_S)
    finally:
        if watch is not None:
            watch.stop()
        for w in workers:
            w.proc.stdin.close()
        for w in workers:
            try:
                w.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                w.proc.kill()
        cp.terminate()
        cp.wait()
    results = [w.result for w in workers if w.result is not None]
    connect = [t for r in results for t in r["connect_s"]]
    log_bytes = log_path.read_bytes()
    missed = b"agent missed its heartbeats"
    return {
        "agents": n, "processes": len(workers), "connected": len(connect),
        "never": n - len(connect),  # reported never-connected, plus agents of workers that did not report
        "connect_p50_s": percentile(connect, 0.5), "connect_p99_s": percentile(connect, 0.99),
        "connect_max_s": max(connect, default=float("nan")),
        "reregistrations": sum(r["reregistrations"] for r in results),
        "missed_heartbeats_logged": log_bytes[:measured_log].count(missed),
        "missed_while_stopping": log_bytes[measured_log:].count(missed),  # workers tearing 1,000s of agents down
        "silent_agents": watch.quiet_streams if watch else 0,  # >= 2.5 s without a processed message
        "most_silent_held": watch.most_silent if watch else 0,
        "guard_held_share": watch.holding / watch.polls if watch and watch.polls else 0.0,
        "starved_checks": log_bytes[:measured_log].count(b"liveness check ran late"),
        "cp_cpu_idle": idle, "cp_cpu_connecting": connecting, "cp_cpu_held": held,
        "cp_ms_per_agent_s": 1e3 * (held - idle) / n,
        "workers_cpu_per_s": sum(r["cpu_s"] for r in results) / wall,
        "restart": restarted is not None,  # then: what the restarted control plane saw while the fleet came back
        "restart_silent_agents": restarted.quiet_streams if restarted else 0,
        "restart_most_silent_held": restarted.most_silent if restarted else 0,
        "restart_guard_held_share": restarted.holding / restarted.polls if restarted and restarted.polls else 0.0,
        "full_cluster": args.full_cluster, "bare": bare, "mtls": certs is not None, "jobs": 0 if bare else args.jobs,
    }


def report(r: dict) -> str:
    jobs = f", {r['jobs']} jobs queued" if r["jobs"] else ""
    return (f"{'bare grpc.aio ' if r['bare'] else ''}{r['agents']:6d} agents / {r['processes']} procs"
            f"{' over mTLS' if r['mtls'] else ''}{jobs}: "
            f"connected {r['connected']:6d} "
            f"(never {r['never']}), connect p50 {r['connect_p50_s']:6.2f} s  p99 {r['connect_p99_s']:6.2f} s  "
            f"max {r['connect_max_s']:6.2f} s; re-registrations {r['reregistrations']}, missed heartbeats "
            f"{r['missed_heartbeats_logged']} (+{r['missed_while_stopping']} while stopping), silent agents "
            f"(>= 2.5 s without a processed message) {r['silent_agents']}, silent but held "
            f"at most {r['most_silent_held']} (guard holding on {100 * r['guard_held_share']:.0f}% of polls), "
            f"starved liveness checks {r['starved_checks']}; "
            f"control-plane CPU s/s idle {r['cp_cpu_idle']:.3f}  connecting "
            f"{r['cp_cpu_connecting']:.3f}  held {r['cp_cpu_held']:.3f} ({r['cp_ms_per_agent_s']:.3f} ms per "
            f"agent-second); workers {r['workers_cpu_per_s']:.2f} CPU s/s"
            + (f"; after a kill -9 and restart: silent agents {r['restart_silent_agents']}, silent but held at most "
               f"{r['restart_most_silent_held']} (guard holding on {100 * r['restart_guard_held_share']:.0f}% of "
               "polls)" if r["restart"] else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", default="100,1000,2000,5000", help="comma-separated fleet sizes; the first "
                        "is the baseline the others are compared with")
    parser.add_argument("--processes", type=int, default=4, help="worker processes the agents are spread over")
    parser.add_argument("--hold-s", type=float, default=10.0, help="seconds held at 1 s heartbeats once all are in")
    parser.add_argument("--idle-s", type=float, default=3.0, help="seconds the idle control plane is measured")
    parser.add_argument("--connect-timeout-s", type=float, default=120.0)
    parser.add_argument("--full-cluster", action="store_true",
                        help="agents register without the digest: the whole cluster file is shipped and parsed")
    parser.add_argument("--mtls", action="store_true", help="a certificate per node, each agent on its own mutual-TLS "
                        "connection to the agent port (as in production); default: insecure plaintext")
    parser.add_argument("--restart", action="store_true", help="after the hold, kill -9 the control plane and "
                        "start it again on the same store: the fleet reconnects at once (a reconnect storm), held "
                        "--hold-s more")
    parser.add_argument("--jobs", type=int, default=0, help="jobs of a whole node each submitted before the agents "
                        "start: each node that registers is placed work by a pass over the queue")
    # a worker's: the nodes' certificates
    parser.add_argument("--certs", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--bare", action="store_true", help="also run the largest fleet against a bare grpc.aio "
                        "AgentService: the gRPC floor per agent-second, in the same run")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--worker", nargs=4, metavar=("TARGET", "CLUSTER", "FIRST", "COUNT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        target, path, first, count = args.worker
        asyncio.run(worker_main(target, path, int(first), int(count), args.full_cluster, args.certs))
        return
    counts = [int(x) for x in args.agents.split(",")]
    if args.processes < 1 or any(c < 1 for c in counts):
        parser.error("--processes and every --agents count must be positive")
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start", flush=True)
    out = []
    with tempfile.TemporaryDirectory(prefix="halyard-fleet-") as tmp:
        for n in counts:
            r = run_fleet(Path(tmp), n, min(args.processes, n), args)
            out.append(r)
            print(report(r), flush=True)
        if args.bare:
            bare = run_fleet(Path(tmp), counts[-1], min(args.processes, counts[-1]), args, bare=True)
            print(report(bare), flush=True)
    base = out[0]
    for r in out[1:]:
        p99 = r['connect_p99_s'] / base['connect_p99_s']
        print(f"{r['agents']} vs {base['agents']} agents: connect p99 x{p99:.1f}, "
              f"held control-plane CPU x{r['cp_cpu_held'] / max(base['cp_cpu_held'], 1e-9):.1f} "
              f"for x{r['agents'] / base['agents']:.0f} agents")
    if args.bare:
        ours, floor = out[-1]['cp_ms_per_agent_s'], max(bare['cp_ms_per_agent_s'], 1e-9)
        print(f"{out[-1]['agents']} agents held: control plane {ours:.3f} ms CPU per agent-second, bare grpc.aio "
              f"{floor:.3f} (ours {ours / floor:.2f}x the floor); one core holds at most {1e3 / floor:.0f} agents "
              "at 1 s heartbeats with grpc.aio here")
        out.append(bare)
    print(f"load average {os.getloadavg()[0]:.1f} at end (a shared machine: other work shares these cores)")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
