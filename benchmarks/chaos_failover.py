"""Chaos: kill -9 and pause the active control plane of three over one PostgreSQL; count lost, duplicated, re-run.

    .venv/bin/python benchmarks/chaos_failover.py [--control-planes 3] [--agents 64] [--jobs 2000]
        [--kills 20] [--pauses 5] [--speedup 200] [--rate 40] [--seed 1] [--out chaos.json]

A throwaway PostgreSQL server (initdb + pg_ctl, loopback: halyard.testing.postgres) holds the state;
``--control-planes`` ``halyard controlplane`` processes share it with mutual TLS (a cluster CA made for
the run), the default lease (15 s, renew deadline 10 s, retry 2 s: Kubernetes') unless
``--lease-duration-s`` says otherwise, and a supervisor here restarts any that exits (as systemd's
``Restart=always`` would). ``--agents`` emulated agents (in this process, one TLS connection each, every
one with its node certificate) and the submitting client are given all the control planes' addresses
and follow the leader. Meanwhile the chaos loop, at random moments, either sends the active control plane
SIGKILL or stops it (SIGSTOP) for the lease and ``--pause-extra-s`` more before it continues (SIGCONT):
a leader paused past its lease must commit nothing when it resumes (it exits, and is restarted as a
standby). After each event it waits for the next leader's first scheduling pass. When every job has
ended the store is read back and counted:

* lost: a job the client saw accepted that the store does not hold, or that did not end COMPLETED;
* duplicated: a job submitted (SUBMITTED) or completed (COMPLETED) more than once in the store;
* run after completion: a Launch an agent received for a job, dated (cluster time) at or after the
  job's COMPLETED event in the store: a finished job dispatched again;
* relaunched: jobs whose leader agent received more than one Launch (distinct attempts): a Launch lost
  in a kill is requeued (its start was stored, the agent never got it), which is not a re-run of work
  done but is counted apart;
* epochs: leadership epochs in the run (the lease row's final epoch);
* failover: for each kill, wall seconds from the SIGKILL to the next leader's first scheduling pass
  (its log line "first pass as leader"; one job is held back per event and submitted right after it, so
  the next leader always has work to pass on): p50, p99, max; for each pause, from SIGSTOP to that pass.
  Also to the next leader's "serving as leader" (restored from the store, ports open).

Sends traffic to 127.0.0.1 only and stops by itself (``--timeout-s``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import math
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

from halyard.agent.emulated import EmulatedAgent
from halyard.controlplane.auth import ROLE_OPERATOR, TokenFile
from halyard.controlplane.leadership import DEFAULT_LEASE
from halyard.controlplane.store_postgres import PostgresStore
from halyard.logs import configure_logging
from halyard.testing.cluster import small_cluster_toml
from halyard.testing.postgres import postgres_server
from halyard.tls import ClientTLS, init_ca, issue
from halyard.v1 import agent_service_pb2 as apb
from halyard.v1 import job_service_pb2 as jpb
from halyard.v1 import job_service_pb2_grpc as jgrpc
from halyard.v1 import types_pb2 as tpb

CLI = [sys.executable, "-m", "halyard.cli"]
RETRY = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}
HEARTBEAT_TIMEOUT_S = 10.0  # as soak_kill.py: agents find the next leader within a few seconds
OWN_CONNECTION = (("grpc.use_local_subchannel_pool", 1),)  # one TCP connection per agent, as separate machines
FAILOVER_WAIT_S = 120.0  # an event's next leader must pass by then, or the run says so
LEADER_KEY = "halyard-leader"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ranked = sorted(values)
    return round(ranked[min(len(ranked) - 1, math.ceil(q * len(ranked)) - 1)], 2)


class Supervised:
    """One control-plane slot: its process, restarted whenever it exits (systemd's Restart=always)."""

    def __init__(self, index: int, folder: Path, cluster: Path, url: str, certs: Path, args: argparse.Namespace):
        self.port, self.agent_port = free_port(), free_port()
        self.args = [*CLI, "controlplane", "--cluster", str(cluster), "--db", url, "--certs", str(certs),
                     "--listen", f"127.0.0.1:{self.port}", "--agent-listen", f"127.0.0.1:{self.agent_port}",
                     "--tokens", str(folder / "tokens.json"), "--speedup", str(args.speedup), "--heartbeat-s", "0.5",
                     "--heartbeat-timeout-s", str(HEARTBEAT_TIMEOUT_S), "--log-json",
                     "--lease-duration-s", str(args.lease_duration_s),
                     "--lease-renew-deadline-s", str(args.lease_renew_deadline_s),
                     "--lease-retry-period-s", str(args.lease_retry_period_s)]
        self.log_path = folder / f"controlplane-{index}.log"
        self.log = open(self.log_path, "ab")  # noqa: SIM115 - appended across restarts
        self.proc: subprocess.Popen[bytes] | None = None
        self.exits: list[int] = []

    def start(self) -> None:
        self.log.flush()
        self.offset = self.log_path.stat().st_size if self.log_path.exists() else 0  # this run's lines follow
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=self.log,
                                     env=os.environ | {"PYTHONUNBUFFERED": "1"})

    def check(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            self.exits.append(self.proc.returncode)
            self.start()

    def up(self) -> bool:
        """Whether the current process has joined the election (a standby that has read the lease, or the leader)."""
        with open(self.log_path, "rb") as f:
            f.seek(self.offset)
            text = f.read()
        return b'"standby: another control plane leads"' in text or b'"leading"' in text

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class CountingAgent(EmulatedAgent):
    """An emulated agent that records each Launch it obeys as a job's leader: (job, attempt, start time)."""

    launches: list[tuple[str, int, float]]

    def on_launch(self, launch: apb.Launch) -> None:
        if launch.leader:
            self.launches.append((launch.job_id, launch.attempt, launch.start_time))
        super().on_launch(launch)


class Client:
    """A job-service client over all the control planes: it follows a standby's redirect, else moves on."""

    def __init__(self, targets: list[str], tls: ClientTLS, token: str) -> None:
        self.targets, self.tls, self.i = targets, tls, 0
        self.metadata = (("authorization", f"Bearer {token}"),)
        self.target = targets[0]
        self.channel = grpc.aio.secure_channel(self.target, tls.credentials())

    async def call(self, method: str, request, timeout: float = 5.0):
        while True:
            stub = jgrpc.JobServiceStub(self.channel)
            try:
                return await getattr(stub, method)(request, timeout=timeout, metadata=self.metadata)
            except grpc.aio.AioRpcError as exc:
                if exc.code() not in RETRY:
                    raise
                leader = next((str(v) for k, v in (exc.trailing_metadata() or ()) if k == LEADER_KEY), "")
                if not leader or leader == self.target:
                    self.i = (self.i + 1) % len(self.targets)
                    leader = self.targets[self.i]
                    await asyncio.sleep(0.1)
                await self.channel.close()
                self.target = leader
                self.channel = grpc.aio.secure_channel(leader, self.tls.credentials())

    async def close(self) -> None:
        await self.channel.close()


async def submit_all(client: Client, specs: list[tpb.JobSpec], rate: float, accepted: set[str]) -> None:
    started = time.monotonic()
    for i, spec in enumerate(specs):
        await asyncio.sleep(max(0.0, started + i / rate - time.monotonic()))
        try:
            await client.call("SubmitJob", jpb.SubmitJobRequest(spec=spec))
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.ALREADY_EXISTS:  # stored by an earlier try whose answer was lost
                raise SystemExit(f"SubmitJob {spec.job_id}: {exc.code().name}: {exc.details()}") from None
        accepted.add(spec.job_id)


async def all_ended(client: Client, count: int) -> bool:
    jobs, token = [], ""
    while True:
        page = await client.call("ListJobs", jpb.ListJobsRequest(page_size=1000, page_token=token), timeout=10)
        jobs.extend(page.jobs)
        if not (token := page.next_page_token):
            break
    return len(jobs) == count and all(j.state in (tpb.COMPLETED, tpb.FAILED, tpb.CANCELLED) for j in jobs)


def leader_row(url: str) -> tuple[int, int] | None:
    """(pid, epoch) of the current leader, from the lease row."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as db:
        row = db.execute("SELECT holder, epoch FROM leader WHERE name = 'controlplane'").fetchone()
    return None if row is None else (int(row[0].split(":")[1]), int(row[1]))


def first_passes(slots: list[Supervised], event: str = "first pass as leader") -> list[tuple[float, int]]:
    """(unix time, epoch) of every ``event`` line ("first pass as leader", "serving as leader") in the
    control planes' logs."""
    seen = []
    for slot in slots:
        for line in slot.log_path.read_text(encoding="utf-8", errors="replace").splitlines():
            with contextlib.suppress(ValueError, KeyError):
                entry = json.loads(line)
                if entry.get("event") == event:
                    seen.append((float(entry["unix_s"]), int(entry["epoch"])))
    return sorted(seen)


async def next_first_pass(slots: list[Supervised], after_epoch: int) -> tuple[float, int] | None:
    deadline = time.monotonic() + FAILOVER_WAIT_S
    while time.monotonic() < deadline:
        for slot in slots:
            slot.check()
        for when, epoch in first_passes(slots):
            if epoch > after_epoch:
                return when, epoch
        await asyncio.sleep(0.1)
    return None


async def chaos(args: argparse.Namespace, folder: Path, url: str) -> dict[str, object]:
    certs = folder / "certs"
    init_ca(certs, server_names=("127.0.0.1", "localhost"))
    token, _ = TokenFile(folder / "tokens.json").create("chaos", ROLE_OPERATOR)
    cluster = folder / "cluster.toml"
    cluster.write_text(small_cluster_toml(args.agents), encoding="utf-8")
    slots = [Supervised(i, folder, cluster, url, certs, args) for i in range(args.control_planes)]
    for slot in slots:
        slot.start()
    nodes = [f"r{i // 4}-n{i % 4}" for i in range(args.agents)]
    agent_targets = ",".join(f"127.0.0.1:{s.agent_port}" for s in slots)
    launches: list[tuple[str, int, float]] = []
    agents = []
    for node in nodes:
        issue(certs, "node", node)
        agent = CountingAgent(agent_targets, node, tls=ClientTLS.for_node(certs, node), channel_options=OWN_CONNECTION)
        agent.launches = launches
        agents.append(agent)
        agent.start()
    addresses, ca = [f"127.0.0.1:{s.port}" for s in slots], ClientTLS.from_files(certs / "ca.crt")
    client = Client(addresses, ca, token)
    prober = Client(addresses, ca, token)  # its own channel: one client's switch must not cut the other's call
    rng = random.Random(args.seed)
    specs = [tpb.JobSpec(job_id=f"c{i}", model="resnet50", num_gpus=rng.choice([1, 1, 2, 4, 8]),
                         iterations=rng.randint(50, 600)) for i in range(args.jobs)]
    accepted: set[str] = set()
    events = ["kill"] * args.kills + ["pause"] * args.pauses
    rng.shuffle(events)
    kill_failovers: list[float] = []
    pause_failovers: list[float] = []
    kill_serving: list[float] = []  # to the next leader's "serving as leader" (restored, ports open)
    pause_serving: list[float] = []
    missed: list[str] = []
    wall = time.monotonic()
    try:
        # One job per event is held back and submitted right after it, so the next leader has work to pass on
        # even once the steady submissions are over (its first pass ends the failover).
        reserve = specs[len(specs) - len(events):]
        submitter = asyncio.create_task(submit_all(client, specs[:len(specs) - len(events)], args.rate, accepted))
        probes: list[asyncio.Task[None]] = []  # one at a time (awaited before the next event's)
        if await next_first_pass(slots, 0) is None:  # a pass needs work: it comes with the first submissions
            raise SystemExit("no control plane became the leader")
        for n, event in enumerate(events, start=1):
            deadline = time.monotonic() + FAILOVER_WAIT_S
            while not all(slot.up() for slot in slots) and time.monotonic() < deadline:
                for slot in slots:  # all control planes back (a restart takes seconds on a loaded machine)
                    slot.check()
                await asyncio.sleep(0.2)
            await asyncio.sleep(rng.uniform(args.gap_s / 2, args.gap_s * 1.5))  # then a random moment
            if submitter.done() and not submitter.cancelled() and submitter.exception() is not None:
                raise submitter.exception()
            current = leader_row(url)
            victim = next((s for s in slots if current and s.proc and s.proc.pid == current[0]), None)
            if victim is None:
                missed.append(f"{event} {n}: no live leader process found")
                continue
            epoch = current[1]
            hit = time.time()
            if event == "kill":
                os.kill(victim.proc.pid, signal.SIGKILL)
            else:
                os.kill(victim.proc.pid, signal.SIGSTOP)
            if event == "pause":  # past its lease; then it runs again and must not commit
                await asyncio.sleep(args.lease_duration_s + args.pause_extra_s)
                os.kill(victim.proc.pid, signal.SIGCONT)
            if probes:
                await probes[-1]
            probes.append(asyncio.create_task(submit_all(prober, [reserve[n - 1]], 1.0, accepted)))
            passed = await next_first_pass(slots, epoch)
            if passed is None:
                missed.append(f"{event} {n}: no new leader passed within {FAILOVER_WAIT_S:g} s")
                continue
            (kill_failovers if event == "kill" else pause_failovers).append(passed[0] - hit)
            serving = min((t for t, e in first_passes(slots, "serving as leader") if e > epoch), default=math.nan)
            (kill_serving if event == "kill" else pause_serving).append(serving - hit)
            print(f"{event} {n}/{len(events)}: epoch {epoch} -> {passed[1]}: serving in {serving - hit:.1f} s, "
                  f"first pass in {passed[0] - hit:.1f} s; {len(accepted)} of {args.jobs} jobs accepted", flush=True)
        await submitter
        await asyncio.gather(*probes)
        deadline = time.monotonic() + args.timeout_s
        while not await all_ended(client, args.jobs):
            for slot in slots:
                slot.check()
            if time.monotonic() > deadline:
                print("timed out waiting for the jobs to end", flush=True)
                break
            await asyncio.sleep(0.5)
        epochs = leader_row(url)[1]  # before the shutdown, whose resignations hand over a few more times
    finally:
        await client.close()
        await prober.close()
        for slot in slots:
            slot.stop()
        for agent in agents:
            await agent.stop()
    result = count(url, accepted, launches)
    result.update({
        "epochs": epochs,
        "control_planes": args.control_planes, "agents": args.agents, "jobs": args.jobs,
        "kills": sum(1 for e in events if e == "kill"), "pauses": sum(1 for e in events if e == "pause"),
        "lease_s": [args.lease_duration_s, args.lease_renew_deadline_s, args.lease_retry_period_s],
        "wall_s": round(time.monotonic() - wall, 1),
        "failover_after_kill_s": {"n": len(kill_failovers), "p50": percentile(kill_failovers, 0.5),
                                  "p99": percentile(kill_failovers, 0.99),
                                  "max": round(max(kill_failovers), 2) if kill_failovers else None},
        "takeover_after_pause_s": {"n": len(pause_failovers), "p50": percentile(pause_failovers, 0.5),
                                   "max": round(max(pause_failovers), 2) if pause_failovers else None},
        "serving_after_kill_s": {"p50": percentile(kill_serving, 0.5), "p99": percentile(kill_serving, 0.99),
                                 "max": round(max(kill_serving), 2) if kill_serving else None},
        "serving_after_pause_s": {"max": round(max(pause_serving), 2) if pause_serving else None},
        "control_plane_exits": {str(i): s.exits for i, s in enumerate(slots)},
        "missed_events": missed,
    })
    return result


def count(url: str, accepted: set[str], launches: list[tuple[str, int, float]]) -> dict[str, object]:
    with PostgresStore(url) as store:
        state = store.load()
    states = {r.job_id: r.state.value for r in state.records}
    per_job: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    completed_at: dict[str, float] = {}
    for e in state.events:
        per_job[e.job_id][e.kind.value] += 1
        if e.kind.value == "COMPLETED":
            completed_at.setdefault(e.job_id, e.time)
    lost = sorted(j for j in accepted if states.get(j) != "COMPLETED")
    duplicated = sorted(j for j, c in per_job.items() if c["SUBMITTED"] > 1 or c["COMPLETED"] > 1)
    after = sorted({job for job, _, start in launches if job in completed_at and start >= completed_at[job]})
    attempts: dict[str, set[int]] = collections.defaultdict(set)
    for job, attempt, _ in launches:
        attempts[job].add(attempt)
    relaunched = sorted(j for j, a in attempts.items() if len(a) > 1)
    return {"jobs_accepted": len(accepted), "jobs_stored": len(states),
            "lost": len(lost), "duplicated": len(duplicated), "run_after_completion": len(after),
            "lost_ids": lost[:20], "duplicated_ids": duplicated[:20], "run_after_completion_ids": after[:20],
            "relaunched": len(relaunched), "relaunched_ids": relaunched[:20]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--control-planes", type=int, default=3)
    parser.add_argument("--agents", type=int, default=64)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--pauses", type=int, default=5)
    parser.add_argument("--gap-s", type=float, default=3.0, help="mean wall seconds between a failover and the "
                                                                 "next event (uniform in half to 1.5 times)")
    parser.add_argument("--pause-extra-s", type=float, default=3.0, help="a pause lasts the lease and this much")
    parser.add_argument("--lease-duration-s", type=float, default=DEFAULT_LEASE.duration_s)
    parser.add_argument("--lease-renew-deadline-s", type=float, default=DEFAULT_LEASE.renew_deadline_s)
    parser.add_argument("--lease-retry-period-s", type=float, default=DEFAULT_LEASE.retry_period_s)
    parser.add_argument("--speedup", type=float, default=200.0, help="cluster seconds per wall second")
    parser.add_argument("--rate", type=float, default=None,
                        help="jobs submitted per wall second (default: spread over the chaos, so that every new "
                             "leader finds work to pass on)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout-s", type=float, default=900.0, help="wall seconds to wait for the last jobs")
    parser.add_argument("--out", type=Path, default=None, help="write the counts as JSON here")
    parser.add_argument("--keep", type=Path, default=None, metavar="DIR",
                        help="run in DIR and keep the logs (default: a temporary directory)")
    args = parser.parse_args()
    if args.rate is None:  # the submissions span the planned chaos (a failover takes ~2 s, a pause its lease)
        span = (args.kills * (args.gap_s + 5.0) + args.pauses * (args.gap_s + args.lease_duration_s
                                                                  + args.pause_extra_s + 2.0) + 10.0)
        args.rate = args.jobs / span
    configure_logging(json=False, level="warning")  # the in-process agents' reconnections are not news here
    with postgres_server() as server:
        url = server.create_database("chaos")
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
            result = asyncio.run(chaos(args, args.keep, url))
        else:
            with tempfile.TemporaryDirectory(prefix="halyard-chaos-") as tmp:
                result = asyncio.run(chaos(args, Path(tmp), url))
    print(json.dumps(result, indent=2))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    ok = (result["lost"] == result["duplicated"] == result["run_after_completion"] == 0
          and result["jobs_accepted"] == args.jobs and not result["missed_events"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
