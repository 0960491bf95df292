"""One request, one trace: a real OTLP gRPC receiver started by the test gets
spans from Envoy, the gateway and every backend, with the right edges."""

import json
import threading
import urllib.request
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from recserve.recommend.v1 import recommend_pb2_grpc
from tests.helpers import data_dir_with_artifacts, free_port, full_answer, poll_until
from tests.stack import running_stack

EXPECTED_EDGES = {
    ("envoy", "gateway"),
    ("gateway", "features"),
    ("gateway", "ranker"),
    ("gateway", "retriever"),
    ("ranker", "triton"),
}
EVERY_COMPONENT = {"envoy", "features", "ranker", "retriever", "triton"}
REQUESTS = 3  # full answers sent, one after another, until one's trace is whole
GATEWAY_STAGES = {
    "gateway.features",
    "gateway.embed",
    "gateway.retrieve",
    "gateway.rank",
}


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    """The receiving end of OTLP/gRPC (and, for Triton, OTLP/HTTP)."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, object]] = []

    def Export(self, request, context=None):
        self.keep(request)
        return trace_service_pb2.ExportTraceServiceResponse()

    def keep_json(self, payload: dict) -> None:
        """OTLP/JSON, as Triton's exporter sends it (ids as hex strings)."""
        for resource_spans in payload.get("resourceSpans", []):
            attributes = resource_spans.get("resource", {}).get("attributes", [])
            service = next(
                (
                    a["value"].get("stringValue", "?")
                    for a in attributes
                    if a["key"] == "service.name"
                ),
                "?",
            )
            for scope in resource_spans.get("scopeSpans", []):
                for span in scope.get("spans", []):
                    self.spans.append(
                        (
                            service,
                            SimpleNamespace(
                                name=span.get("name", ""),
                                trace_id=bytes.fromhex(span["traceId"]),
                                span_id=bytes.fromhex(span["spanId"]),
                                parent_span_id=bytes.fromhex(span.get("parentSpanId", "")),
                                attributes=[],
                            ),
                        )
                    )

    def keep(self, request) -> None:
        for resource_spans in request.resource_spans:
            service = next(
                (
                    a.value.string_value
                    for a in resource_spans.resource.attributes
                    if a.key == "service.name"
                ),
                "?",
            )
            for scope in resource_spans.scope_spans:
                self.spans.extend((service, span) for span in scope.spans)


def http_receiver(receiver: Receiver) -> tuple[ThreadingHTTPServer, int]:
    """OTLP/HTTP (protobuf) on /v1/traces: how Triton exports."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["content-length"]))
            if "json" in self.headers.get("content-type", ""):
                receiver.keep_json(json.loads(body))
            else:
                request = trace_service_pb2.ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.keep(request)
            reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args):
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


def traces_seen(receiver: Receiver) -> list[tuple[list[str], list[str]]]:
    """Each trace's services and span names, for a failure's message."""
    by_trace: dict[bytes, tuple[set[str], set[str]]] = {}
    for service, span in list(receiver.spans):
        services, names = by_trace.setdefault(span.trace_id, (set(), set()))
        services.add(service)
        names.add(span.name)
    return [(sorted(services), sorted(names)) for services, names in by_trace.values()]


def envoy_export(stack) -> str:
    """Envoy's counts of spans sent and of calls to the collector, for a failure's message."""
    admin = f"http://127.0.0.1:{stack.port('envoy_admin')}"
    url = f"{admin}/stats?filter=opentelemetry|otel_collector.upstream_rq_"
    with urllib.request.urlopen(url, timeout=5) as response:
        return " ".join(
            line for line in response.read().decode().splitlines() if not line.endswith(": 0")
        )


def whole_trace(receiver: Receiver) -> list | None:
    """The spans of a trace that holds every component and gateway stage."""
    by_trace: dict[bytes, list] = {}
    for service, span in list(receiver.spans):
        by_trace.setdefault(span.trace_id, []).append((service, span))
    for spans in by_trace.values():
        names = {s.name for _, s in spans}
        services = {svc for svc, _ in spans}
        if names >= GATEWAY_STAGES and services >= EVERY_COMPONENT:
            return spans
    return None


def a_whole_trace(stack, receiver: Receiver) -> list:
    """A full answer's whole trace. Export is best effort (Envoy's tracer
    drops spans a collector does not take in time; an SDK's queue drops when
    full), so a trace that stays incomplete is followed by another request,
    up to three; the test is about what a whole trace holds."""
    with grpc.insecure_channel(stack.envoy_address) as channel:
        stub = recommend_pb2_grpc.RecommendServiceStub(channel)
        for _ in range(REQUESTS):
            assert full_answer(stub, k=10).items
            try:
                return poll_until(lambda: whole_trace(receiver), 20, 0.2, "a whole trace")
            except AssertionError as timed_out:
                incomplete = timed_out
    seen = traces_seen(receiver)
    raise AssertionError(f"{incomplete} after {REQUESTS} requests; traces: {seen}; "
                         f"{envoy_export(stack)}")  # fmt: skip


@pytest.mark.local_stack_only
def test_one_request_is_one_trace_across_every_component(built, tmp_path):
    receiver = Receiver()
    server = grpc.server(futures.ThreadPoolExecutor(4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, server)
    port = free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    http_server, http_port = http_receiver(receiver)
    data_dir = data_dir_with_artifacts(tmp_path / "data", built.directory.parents[1])
    otel = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_EXPORTER_OTLP_INSECURE": "true",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "RECSERVE_STACK_TRACE_SAMPLE_RATIO": "1",
        "RECSERVE_STACK_TRITON_OTLP_HTTP_URL": f"http://127.0.0.1:{http_port}/v1/traces",
    }
    try:
        with running_stack(data_dir, **otel) as stack:
            spans = a_whole_trace(stack, receiver)
    finally:
        server.stop(0)
        http_server.shutdown()
    service_of = {span.span_id: service for service, span in spans}
    edges = {
        (service_of[span.parent_span_id], service)
        for service, span in spans
        if span.parent_span_id in service_of and service_of[span.parent_span_id] != service
    }
    assert edges >= EXPECTED_EDGES, edges
    roots = [span for _, span in spans if not span.parent_span_id]
    assert len(roots) == 1 and service_of[roots[0].span_id] == "envoy"
    stage = next(s for _, s in spans if s.name == "gateway.rank")
    keys = {a.key for a in stage.attributes}
    assert "recserve.stage" in keys and "recserve.budget.remaining_ms" in keys
