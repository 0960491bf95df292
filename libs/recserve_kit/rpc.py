"""One wrapper per RPC method, built once at registration: error mapping, the
server span and the latency metric, with no per-call interceptor; and a
request parser that turns a malformed message into INVALID_ARGUMENT.

grpc.aio's server interceptors run ``intercept_service`` for every call and
build a new handler each time, and OpenTelemetry's aio instrumentation adds a
second such layer; together they were the largest fixed cost of a hop
(py-spy, docs/benchmarks.md). Here the servicer is wrapped before the
generated ``add_*_to_server`` reads its methods, so each call runs one plain
coroutine: extract the caller's trace context, open the server span (a cheap
non-recording one when the trace is not sampled), run the method, map domain
errors to statuses, observe the duration through a pre-bound metric child.

Handlers are built from the proto's service descriptor (``method_handlers``),
so a body that does not parse reaches the wrapper as ``Malformed`` and is
answered INVALID_ARGUMENT with a plain message; left to grpc, it was UNKNOWN
with the exception's class name and a traceback in the log per request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import grpc
from google.protobuf import descriptor_pool, message_factory
from google.protobuf.message import DecodeError, Message
from opentelemetry import trace
from prometheus_client import Histogram

from recserve_kit.admin import AdminTokens
from recserve_kit.errors import RecserveError
from recserve_kit.telemetry import tracer_for
from recserve_kit.tracing import inbound_context

log = logging.getLogger(__name__)

RPC_DURATION = Histogram(
    "recserve_rpc_server_duration_seconds",
    "Server-side duration of unary RPCs.",
    ["service", "method", "code"],
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.04, 0.06, 0.1, 0.2, 0.5, 1.0, 5.0),
)
INTERNAL_MESSAGE = "internal error; see the server log for this trace id"


class Malformed:
    """Stands for a request body that is not a valid message of its type."""

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name


def _parser(message_class: type[Message]) -> Callable[[bytes], Message | Malformed]:
    parse = message_class.FromString
    type_name = message_class.DESCRIPTOR.full_name

    def parse_or_flag(data: bytes) -> Message | Malformed:
        try:
            return parse(data)
        except DecodeError:
            return Malformed(type_name)

    return parse_or_flag


async def _refuse_malformed(request: Malformed, context: grpc.aio.ServicerContext) -> None:
    await context.abort(
        grpc.StatusCode.INVALID_ARGUMENT,
        f"request: not a valid {request.type_name} message (malformed protobuf)",
    )


class _Durations:
    """Metric children per status code, bound on first use (labels() is not free)."""

    def __init__(self, service: str, method: str) -> None:
        self.service = service
        self.method = method
        self.children: dict[grpc.StatusCode, Any] = {}

    def observe(self, code: grpc.StatusCode, seconds: float) -> None:
        child = self.children.get(code)
        if child is None:
            child = RPC_DURATION.labels(self.service, self.method, code.name)
            self.children[code] = child
        child.observe(seconds)


class LogBudget:
    """At most ``per_second`` log lines a second; the rest are counted, and the
    next line that goes out says how many were dropped. A caller who finds a
    request that fails must not be able to flood the log with tracebacks."""

    def __init__(self, per_second: float = 5.0, clock: Callable[[], float] = time.monotonic):
        self.per_second = per_second
        self.clock = clock
        self.tokens = per_second
        self.stamp = clock()
        self.dropped = 0

    def take(self) -> int | None:
        """The count dropped since the last line, or None: drop this one."""
        now = self.clock()
        self.tokens = min(self.per_second, self.tokens + (now - self.stamp) * self.per_second)
        self.stamp = now
        if self.tokens < 1:
            self.dropped += 1
            return None
        self.tokens -= 1
        dropped, self.dropped = self.dropped, 0
        return dropped


UNHANDLED_LOGS = LogBudget()


async def _abort_for(exc: BaseException, method: str, context: grpc.aio.ServicerContext) -> None:
    """Turns an exception into the call's status; never leaks its text.
    Client errors are not logged; server faults are, within a budget."""
    if isinstance(exc, RecserveError):
        await context.abort(exc.code, exc.message)
    if isinstance(exc, NotImplementedError):
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{method} is not implemented yet")
    dropped = UNHANDLED_LOGS.take()
    if dropped is not None:
        suffix = f" ({dropped} more not logged)" if dropped else ""
        log.error("unhandled error in %s%s", method, suffix, exc_info=exc)
    await context.abort(grpc.StatusCode.INTERNAL, INTERNAL_MESSAGE)


def _code_of(exc: BaseException, context: grpc.aio.ServicerContext) -> grpc.StatusCode:
    if isinstance(exc, RecserveError):
        return exc.code
    if isinstance(exc, NotImplementedError):
        return grpc.StatusCode.UNIMPLEMENTED
    if isinstance(exc, (asyncio.CancelledError, grpc.aio.AbortError)):
        return context.code() or grpc.StatusCode.CANCELLED
    return grpc.StatusCode.INTERNAL


def wrap_unary(
    full_service: str, method: str, inner: Callable[..., Any], service: str
) -> Callable[..., Any]:
    durations = _Durations(service, method)
    tracer = tracer_for(service)
    span_name = f"/{full_service}/{method}"  # the OpenTelemetry gRPC convention
    attributes = {"rpc.system": "grpc", "rpc.service": full_service, "rpc.method": method}

    async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if isinstance(request, Malformed):
            durations.observe(grpc.StatusCode.INVALID_ARGUMENT, 0.0)
            await _refuse_malformed(request, context)
        started = time.perf_counter()
        code = grpc.StatusCode.OK
        parent = inbound_context(context.invocation_metadata())
        with tracer.start_as_current_span(
            span_name,
            context=parent,
            kind=trace.SpanKind.SERVER,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                return await inner(request, context)
            except BaseException as exc:
                code = _code_of(exc, context)
                if span.is_recording():
                    span.set_attribute("rpc.grpc.status_code", code.value[0])
                if isinstance(exc, (asyncio.CancelledError, grpc.aio.AbortError)):
                    raise
                await _abort_for(exc, method, context)
                raise  # abort raised already; this keeps type checkers honest
            finally:
                durations.observe(code, time.perf_counter() - started)

    return unary


def wrap_stream(
    full_service: str, method: str, inner: Callable[..., AsyncIterator[Any]], service: str
) -> Callable[..., AsyncIterator[Any]]:
    """Server-streaming methods: error mapping only (they are long-lived watches)."""

    async def streaming(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        if isinstance(request, Malformed):
            await _refuse_malformed(request, context)
        try:
            async for message in inner(request, context):
                yield message
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except BaseException as exc:
            await _abort_for(exc, method, context)

    return streaming


def _token_required(inner: Callable[..., Any], tokens: AdminTokens) -> Callable[..., Any]:
    async def checked(request: Any, context: grpc.aio.ServicerContext) -> Any:
        tokens.verify(context.invocation_metadata())
        return await inner(request, context)

    return checked


def method_handlers(
    servicer: Any,
    full_service: str,
    service: str,
    guarded: Mapping[str, AdminTokens | None] | None = None,
) -> dict[str, grpc.RpcMethodHandler]:
    """A handler per method of ``full_service`` (its pb2 module imported),
    each wrapped once, with a parser that flags malformed requests; a method
    in ``guarded`` first verifies the caller's token against its verifier
    when one is given (always, in the stack; tests on plaintext loopback may
    omit it): the admin or the app audience."""
    guarded = guarded or {}
    descriptor = descriptor_pool.Default().FindServiceByName(full_service)
    handlers: dict[str, grpc.RpcMethodHandler] = {}
    for method in descriptor.methods:
        request_class = message_factory.GetMessageClass(method.input_type)
        response_class = message_factory.GetMessageClass(method.output_type)
        inner = getattr(servicer, method.name)
        verifier = guarded.get(method.name)
        if verifier is not None:
            inner = _token_required(inner, verifier)
        if method.client_streaming:
            raise ValueError(f"{full_service}/{method.name}: client streaming is not supported")
        if method.server_streaming:
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                wrap_stream(full_service, method.name, inner, service),
                request_deserializer=_parser(request_class),
                response_serializer=response_class.SerializeToString,
            )
        else:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                wrap_unary(full_service, method.name, inner, service),
                request_deserializer=_parser(request_class),
                response_serializer=response_class.SerializeToString,
            )
    return handlers
