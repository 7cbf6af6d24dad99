"""Assemble a running control plane: gRPC services, health, reflection, HTTP.

:class:`ControlPlaneServer` owns the :class:`ControlPlane`, a ``grpc.aio``
server (JobService, ClusterService, AgentService, standard health checking and
server reflection v1 and v1alpha) and, optionally, the aiohttp app of :mod:`httpapi`
(``/healthz``, Prometheus ``/metrics`` and the web dashboard). Every call is
counted by status code and a request that does not decode is answered INVALID_ARGUMENT
(:mod:`calls`, wrapped once per method when the services are added). Used by
``halyard controlplane``, ``halyard replay`` and the test cluster alike.
"""

from __future__ import annotations

import errno
import socket

import grpc
import structlog
from aiohttp import web
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from halyard import GRPC_FORK_SAFE
from halyard.controlplane.auth import Authenticator, TokenFile
from halyard.controlplane.calls import WrappingServer
from halyard.controlplane.forecast import Forecaster, ForecastSettings
from halyard.controlplane.forecast_api import register_metrics
from halyard.controlplane.grpc_api import CHECKS_OWN_REQUESTS, AgentServicer, ClusterServicer, JobServicer
from halyard.controlplane.httpapi import build_app, start_http
from halyard.controlplane.logs import LogRelay
from halyard.controlplane.prometheus import Metrics
from halyard.controlplane.reflection import enable_reflection
from halyard.controlplane.service import ControlPlane
from halyard.controlplane.token_throttle import FAILED_TOKENS_LIMIT, FAILED_TOKENS_WINDOW_S, FailedTokens
from halyard.controlplane.websession import allowed_hosts, http_listen
from halyard.datamodel import HalyardError
from halyard.datamodel.limits import MAX_REQUEST_BYTES
from halyard.tls import ServerTLS, is_loopback
from halyard.v1 import (
    agent_service_pb2,
    agent_service_pb2_grpc,
    cluster_service_pb2,
    cluster_service_pb2_grpc,
    job_service_pb2,
    job_service_pb2_grpc,
)

log = structlog.get_logger("halyard.server")

SHUTDOWN_GRACE_S = 5.0
# A burst of calls waits in gRPC's queue until the event loop takes them. gRPC's own limits
# (1,000 waiting calls, or 1 s in the queue beyond that) answer the excess CANCELLED, which tells
# a client nothing; with these, a burst of tens of thousands is queued and served in turn.
MAX_QUEUED_CALLS = 16_384
SERVER_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_REQUEST_BYTES),  # larger requests: RESOURCE_EXHAUSTED
    ("grpc.server.max_pending_requests", MAX_QUEUED_CALLS),
    ("grpc.server.max_pending_requests_hard_limit", 2 * MAX_QUEUED_CALLS),
    ("grpc.server_max_unrequested_time_in_server", 30),
    # gRPC sets SO_REUSEPORT by default, so a second control plane on a busy port would bind it too
    # and the kernel would split the clients between the two schedulers: off, a busy port is refused.
    ("grpc.so_reuseport", 0),
    # Agents ping every AGENT_KEEPALIVE_S (agent/base.py) to notice a paused control plane; gRPC's default
    # would answer pings that frequent with GOAWAY "too_many_pings".
    ("grpc.http2.min_ping_interval_without_data_ms", 1000),
    ("grpc.http2.max_ping_strikes", 0),
]
SERVICE_NAMES = (
    job_service_pb2.DESCRIPTOR.services_by_name["JobService"].full_name,
    cluster_service_pb2.DESCRIPTOR.services_by_name["ClusterService"].full_name,
    agent_service_pb2.DESCRIPTOR.services_by_name["AgentService"].full_name,
)


class InsecureRefused(HalyardError):
    """Insecure mode was asked for on an address other machines can reach."""


