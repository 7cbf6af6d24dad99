"""Assemble a running control plane: gRPC services, health, reflection, HTTP.

:class:`ControlPlaneServer` owns the :class:`ControlPlane`, a ``grpc.aio``
server (JobService, ClusterService, AgentService, standard health checking and
server reflection) and, optionally, the aiohttp app of :mod:`httpapi`
(``/healthz``, Prometheus ``/metrics`` and the web dashboard). Every call is
counted by status code (:class:`prometheus.RpcStatusInterceptor`). Used by
``halyard controlplane``, ``halyard replay`` and the test cluster alike.
"""

from __future__ import annotations

import grpc
import structlog
from aiohttp import web
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from halyard.controlplane.grpc_api import AgentServicer, ClusterServicer, JobServicer
from halyard.controlplane.httpapi import build_app, start_http
from halyard.controlplane.prometheus import Metrics
from halyard.controlplane.service import ControlPlane
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
SERVICE_NAMES = (
    job_service_pb2.DESCRIPTOR.services_by_name["JobService"].full_name,
    cluster_service_pb2.DESCRIPTOR.services_by_name["ClusterService"].full_name,
    agent_service_pb2.DESCRIPTOR.services_by_name["AgentService"].full_name,
)


class ControlPlaneServer:
    def __init__(self, cp: ControlPlane, *, listen: str = "127.0.0.1:0", http: str | None = None) -> None:
        self.cp = cp
        self.listen = listen
        self.http = http
        self.metrics = Metrics(cp)
        self.port = 0
        self.http_port = 0
        self._server: grpc.aio.Server | None = None
        self._health = health.aio.HealthServicer()
        self._runner: web.AppRunner | None = None

    @property
    def address(self) -> str:
        return f"{self.listen.rsplit(':', 1)[0]}:{self.port}"

    async def start(self) -> None:
        await self.cp.start()
        self.metrics.skip_history()  # restored events were counted by the process that handled them
        server = grpc.aio.server(interceptors=[self.metrics.interceptor()])
        job_service_pb2_grpc.add_JobServiceServicer_to_server(JobServicer(self.cp), server)
        cluster_service_pb2_grpc.add_ClusterServiceServicer_to_server(ClusterServicer(self.cp), server)
        agent_service_pb2_grpc.add_AgentServiceServicer_to_server(AgentServicer(self.cp), server)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        reflection.enable_server_reflection((*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
        self.port = server.add_insecure_port(self.listen)
        if self.port == 0:
            raise OSError(f"cannot listen on {self.listen}")
        await server.start()
        self._server = server
        for name in ("", *SERVICE_NAMES):
            await self._set_health(name, health_pb2.HealthCheckResponse.SERVING)
        if self.http is not None:
            await self._start_http()
        log.info("control plane listening", grpc=self.address, http=self.http and f"port {self.http_port}",
                 cluster=self.cp.cluster.name, policy=self.cp.core.policy.name, insecure=True)

    async def stop(self, grace: float = SHUTDOWN_GRACE_S) -> None:
        for name in ("", *SERVICE_NAMES):
            await self._set_health(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        if self._server is not None:
            await self._server.stop(grace)
        if self._runner is not None:
            await self._runner.cleanup()
        await self.cp.stop()

    async def _set_health(self, name: str, status: int) -> None:
        await self._health.set(name, status)

    async def _start_http(self) -> None:
        self._runner, self.http_port = await start_http(build_app(self.cp, self.metrics), self.http)
