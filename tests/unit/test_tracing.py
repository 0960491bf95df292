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


def test_the_span_file_is_rotated_at_its_size_limit(tmp_path):
    """Span files once grew without bound in the volume."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from recserve_kit.telemetry import OtlpJsonFileExporter

    path = tmp_path / "traces" / "svc.jsonl"
    exporter = OtlpJsonFileExporter(path, max_bytes=2000)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    for n in range(40):
        with tracer.start_as_current_span(f"span-{n}"):
            pass
    older = path.with_name("svc.jsonl.1")
    assert older.exists() and path.exists()
    assert path.stat().st_size <= 2000 and older.stat().st_size <= 2000
    assert "span-39" in path.read_text()
    assert sorted(p.name for p in path.parent.iterdir()) == ["svc.jsonl", "svc.jsonl.1"]
