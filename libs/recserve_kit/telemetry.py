"""OpenTelemetry and Prometheus setup, configured only through OTEL_* variables.

With OTEL_EXPORTER_OTLP_ENDPOINT set, spans go over OTLP/gRPC. Without it they
are written as OTLP JSON lines (one ExportTraceServiceRequest per line, the
format of the Collector's file exporter) under ``<data_dir>/traces/``, so a
laptop run still leaves traces the latency report can read. Spans of our
RPCs come from ``recserve_kit.rpc`` (server) and the callers' stage spans. Sampling follows
OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG as the SDK defines them.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from google.protobuf.json_format import MessageToJson
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from prometheus_client import start_http_server

# Per service: the file, then one older file of this size (unrotated, a
# long-running stack filled its volume with spans).
TRACE_FILE_MAX_BYTES = 64 * 1024 * 1024


class OtlpJsonFileExporter(SpanExporter):
    """Appends spans to a file as OTLP JSON, one export request per line;
    past ``max_bytes`` the file becomes ``<name>.1`` (replacing the older one)."""

    def __init__(self, path: Path, max_bytes: int = TRACE_FILE_MAX_BYTES) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.max_bytes = max_bytes
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        line = MessageToJson(encode_spans(spans), indent=None).replace("\n", "") + "\n"
        with self._lock:
            try:
                size = self.path.stat().st_size
            except FileNotFoundError:
                size = 0
            if size and size + len(line) > self.max_bytes:
                os.replace(self.path, self.path.with_name(self.path.name + ".1"))
            with self.path.open("a", encoding="utf-8") as out:
                out.write(line)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


@dataclass
class Telemetry:
    providers: list[TracerProvider]

    def shutdown(self) -> None:
        """Flush spans still buffered; called last on shutdown."""
        for provider in self.providers:
            provider.force_flush()
            provider.shutdown()


# The services a process hosts beside its own (services.one_process), each
# with a tracer provider of its own: a trace shows their spans under their
# own names, as when each runs apart.
_HOSTED: dict[str, TracerProvider] = {}


def tracer_for(service: str) -> trace.Tracer:
    """The tracer for ``service``'s server spans: its own provider where this
    process hosts it beside another, the process's otherwise."""
    hosted = _HOSTED.get(service)
    return hosted.get_tracer("recserve.rpc") if hosted else trace.get_tracer("recserve.rpc")


def _provider(service: str, data_dir: Path) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    ):
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        exporter: SpanExporter = OTLPSpanExporter()
    else:
        exporter = OtlpJsonFileExporter(data_dir / "traces" / f"{service}.jsonl")
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def setup_telemetry(
    service: str,
    data_dir: Path,
    metrics_port: int = 0,
    metrics_host: str = "127.0.0.1",
    hosted: Sequence[str] = (),
) -> Telemetry:
    provider = _provider(service, data_dir)
    trace.set_tracer_provider(provider)
    for name in hosted:
        _HOSTED[name] = _provider(name, data_dir)
    # No grpc instrumentation patches: the kit's servers open their own
    # server spans (recserve_kit.rpc) and callers pass the context on
    # (recserve_kit.tracing), which costs a fraction of the interceptors.
    if metrics_port:
        start_http_server(metrics_port, addr=metrics_host)
    return Telemetry([provider, *(_HOSTED[name] for name in hosted)])
