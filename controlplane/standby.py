"""A standby control plane's ports: every call answered UNAVAILABLE, naming the leader.

While a control plane waits for the lease (:mod:`leadership`) it listens where it will serve
once it leads, so clients and agents given a list of control-plane addresses find the leader
from any of them: each call, whatever its method (health checks included), ends at once with
``UNAVAILABLE``, the leader's address in the message and in the trailing metadata
``halyard-leader`` (the agents' address for AgentService, the clients' for the rest; empty
while no leader is known, e.g. between a leader's death and its lease's end). The ports are
given to the real server when this one wins (:class:`StandbyServer.stop`, then
``ControlPlaneServer.start``).
"""

from __future__ import annotations

from typing import Any

import grpc

from halyard.controlplane.leadership import LEADER_METADATA_KEY, Leadership
from halyard.controlplane.server import SERVER_OPTIONS, bind
from halyard.tls import ServerTLS

__all__ = ["StandbyServer", "standby_answer"]

AGENT_METHODS = "/halyard.v1.AgentService/"


def standby_answer(leader: str) -> str:
    if leader:
        return f"this control plane is a standby; the leader serves at {leader}"
    return "this control plane is a standby and no leader is known yet (a failover is under way); retry"


class _Redirect(grpc.GenericRpcHandler):
    def __init__(self, leadership: Leadership) -> None:
        self.leadership = leadership

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        kind = "agents" if details.method.startswith(AGENT_METHODS) else "clients"

        async def answer(request: Any, context: grpc.aio.ServicerContext) -> None:
            leader = self.leadership.leader_address(kind)
            await context.abort(grpc.StatusCode.UNAVAILABLE, standby_answer(leader),
                                trailing_metadata=((LEADER_METADATA_KEY, leader),))

        # Any method, unary or streaming: the answer comes before a request is read, and bytes
        # pass through undecoded, so one handler shape serves all.
        return grpc.stream_stream_rpc_method_handler(answer)


class StandbyServer:
    """The standby's gRPC ports (the clients' and, with TLS, the agents')."""

    def __init__(self, leadership: Leadership, *, listen: str, agent_listen: str, tls: ServerTLS | None) -> None:
        self.leadership = leadership
        self.listen = listen
        self.agent_listen = agent_listen
        self.tls = tls
        self._server: grpc.aio.Server | None = None

    async def start(self) -> None:
        server = grpc.aio.server(options=SERVER_OPTIONS)
        server.add_generic_rpc_handlers((_Redirect(self.leadership),))
        if self.tls is None:
            bind(server.add_insecure_port, self.listen)
        else:
            pair = [(self.tls.key, self.tls.cert)]
            bind(server.add_secure_port, self.listen, grpc.ssl_server_credentials(pair))
            bind(server.add_secure_port, self.agent_listen, grpc.ssl_server_credentials(
                pair, root_certificates=self.tls.ca, require_client_auth=True))
        await server.start()
        self._server = server

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(0)
            self._server = None
