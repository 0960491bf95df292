"""Trace context across hops without interceptors."""

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON

from recserve_kit.tracing import inbound_context, is_sampled, outbound_metadata


def test_context_travels_sampled_or_not():
    for sampler, sampled in ((ALWAYS_ON, True), (ALWAYS_OFF, False)):
        tracer = TracerProvider(sampler=sampler).get_tracer("t")
        assert outbound_metadata() == ()  # no span, nothing to send
        with tracer.start_as_current_span("caller") as span:
            metadata = outbound_metadata()
            assert is_sampled() is sampled
        ((key, value),) = metadata
        assert key == "traceparent" and bool(int(value[-2:], 16) & 1) is sampled
        remote = trace.get_current_span(inbound_context([("other", "x"), *metadata]))
        assert remote.get_span_context().trace_id == span.get_span_context().trace_id
        assert remote.get_span_context().span_id == span.get_span_context().span_id
    assert inbound_context([("x-request-start", "1")]) is None
