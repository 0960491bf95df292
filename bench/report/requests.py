"""One record per gateway request, assembled from its spans.

A request's time is split into parts that add up to its end-to-end time:

- each stage (the gateway's ``gateway.<stage>`` child spans),
- ``other``: the gateway's request span outside every stage span (the
  handler before the first stage, merging, titles, serialisation),
- ``queued``: from Envoy taking the request (its ``x-request-start``) to the
  gateway starting it, as the gateway records it (``recserve.queued_ms``),
- ``envoy``: the rest of Envoy's own span (Envoy and the network both ways),
  when Envoy's span was exported (tracing on at Envoy).

End to end is the sum: Envoy's span when there is one (never less than the
gateway's own time plus queueing), else queueing plus the gateway's span.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from bench.report.spans import Span
from recserve_kit import attributes as attr

REQUEST_SPANS = (
    "/recserve.recommend.v1.RecommendService/Recommend",
    "/recserve.recommend.v1.RecommendService/SimilarItems",
)
STAGES = ("features", "embed", "retrieve", "rank")
OUTSIDE_STAGES = ("other", "queued", "envoy")
ENVOY_SERVICE = "envoy"
UNSET = "(unset)"
NO_REASON = "reason not recorded"  # degraded, without a reason on the request or a stage


@dataclass(frozen=True)
class Request:
    trace_id: str
    method: str
    start_ns: int
    gateway_ms: float
    stages: dict[str, float] = field(default_factory=dict)
    queued_ms: float = 0.0
    envoy_ms: float | None = None
    degraded: bool = False
    reason: str = ""
    error: bool = False
    model_version: str = ""
    build: str = ""
    instance: str = ""  # the gateway process (service.instance.id, new each start)

    @property
    def kind(self) -> str:
        """What was answered: "full", "degraded" (a fallback), or "error" (a status)."""
        return "error" if self.error else "degraded" if self.degraded else "full"

    @property
    def group(self) -> str:
        """The kind of answer, degraded ones by reason: "full", "degraded: SHED", "error"."""
        if self.kind == "degraded":
            return f"degraded: {self.reason or NO_REASON}"
        return self.kind

    @property
    def parts(self) -> dict[str, float]:
        other = max(0.0, self.gateway_ms - sum(self.stages.values()))
        envoy = 0.0
        if self.envoy_ms is not None:
            envoy = max(0.0, self.envoy_ms - self.gateway_ms - self.queued_ms)
        return {**self.stages, "other": other, "queued": self.queued_ms, "envoy": envoy}

    @property
    def e2e_ms(self) -> float:
        return sum(self.parts.values())


def exclusive_ms(request: Span, children: Iterable[Span]) -> dict[str, float]:
    """Time inside each stage span, clipped to the request and counted once
    where stage spans overlap (the earlier-starting stage keeps the overlap)."""
    out: dict[str, float] = {}
    covered_until = request.start_ns
    for child in sorted(children, key=lambda s: s.start_ns):
        start = max(child.start_ns, request.start_ns, covered_until)
        end = min(child.end_ns, request.end_ns)
        stage = str(child.attributes.get(attr.STAGE) or child.name.removeprefix("gateway."))
        out[stage] = out.get(stage, 0.0) + max(0, end - start) / 1e6
        covered_until = max(covered_until, end)
    return out


def envoy_span(span: Span, by_id: dict[str, Span]) -> Span | None:
    """The outermost Envoy span above a gateway span (Envoy may add an upstream span)."""
    found = None
    parent = by_id.get(span.parent_id)
    while parent is not None and parent.service == ENVOY_SERVICE:
        found = parent
        parent = by_id.get(parent.parent_id)
    return found


def request_of(span: Span, children: list[Span], by_id: dict[str, Span]) -> Request:
    a = span.attributes
    reason = str(a.get(attr.DEGRADED_REASON) or "")
    if a.get(attr.DEGRADED) and not reason:
        failed = (c.attributes.get(attr.DEGRADED_REASON) for c in children)
        reason = str(next((f for f in failed if f), ""))
    envoy = envoy_span(span, by_id)
    return Request(
        trace_id=span.trace_id,
        method=span.name.rsplit("/", 1)[-1],
        start_ns=span.start_ns,
        gateway_ms=span.duration_ms,
        stages=exclusive_ms(span, children),
        queued_ms=float(a.get(attr.QUEUED_MS) or 0.0),
        envoy_ms=None if envoy is None else envoy.duration_ms,
        degraded=bool(a.get(attr.DEGRADED)),
        reason=reason,
        error=bool(a.get("rpc.grpc.status_code")),
        model_version=str(a.get(attr.MODEL_VERSION) or ""),
        build=str(span.resource.get("service.version") or ""),
        instance=str(span.resource.get("service.instance.id") or ""),
    )


def requests_of(spans: Iterable[Span]) -> list[Request]:
    """Every gateway request among the spans, oldest first."""
    spans = list(spans)
    by_id = {s.span_id: s for s in spans}
    requests = [s for s in spans if s.name in REQUEST_SPANS]
    ids = {s.span_id for s in requests}
    children: dict[str, list[Span]] = defaultdict(list)
    for s in spans:
        if s.name.startswith("gateway.") and s.parent_id in ids:
            children[s.parent_id].append(s)
    out = [request_of(s, children[s.span_id], by_id) for s in requests]
    return sorted(out, key=lambda r: r.start_ns)


def stage_order(requests: Iterable[Request]) -> list[str]:
    seen = {stage for r in requests for stage in r.stages}
    return [s for s in STAGES if s in seen] + sorted(seen - set(STAGES))
