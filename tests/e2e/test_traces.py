"""One request, one trace: a real OTLP gRPC receiver started by the test gets
spans from Envoy, the gateway and every backend, with the right edges."""

from concurrent import futures

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from recserve.recommend.v1 import recommend_pb2 as pb
from recserve.recommend.v1 import recommend_pb2_grpc
from tests.helpers import data_dir_with_artifacts, free_port, poll_until
from tests.stack import running_stack

EXPECTED_EDGES = {
    ("envoy", "gateway"),
    ("gateway", "features"),
    ("gateway", "ranker"),
    ("gateway", "retriever"),
}
GATEWAY_STAGES = {
    "gateway.features",
    "gateway.embed",
    "gateway.retrieve",
    "gateway.item_features",
    "gateway.rank",
}


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    """The receiving end of OTLP/gRPC; keeps every span with its service."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, object]] = []

    def Export(self, request, context):
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
        return trace_service_pb2.ExportTraceServiceResponse()


def test_one_request_is_one_trace_across_every_component(built, tmp_path):
    receiver = Receiver()
    server = grpc.server(futures.ThreadPoolExecutor(4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, server)
    port = free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    data_dir = data_dir_with_artifacts(tmp_path / "data", built.directory.parents[1])
    otel = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_EXPORTER_OTLP_INSECURE": "true",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    try:
        with running_stack(data_dir, **otel) as stack:
            with grpc.insecure_channel(stack.envoy_address) as channel:
                stub = recommend_pb2_grpc.RecommendServiceStub(channel)
                reply = poll_until(
                    lambda: (lambda r: r if not r.degraded else None)(
                        stub.Recommend(pb.RecommendRequest(user_id="42", k=10), timeout=2)
                    ),
                    30,
                    0.2,
                    "a full answer",
                )
            assert reply.items

            def trace_of_full_request():
                by_trace: dict[bytes, list] = {}
                for service, span in receiver.spans:
                    by_trace.setdefault(span.trace_id, []).append((service, span))
                for spans in by_trace.values():
                    names = {s.name for _, s in spans}
                    services = {svc for svc, _ in spans}
                    if (
                        names >= GATEWAY_STAGES
                        and {"envoy", "features", "ranker", "retriever"} <= services
                    ):
                        return spans
                return None

            spans = poll_until(trace_of_full_request, 30, 0.2, "the spans of one request")
    finally:
        server.stop(0)
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