class ControlPlaneServer:
    """The control plane's gRPC (and HTTP) endpoints.

    With ``tls`` it listens on two ports: ``listen`` for clients (TLS; a bearer token
    from ``tokens`` or a client certificate) and ``agent_listen`` for agents (mutual
    TLS: no peer without a certificate of the cluster CA gets past the handshake).
    Without ``tls`` it is in insecure mode: one plaintext port, loopback only, every
    client an operator (unless ``tokens`` is given) and every agent trusted.
    """

    def __init__(self, cp: ControlPlane, *, listen: str = "127.0.0.1:0", http: str | None = None,
                 tls: ServerTLS | None = None, agent_listen: str = "127.0.0.1:0",
                 tokens: TokenFile | None = None, http_hosts: tuple[str, ...] = (),
                 forecast: ForecastSettings | None = None, bad_token_limit: int = FAILED_TOKENS_LIMIT,
                 bad_token_window_s: float = FAILED_TOKENS_WINDOW_S) -> None:
        if tls is None and not is_loopback(listen):
            raise InsecureRefused(f"--listen {listen}: insecure mode (no TLS) serves loopback addresses only; "
                                  "give the control plane certificates (`halyard certs init`)")
        if tls is None and http is not None and not is_loopback(http_listen(http)):
            raise InsecureRefused(f"--http {http}: insecure mode (no TLS) serves loopback addresses only; "
                                  "give the control plane certificates (`halyard certs init`)")
        self.cp = cp
        self.listen = listen
        self.agent_listen = agent_listen
        self.http = None if http is None else http_listen(http)  # a bare port binds loopback
        self.http_hosts = http_hosts  # Host names the HTTP port answers besides its own address
        self.tls = tls
        self.tokens = tokens
        self.metrics = Metrics(cp)
        self.forecasts: Forecaster | None = None
        if forecast is not None:  # Job.forecast and WhatIf (docs/forecast.md)
            if GRPC_FORK_SAFE:
                self.forecasts = cp.forecasts = Forecaster(cp, forecast)
                register_metrics(self.forecasts, self.metrics.registry)
            else:
                log.warning("forecasts off: gRPC was imported before halyard with its fork support on, so the "
                            "control plane cannot fork a snapshot safely (unset GRPC_ENABLE_FORK_SUPPORT)")
        self.port = 0
        self.agent_port = 0
        self.http_port = 0
        self._server: grpc.aio.Server | None = None
        # Bad tokens count per peer host on every surface (gRPC, HTTP, the dashboard's login); limit 0: off.
        throttle = FailedTokens(bad_token_limit, bad_token_window_s) if tokens is not None and bad_token_limit else None
        self._auth = Authenticator(secure=tls is not None, tokens=tokens, throttle=throttle)
        self._health = health.aio.HealthServicer()
        self._runner: web.AppRunner | None = None

    @property
    def address(self) -> str:
        """Where clients connect."""
        return f"{self.listen.rsplit(':', 1)[0]}:{self.port}"

    @property
    def agent_address(self) -> str:
        """Where agents connect (the client address in insecure mode)."""
        if self.tls is None:
            return self.address
        return f"{self.agent_listen.rsplit(':', 1)[0]}:{self.agent_port}"

    async def start(self) -> None:
        await self.cp.start()
        self.metrics.skip_history()  # restored events were counted by the process that handled them
        server = grpc.aio.server(options=SERVER_OPTIONS)
        services = WrappingServer(server, self.metrics.call_wrapper(CHECKS_OWN_REQUESTS))
        auth = self._auth
        relay = LogRelay(self.cp)  # StreamLogs asks the agents, whose answers come in on their streams
        job_service_pb2_grpc.add_JobServiceServicer_to_server(JobServicer(self.cp, auth=auth, logs=relay,
                                                                          forecasts=self.forecasts), services)
        cluster_service_pb2_grpc.add_ClusterServiceServicer_to_server(ClusterServicer(self.cp, auth=auth,
                                                                                      forecasts=self.forecasts),
                                                              services)
        agent_service_pb2_grpc.add_AgentServiceServicer_to_server(AgentServicer(self.cp, auth=auth, logs=relay),
                                                                  services)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, services)
        enable_reflection(SERVICE_NAMES, services, auth)  # v1 and v1alpha, for clients with credentials
        services.finish()
        if self.tls is None:
            self.port = bind(server.add_insecure_port, self.listen)
            self.agent_port = self.port
        else:
            pair = [(self.tls.key, self.tls.cert)]
            self.port = bind(server.add_secure_port, self.listen, grpc.ssl_server_credentials(pair))
            self.agent_port = bind(server.add_secure_port, self.agent_listen, grpc.ssl_server_credentials(
                pair, root_certificates=self.tls.ca, require_client_auth=True))
        await server.start()
        self._server = server
        for name in ("", *SERVICE_NAMES):
            await self._set_health(name, health_pb2.HealthCheckResponse.SERVING)
        if self.forecasts is not None:
            self.forecasts.start()
        if self.http is not None:
            await self._start_http()
        if self.tokens is not None and not self.tokens.path.exists():
            log.warning("the token file does not exist (yet): every token is refused until it does",
                        tokens=str(self.tokens.path))
        if self.tls is None:
            log.warning("INSECURE MODE: no TLS; agents are not authenticated and may speak for any node"
                        + ("; clients need a token" if self.tokens else "; every client is an operator"),
                        grpc=self.address)
            if self.http is not None and self.tokens is None:
                log.warning("INSECURE MODE: the HTTP API and dashboard ask no one to log in; every caller is "
                            "an operator", http=self.http)
        log.info("control plane listening", grpc=self.address, agents=self.agent_address,
                 http=self.http and f"port {self.http_port}", cluster=self.cp.cluster.name,
                 policy=self.cp.core.policy.name, insecure=self.tls is None, tokens=self.tokens is not None)

    async def stop(self, grace: float = SHUTDOWN_GRACE_S) -> None:
        for name in ("", *SERVICE_NAMES):
            await self._set_health(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        if self.forecasts is not None:
            await self.forecasts.stop()
        if self._server is not None:
            await self._server.stop(grace)
        if self._runner is not None:
            await self._runner.cleanup()
        await self.cp.stop()

    async def _set_health(self, name: str, status: int) -> None:
        await self._health.set(name, status)

    async def _start_http(self) -> None:
        assert self.http is not None
        hosts = allowed_hosts(self.http, self.http_hosts)
        self._runner, self.http_port = await start_http(build_app(self.cp, self.metrics, self._auth, hosts), self.http)


def bind(add_port, address: str, *credentials: object) -> int:
    try:
        port = add_port(address, *credentials)
    except RuntimeError as exc:  # newer grpcio raises instead of returning 0
        raise OSError(f"cannot listen on {address}: {_why_not(address) or exc}") from None
    if port == 0:
        raise OSError(f"cannot listen on {address}: {_why_not(address) or 'gRPC refused the address'}")
    return port


def _why_not(address: str) -> str | None:
    """Why gRPC could not bind ``address`` (its own error says only "Failed to bind"): the OS's answer
    to a plain bind of the same address, e.g. "address in use (another process listens there)"."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    try:
        infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, ValueError):
        return None
    for family, kind, proto, _, sockaddr in infos:
        with socket.socket(family, kind, proto) as probe:
            try:
                probe.bind(sockaddr)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    return "address in use (another process listens there)"
                return exc.strerror
    return None
