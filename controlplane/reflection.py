"""gRPC server reflection, both versions: ``grpc.reflection.v1`` and ``grpc.reflection.v1alpha``.

grpcio-reflection implements only v1alpha, while newer tools (grpcurl >= 1.9, Postman,
grpcui) ask v1 first. The two versions have the same messages under another package
name, so one servicer answers both: v1 requests decode with the v1alpha classes and the
replies encode back unchanged on the wire.

The servicer reads a private descriptor pool holding what the server serves (the halyard.v1
files, health checking and both reflection versions), so nothing is added to protobuf's
process-wide default pool.

Reflection answers only to callers with client credentials, as JobService and ClusterService
do (:meth:`Authenticator.client`): what the server serves is public in the package, but which
services a port offers is for its clients, and an open service is one more surface to probe
(docs/security.md). Stock tools pass the token as they do for any call
(``grpcurl -H 'authorization: Bearer TOKEN'``). Health checking stays open, for probes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Protocol

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_health.v1 import health, health_pb2
from grpc_reflection.v1alpha import _async as reflection_aio
from grpc_reflection.v1alpha import reflection, reflection_pb2

from halyard.controlplane.auth import Authenticator
from halyard.controlplane.errors import PermissionDenied, TooManyFailures, Unauthenticated
from halyard.v1 import agent_service_pb2, cluster_service_pb2, job_service_pb2, types_pb2

V1_SERVICE = "grpc.reflection.v1.ServerReflection"
V1ALPHA_SERVICE = reflection.SERVICE_NAME
_V1_FILE = "grpc/reflection/v1/reflection.proto"
_V1ALPHA, _V1 = "grpc.reflection.v1alpha", "grpc.reflection.v1"


class ServedFile(Protocol):
    """What a served file's descriptor gives here. The generated modules' and grpcio's own (health,
    reflection) are one class at run time (``google._upb._message.FileDescriptor`` with protobuf's
    default backend), but their stubs name two (``google.protobuf.descriptor``'s and ``google._upb``'s)."""

    def CopyToProto(self, proto: descriptor_pb2.FileDescriptorProto, /) -> None: ...


SERVED_FILES: tuple[ServedFile, ...] = (
    types_pb2.DESCRIPTOR, job_service_pb2.DESCRIPTOR, cluster_service_pb2.DESCRIPTOR, agent_service_pb2.DESCRIPTOR,
    health_pb2.DESCRIPTOR, reflection_pb2.DESCRIPTOR,
)


def _v1_file() -> descriptor_pb2.FileDescriptorProto:
    """reflection.proto of v1: v1alpha's file under the v1 package (the messages are identical)."""
    proto = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(proto)
    proto.name, proto.package = _V1_FILE, _V1
    proto.ClearField("options")
    old, new = f".{_V1ALPHA}.", f".{_V1}."
    for message in proto.message_type:
        for field in message.field:
            if field.type_name.startswith(old):  # assigning "" would mark a scalar field as typed
                field.type_name = new + field.type_name.removeprefix(old)
    for service in proto.service:
        for method in service.method:
            method.input_type = method.input_type.replace(old, new)
            method.output_type = method.output_type.replace(old, new)
    return proto


def reflection_pool() -> descriptor_pool.DescriptorPool:
    """A descriptor pool of everything the control plane serves, both reflection versions included."""
    pool = descriptor_pool.DescriptorPool()
    for file in SERVED_FILES:  # dependencies first: types.proto before the services that import it
        proto = descriptor_pb2.FileDescriptorProto()
        file.CopyToProto(proto)
        pool.Add(proto)
    pool.Add(_v1_file())
    return pool


def enable_reflection(service_names: Iterable[str], server: grpc.aio.Server,
                      auth: Authenticator | None = None) -> None:
    """Serve reflection v1 and v1alpha on ``server``, listing ``service_names``, health and reflection,
    to the callers ``auth`` takes as clients (None: anyone)."""
    names = (*service_names, health.SERVICE_NAME, V1_SERVICE, V1ALPHA_SERVICE)
    servicer = reflection_aio.ReflectionServicer(names, pool=reflection_pool())

    async def answer(requests: AsyncIterator[reflection_pb2.ServerReflectionRequest],
                     context: grpc.aio.ServicerContext) -> AsyncIterator[reflection_pb2.ServerReflectionResponse]:
        if auth is not None:
            try:
                auth.client(context)
            except TooManyFailures as exc:
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
            except Unauthenticated as exc:
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(exc))
            except PermissionDenied as exc:
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, str(exc))
        # The stub says `async def ... -> AsyncIterable` (a coroutine); grpc_reflection's code is an async generator.
        async for reply in servicer.ServerReflectionInfo(requests, context):  # type: ignore[attr-defined]
            yield reply

    handler = grpc.stream_stream_rpc_method_handler(
        answer, request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString)
    server.add_generic_rpc_handlers(tuple(
        grpc.method_handlers_generic_handler(service, {"ServerReflectionInfo": handler})
        for service in (V1_SERVICE, V1ALPHA_SERVICE)))
