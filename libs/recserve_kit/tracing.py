"""W3C trace context across our hops, without per-call interceptors.

``outbound_metadata`` gives the gRPC metadata that carries the current span's
context to the next service; ``inbound_context`` reads it back on the server.
The context travels whether or not the trace is sampled (the sampled flag
says which), so a backend never starts a trace of its own for a request the
gateway decided not to trace.
"""

from __future__ import annotations

from collections.abc import Iterable

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_propagator = TraceContextTextMapPropagator()
TRACEPARENT = "traceparent"


def traceparent() -> str:
    """The current span's ``traceparent`` value, or "" without a valid span."""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return ""
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def outbound_metadata() -> tuple[tuple[str, str], ...]:
    value = traceparent()
    return ((TRACEPARENT, value),) if value else ()


def is_sampled() -> bool:
    return trace.get_current_span().get_span_context().trace_flags.sampled


def inbound_context(metadata: Iterable[tuple[str, str | bytes]] | None) -> Context | None:
    """The caller's context from its ``traceparent``/``tracestate``, or None (a root)."""
    carrier: dict[str, str] = {}
    for key, value in metadata or ():
        if key == TRACEPARENT or key == "tracestate":
            carrier[key] = value if isinstance(value, str) else value.decode()
    if not carrier:
        return None
    return _propagator.extract(carrier)
