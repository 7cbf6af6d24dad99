"""What every gRPC call of the control plane goes through, wrapped once per method when it is added.

Two things apply to every method of every service: a request that does not decode is
answered INVALID_ARGUMENT (not UNKNOWN), and each call is counted by the status it
ended with (``halyard_grpc_server_handled``). They used to be two ``grpc.aio`` server
interceptors; grpc.aio runs the interceptor chain on every call (a coroutine per
interceptor, to find the method's handler), and each kept its own per-method cache
of wrapped handlers. Here one wrapper per method is built when the servicers are added
(:class:`WrappingServer` stands in for the server in the generated ``add_*_to_server``
functions), so a call pays one wrapper coroutine and no handler lookup of ours, and the
server runs without interceptors. Unknown methods reach a last catch-all handler that
counts them under ``unknown`` (so a client cannot create series by inventing names)
and answers UNIMPLEMENTED, as gRPC does.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

import grpc
from prometheus_client import Counter

# A decode error's text is cut to this many characters before it goes to the client: enough to
# name the problem (protobuf's messages are one line), too short to echo a large payload back.
MAX_DECODE_ERROR_CHARS = 200
UNKNOWN = "unknown"  # the service and method label of calls to methods this server does not have

Done = Callable[[grpc.aio.ServicerContext, BaseException | None], None]


class Undecodable:
    """What a request that does not decode becomes, so the call answers INVALID_ARGUMENT (not UNKNOWN).

    Stream handlers that read their requests themselves (the agent stream) check for it
    per message with :func:`refuse_undecodable`, which costs less than another generator
    layer between gRPC and the handler."""

    __slots__ = ("error",)

    def __init__(self, error: str) -> None:
        self.error = error


def lenient(deserializer: Callable[[bytes], object] | None) -> Callable[[bytes], object] | None:
    """``deserializer``, answering an :class:`Undecodable` instead of raising."""
    if deserializer is None:
        return None

    def decode(data: bytes) -> object:
        try:
            return deserializer(data)
        except Exception as exc:  # DecodeError, and whatever else a malformed message raises
            return Undecodable(f"{type(exc).__name__}: {exc}"[:MAX_DECODE_ERROR_CHARS])
    return decode


async def refuse_undecodable(context: grpc.aio.ServicerContext, request: object) -> None:
    """Abort the call with INVALID_ARGUMENT if ``request`` did not decode."""
    if isinstance(request, Undecodable):
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                            f"the request message does not decode ({request.error})")


def _code_name(context: grpc.aio.ServicerContext, exc: BaseException | None) -> str:
    """The status a call ended with: the one it aborted with, CANCELLED when the call went away under it
    (its task cancelled, or its response stream closed before the end), UNKNOWN for any other exception."""
    if isinstance(exc, asyncio.CancelledError | GeneratorExit):
        return grpc.StatusCode.CANCELLED.name
    code = context.code()
    if code is not None and code != grpc.StatusCode.OK:
        return code.name if isinstance(code, grpc.StatusCode) else grpc.StatusCode(code).name
    return grpc.StatusCode.UNKNOWN.name if exc is not None else grpc.StatusCode.OK.name


def split_method(full: str) -> tuple[str, str]:
    """``/halyard.v1.JobService/SubmitJob`` -> (``halyard.v1.JobService``, ``SubmitJob``)."""
    service, _, method = full.lstrip("/").rpartition("/")
    return service, method


class CallWrapper:
    """Builds each method's wrapped handler: lenient decoding and counting in one coroutine.

    ``checks_own_requests`` names the client-streaming methods whose servicer checks each
    request for :class:`Undecodable` itself; every other streaming method gets a checking
    generator around its request iterator."""

    def __init__(self, counter: Counter, checks_own_requests: Iterable[str] = ()) -> None:
        self.counter = counter
        self.checks_own_requests = frozenset(checks_own_requests)

    def wrap(self, full_method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        service, method = split_method(full_method)
        counter = self.counter

        def done(context: grpc.aio.ServicerContext, exc: BaseException | None) -> None:
            counter.labels(service, method, _code_name(context, exc)).inc()

        decode, encode = lenient(handler.request_deserializer), handler.response_serializer
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(_unary(handler.unary_unary, done, check=True), decode, encode)
        if handler.unary_stream is not None:
            # A coroutine that writes with context.write (grpc.health's Watch) is awaited, not iterated.
            wrap = _streaming if inspect.isasyncgenfunction(handler.unary_stream) else _unary
            return grpc.unary_stream_rpc_method_handler(wrap(handler.unary_stream, done, check=True), decode, encode)
        trusted = full_method in self.checks_own_requests
        if handler.stream_stream is not None:
            streams = handler.stream_stream if trusted else _checking(handler.stream_stream)
            return grpc.stream_stream_rpc_method_handler(_streaming(streams, done, check=False), decode, encode)
        if handler.stream_unary is None:
            raise TypeError(f"{full_method}: the handler has no behaviour (gRPC handlers have one of four)")
        answers = handler.stream_unary if trusted else _checking(handler.stream_unary)
        return grpc.stream_unary_rpc_method_handler(_unary(answers, done, check=False), decode, encode)

    def unknown_methods(self) -> grpc.GenericRpcHandler:
        """The last generic handler: counts a call to a method no service has, answers UNIMPLEMENTED."""
        counter = self.counter

        async def unimplemented(requests: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            counter.labels(UNKNOWN, UNKNOWN, grpc.StatusCode.UNIMPLEMENTED.name).inc()
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
            yield  # unreachable: an async generator, so it serves any kind of call

        handler: grpc.RpcMethodHandler[Any, Any] = grpc.stream_stream_rpc_method_handler(unimplemented)

        class _Unknown(grpc.GenericRpcHandler):
            def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
                return handler
        return _Unknown()


def _unary(behavior: Callable[..., Any], done: Done, *, check: bool) -> Callable[..., Any]:
    async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            if check and isinstance(request, Undecodable):
                await refuse_undecodable(context, request)
            result = await behavior(request, context)
        except BaseException as exc:
            done(context, exc)
            raise
        done(context, None)
        return result
    return call


def _streaming(behavior: Callable[..., Any], done: Done, *, check: bool) -> Callable[..., Any]:
    async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        try:
            if check and isinstance(request, Undecodable):
                await refuse_undecodable(context, request)
            async for item in behavior(request, context):
                yield item
        except BaseException as exc:
            done(context, exc)
            raise
        done(context, None)
    return stream


def _checking(behavior: Callable[..., Any]) -> Callable[..., Any]:
    """``behavior`` given a request iterator that aborts INVALID_ARGUMENT on a message that does not decode."""
    async def checked(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        async for request in requests:
            await refuse_undecodable(context, request)
            yield request

    def call(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
        return behavior(checked(requests, context), context)
    return call


class _WrappedGeneric(grpc.GenericRpcHandler):
    """A generic handler whose methods answer with their wrapped handler (built on first use, then kept)."""

    def __init__(self, inner: grpc.GenericRpcHandler, wrap: Callable[[str, grpc.RpcMethodHandler],
                                                                      grpc.RpcMethodHandler]) -> None:
        self._inner = inner
        self._wrap = wrap
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        handler = self._inner.service(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        kept = self._wrapped.get(method)
        if kept is None or kept[0] is not handler:
            kept = self._wrapped[method] = (handler, self._wrap(method, handler))  # known methods only: bounded
        return kept[1]


class WrappingServer(grpc.aio.Server):
    """Stands in for a ``grpc.aio.Server`` where services are added: each method's handler is
    wrapped once (:class:`CallWrapper`) before the real server gets it. A ``grpc.aio.Server`` itself
    (ports, start and stop go to the real one), so it is what ``add_*_to_server`` functions take."""

    def __init__(self, server: grpc.aio.Server, wrapper: CallWrapper) -> None:
        self.server = server
        self.wrapper = wrapper

    def add_insecure_port(self, address: str) -> int:
        return self.server.add_insecure_port(address)

    def add_secure_port(self, address: str, server_credentials: grpc.ServerCredentials) -> int:
        return self.server.add_secure_port(address, server_credentials)

    async def start(self) -> None:
        await self.server.start()

    async def stop(self, grace: float | None) -> None:
        await self.server.stop(grace)

    async def wait_for_termination(self, timeout: float | None = None) -> bool:
        return await self.server.wait_for_termination(timeout)

    def add_generic_rpc_handlers(self, handlers: Iterable[grpc.GenericRpcHandler]) -> None:
        self.server.add_generic_rpc_handlers(tuple(_WrappedGeneric(h, self.wrapper.wrap) for h in handlers))

    def add_registered_method_handlers(self, service: str, handlers: Mapping[str, grpc.RpcMethodHandler]) -> None:
        self.server.add_registered_method_handlers(
            service, {name: self.wrapper.wrap(f"/{service}/{name}", h) for name, h in handlers.items()})

    def finish(self) -> None:
        """Add the catch-all for unknown methods: call once every service is added."""
        self.server.add_generic_rpc_handlers((self.wrapper.unknown_methods(),))
