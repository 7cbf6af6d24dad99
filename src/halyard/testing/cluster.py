"""TestCluster: a control plane and emulated agents in this process, on loopback.

Insecure mode by default (plaintext on loopback, the test client an operator); with
``tls=True`` the cluster makes a CA and certificates in a temporary directory, the
agents connect over mutual TLS with their node certificates, and :attr:`channel`
is an operator's (a client certificate); :meth:`client_channel` makes others.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from halyard.agent.cluster_copy import ClusterCopy
from halyard.agent.emulated import EmulatedAgent
from halyard.clock import ManualClock
from halyard.controlplane.auth import TokenFile
from halyard.controlplane.disruption import DisruptionSettings
from halyard.controlplane.forecast import ForecastSettings
from halyard.controlplane.server import ControlPlaneServer
from halyard.controlplane.service import ControlPlane
from halyard.controlplane.store import SqliteStore
from halyard.datamodel import HalyardError, cluster_digest, parse_cluster
from halyard.policies import make_policy
from halyard.scheduling.records import JobRecord
from halyard.scheduling.timing import performance_model_for
from halyard.tls import ClientTLS, ServerTLS, init_ca, issue

# How long wait_for waits by default, in wall seconds, and how long entry waits for the agents to
# register. A condition that holds returns at once, so this only bounds how long a failing test takes
# to say so: sized for a shared, heavily loaded CI machine (load average 12-25 on 2 cores, where 5 s
# timed out conditions that were merely late).
WAIT_TIMEOUT_S = 60.0
READY_TIMEOUT_S = WAIT_TIMEOUT_S


def small_cluster_toml(nodes: int, gpus_per_node: int = 8, nodes_per_rack: int = 4, *, gpu_type: str = "V100",
                       cpus: int = 24, memory_gb: int = 500) -> str:
    """A cluster of ``nodes`` V100 servers (Synergy's: 24 cores, 500 GB), 4 per rack; or of other servers
    (``gpu_type``, ``cpus``, ``memory_gb``: this machine as a one-node cluster, say).

    Link figures are the bundled ``default`` cluster's, sourced there
    (src/halyard/data/clusters/default.toml): NVLink 150 GB/s one way, 200 Gbit/s
    NICs, 400 Gbit/s rack uplinks.
    """
    racks = [min(nodes_per_rack, nodes - i) for i in range(0, nodes, nodes_per_rack)]
    blocks = [f'name = "test-{nodes}"\n']
    for r, count in enumerate(racks):
        blocks.append(f'[[racks]]\nname = "r{r}"\nuplink_gbit_s = 400\n[[racks.nodes]]\nname = "r{r}-n{{i}}"\n'
                      f'count = {count}\ngpu_type = "{gpu_type}"\ngpus = {gpus_per_node}\ncpus = {cpus}\n'
                      f'memory_gb = {memory_gb}\n'
                      f'fabric = "nvlink"\nfabric_gbyte_s = 150\nnic_gbit_s = 200\n')
    return "\n".join(blocks)


class ClusterNotStarted(HalyardError):
    """A :class:`TestCluster` asked for its server (address, ports, control plane) before ``async with``
    started it: the test uses it wrongly."""


class TestCluster:
    """Start with ``async with``; ready (all agents registered) on entry."""

    __test__ = False  # not a pytest test class

    def __init__(self, nodes: int = 4, *, policy: str = "fifo", cluster_toml: str | None = None,
                 db: str | Path = ":memory:", round_s: float = 300.0, heartbeat_s: float = 0.2,
                 heartbeat_timeout_s: float = 1.0, start_time: float = 0.0, http: str | None = None,
                 tls: bool = False, tokens: str | Path | None = None,
                 disruption: DisruptionSettings | None = None, emulate_commands: bool = True,
                 forecast: ForecastSettings | None = None) -> None:
        self.cluster_toml = cluster_toml or small_cluster_toml(nodes)
        self.cluster = parse_cluster(self.cluster_toml, source="<test cluster>")
        # The agents hold the file, as an agent started with --cluster does: they register with its digest.
        self._cluster_copy = ClusterCopy(self.cluster, self.cluster_toml, cluster_digest(self.cluster_toml))
        self.clock = ManualClock(start_time)
        self.perf = performance_model_for(make_policy(policy))  # shared with the emulated agents
        self._db = db
        self._policy = policy
        self._round_s = round_s
        self._heartbeat = (heartbeat_s, heartbeat_timeout_s)
        self._http = http  # HOST:PORT for /healthz, /metrics and the dashboard (port 0: any free one)
        self.server: ControlPlaneServer | None = None
        self.agents: dict[str, EmulatedAgent] = {}
        self.channel: grpc.aio.Channel | None = None
        self.tls = tls
        self.certs: Path | None = None  # with tls: the CA and every certificate (node-NAME, operator-test)
        self._tokens = tokens
        self._disruption = disruption
        # The emulated agents stand in for real ones: a client's job with a command runs here too (emulated,
        # the command not run). False: as in a real cluster, such a job waits for a process agent.
        self._emulate_commands = emulate_commands
        self._forecast = forecast  # Job.forecast and WhatIf (None: off, as most tests want)

    # --- lifecycle ----------------------------------------------------------

    async def __aenter__(self) -> TestCluster:
        cp = ControlPlane(self.cluster, make_policy(self._policy), self.perf, self.clock, SqliteStore(self._db),
                          cluster_toml=self.cluster_toml, round_s=self._round_s, heartbeat_s=self._heartbeat[0],
                          heartbeat_timeout_s=self._heartbeat[1], disruption=self._disruption,
                          emulated_takes_commands=self._emulate_commands)
        server_tls = None
        if self.tls:
            self.certs = Path(tempfile.mkdtemp(prefix="halyard-test-certs-"))
            init_ca(self.certs, cluster=self.cluster.name)
            for node in self.cluster.nodes:
                issue(self.certs, "node", node.name)
            issue(self.certs, "operator", "test")
            server_tls = ServerTLS.from_dir(self.certs)
        tokens = TokenFile(self._tokens) if self._tokens is not None else None
        self.server = ControlPlaneServer(cp, listen="127.0.0.1:0", http=self._http, tls=server_tls, tokens=tokens,
                                         forecast=self._forecast)
        await self.server.start()
        for node in self.cluster.nodes:
            self._start_agent(node.name)
        # Ready when both ends say so: the control plane holds a session for every node, and every agent has
        # its Registered (it can send); the first comes a moment before the second.
        await self.wait_for(lambda: len(cp.sessions) == len(self.agents)
                            and all(a.connected.is_set() for a in self.agents.values()), timeout=READY_TIMEOUT_S)
        self.channel = self.client_channel("operator-test") if self.tls else grpc.aio.insecure_channel(self.address)
        return self

    def _start_agent(self, node: str) -> EmulatedAgent:
        tls = ClientTLS.for_node(self.certs, node) if self.certs is not None else None
        agent = EmulatedAgent(self.agent_address, self.cluster.node(node), shared_clock=self.clock, perf=self.perf,
                              tls=tls, cluster=self._cluster_copy)
        agent.start()
        self.agents[node] = agent
        return agent

    def client_channel(self, cert: str | None = None) -> grpc.aio.Channel:
        """With tls: a channel with certificate ``cert`` (a file stem in :attr:`certs`) on the agent port, or
        without one on the client port (then send a token); insecure: a plaintext channel."""
        if self.certs is None:
            return grpc.aio.insecure_channel(self.address)
        if cert is None:
            return grpc.aio.secure_channel(self.address, ClientTLS.from_files(self.certs / "ca.crt").credentials())
        creds = ClientTLS.from_files(self.certs / "ca.crt", self.certs / f"{cert}.crt", self.certs / f"{cert}.key")
        return grpc.aio.secure_channel(self.agent_address, creds.credentials())

    async def __aexit__(self, *exc: object) -> None:
        if self.channel is not None:
            await self.channel.close()
        for agent in self.agents.values():
            await agent.stop()
        if self.server is not None:
            await self.server.stop(grace=0)
        if self.certs is not None:
            shutil.rmtree(self.certs, ignore_errors=True)

    def _started(self) -> ControlPlaneServer:
        if self.server is None:
            raise ClusterNotStarted("the TestCluster is not started: enter it with `async with TestCluster(...)`")
        return self.server

    @property
    def address(self) -> str:
        """Where clients connect."""
        return self._started().address

    @property
    def http_url(self) -> str:
        """Base URL of the HTTP port (started with ``http=``): dashboard at /, /metrics, /healthz."""
        if self._http is None:
            raise RuntimeError("TestCluster was started without http=HOST:PORT")
        return f"http://{self._http.rsplit(':', 1)[0]}:{self._started().http_port}"

    @property
    def agent_address(self) -> str:
        """Where agents connect (the same as :attr:`address` in insecure mode)."""
        return self._started().agent_address

    @property
    def control_plane(self) -> ControlPlane:
        return self._started().cp

    # --- time -----------------------------------------------------------------

    async def advance(self, seconds: float) -> None:
        """Move cluster time forward; jobs finish and rounds fire in order on the way."""
        await self.clock.advance(seconds)

    def now(self) -> float:
        return self.clock.now()

    # --- faults ---------------------------------------------------------------

    async def stop_agent(self, node: str) -> None:
        """Kill the node's agent (its stream breaks; its jobs are gone)."""
        await self.agents[node].stop()

    async def restart_agent(self, node: str) -> None:
        """A fresh agent process for the node: it registers with no jobs."""
        await self.agents[node].stop()
        agent = self._start_agent(node)
        sessions = self.control_plane.sessions
        await self.wait_for(lambda: node in sessions and sessions[node].instance == agent.instance)

    def set_health(self, node: str, healthy: bool, detail: str = "") -> None:
        """What the node's agent reports in its next heartbeats, e.g. ``(False, "GPU 3: Xid 79")``:
        an unhealthy heartbeat drains the node and requeues its jobs."""
        self.agents[node].health = (healthy, detail)

    def freeze_agent(self, node: str, frozen: bool = True) -> None:
        """A hung node (or a network that keeps the connection but carries nothing): the agent
        sends nothing until thawed (``frozen=False``), its stream stays open."""
        self.agents[node].frozen = frozen

    def break_stream(self, node: str) -> None:
        """Cut the node's stream; the agent reconnects and reports what it runs."""
        self.agents[node].break_stream()

    # --- inspection -------------------------------------------------------------

    def job(self, job_id: str) -> JobRecord:
        return self.control_plane.job(job_id)

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = WAIT_TIMEOUT_S) -> None:
        """Wait (in wall time) until ``predicate()`` holds; TimeoutError says which did not. Pass a
        ``timeout`` only when the time it takes is what the test checks."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met within {timeout} s: {predicate}")
            await asyncio.sleep(0.005)
