"""The latency-budget report against synthetic OTLP span files whose answers are known."""

import base64
import json
import math
import random

import pytest

from bench.report import Budgets, Selection, build_report, rows, spans_from_files
from bench.report.budget import percentile
from recserve_kit import attributes as attr

MS = 1_000_000  # nanoseconds
BASE_MS = 1_700_000_000_000  # 2023-11-14 22:13:20 UTC
RECOMMEND = "/recserve.recommend.v1.RecommendService/Recommend"
BUDGETS = Budgets(100.0, {"features": 15.0, "embed": 15.0, "retrieve": 15.0, "rank": 30.0})


def value(v):
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    return {"stringValue": v}


def b64(hex_id):
    """Ids as the services' exporter writes them (protobuf JSON: base64 bytes)."""
    return base64.b64encode(bytes.fromhex(hex_id)).decode()


def span(trace, span_id, name, start_ns, end_ns, parent="", **attributes):
    return {
        "traceId": b64(trace),
        "spanId": b64(span_id),
        "parentSpanId": b64(parent) if parent else "",
        "name": name,
        "startTimeUnixNano": str(start_ns),
        "endTimeUnixNano": str(end_ns),
        "attributes": [{"key": k, "value": value(v)} for k, v in attributes.items()],
    }


def request(n, at_s, gateway_ms, stages=(), queued_ms=0.0, model="ranker-1", **extra):
    """One Recommend: the gateway span (starting ``at_s`` after BASE) and its stage
    spans one after the other from 0.5 ms in; ``extra`` are request-span attributes."""
    trace, root = f"{n:032x}", f"{n:08x}{0:08x}"
    start = BASE_MS * MS + round(at_s * 1e9)
    attributes = {attr.QUEUED_MS: float(queued_ms), attr.MODEL_VERSION: model}
    attributes[attr.DEGRADED] = bool(extra.get(attr.DEGRADED, False))
    spans = [
        span(trace, root, RECOMMEND, start, start + round(gateway_ms * MS), **attributes | extra)
    ]
    at = start + MS // 2
    for k, (stage, ms) in enumerate(stages, start=1):
        spans.append(
            span(
                trace,
                f"{n:08x}{k:08x}",
                f"gateway.{stage}",
                at,
                at + round(ms * MS),
                root,
                **{attr.STAGE: stage},
            )
        )
        at += round(ms * MS)
    return spans


def export(spans, service="gateway", version=None, instance=None):
    resource = [{"key": "service.name", "value": value(service)}]
    if version:
        resource.append({"key": "service.version", "value": value(version)})
    if instance:
        resource.append({"key": "service.instance.id", "value": value(instance)})
    return {
        "resourceSpans": [{"resource": {"attributes": resource}, "scopeSpans": [{"spans": spans}]}]
    }


def write(tmp_path, *exports):
    path = tmp_path / "gateway.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in exports))
    return spans_from_files([path])


def report_of(spans, **selection):
    return build_report(spans, BUDGETS, Selection(**selection), "test")


FULL = (("features", 2), ("retrieve", 3), ("rank", 10))


def test_the_slowest_1pct_add_up_to_their_end_to_end_time_not_stacked_stage_p99s(tmp_path):
    """2 requests have slow features, 2 others a slow rank: each stage's own p99
    is its slow value, and stacking them (113 ms) exceeds every request."""
    spans = []
    for n in range(96):
        spans += request(n, n * 0.1, 20, FULL, queued_ms=1)
    for n in (96, 97):
        spans += request(n, n * 0.1, 60, (("features", 40), ("retrieve", 3), ("rank", 10)), 2)
    for n in (98, 99):
        spans += request(n, n * 0.1, 90, (("features", 2), ("retrieve", 3), ("rank", 70)), 4)
    report = report_of(write(tmp_path, export(spans)))
    everything = report.summaries[0]
    assert everything.group == "all" and everything.requests == 100
    assert everything.p99_ms == pytest.approx(94.0)
    assert sum(r.p99_ms for r in report.stages) == pytest.approx(113.0)  # the old, misleading bar
    tail = report.breakdowns[0]
    assert tail.group == "all" and tail.tail == 1
    assert tail.parts == pytest.approx(
        {"features": 2, "retrieve": 3, "rank": 70, "other": 15, "queued": 4, "envoy": 0}
    )
    assert sum(tail.parts.values()) == pytest.approx(tail.tail_mean_ms)
    assert tail.tail_mean_ms == pytest.approx(everything.p99_ms)


def test_the_breakdown_is_exactly_the_slowest_requests_for_any_mix(tmp_path):
    rng = random.Random(7)
    spans = []
    for n in range(1000):
        stages = [(s, rng.uniform(0.5, 12)) for s in ("features", "embed", "retrieve", "rank")]
        gateway = sum(ms for _, ms in stages) + rng.uniform(0.6, 5)
        spans += request(n, n * 0.01, gateway, stages, queued_ms=rng.expovariate(1.0))
    report = report_of(write(tmp_path, export(spans)))
    tail = report.breakdowns[0]
    e2e = sorted((r.e2e_ms for r in report.requests), reverse=True)
    assert tail.tail == 10
    assert tail.tail_mean_ms == pytest.approx(sum(e2e[:10]) / 10)
    assert sum(tail.parts.values()) == pytest.approx(tail.tail_mean_ms, abs=1e-9)
    assert min(e2e[:10]) >= percentile(e2e, 99) - 1e-9
    assert [r.e2e_ms for r in report.slowest] == pytest.approx(e2e[:10])


def degraded(reason=""):
    return {attr.DEGRADED: True, attr.DEGRADED_REASON: reason} if reason else {attr.DEGRADED: True}


def test_degraded_and_full_answers_are_apart_and_the_quick_ones_named(tmp_path):
    spans = []
    for n in range(50):
        spans += request(n, n * 0.1, 20, FULL, queued_ms=1)
    for n in range(50, 55):  # shed at the door after queueing: almost no gateway time
        spans += request(n, n * 0.1, 0.2, (), 30, "", **degraded("SHED"))
    for n in range(55, 60):  # a new user: features only, then the fallback
        spans += request(n, n * 0.1, 3, (("features", 2),), 1, "", **degraded("COLD_START"))
    # The rank stage timed out: the reason is on its span only.
    spans += request(60, 6, 40, (("features", 2), ("rank", 30)), 1, "", **degraded())
    spans[-1]["attributes"].append({"key": attr.DEGRADED_REASON, "value": value("RANKER_TIMEOUT")})
    spans += request(61, 6, 20, FULL, 1, "", **degraded())  # no reason anywhere
    report = report_of(write(tmp_path, export(spans)))
    groups = {s.group: s for s in report.summaries}
    assert list(groups) == [
        "all",
        "full",
        "degraded",
        "degraded: COLD_START",
        "degraded: RANKER_TIMEOUT",
        "degraded: SHED",
        "degraded: reason not recorded",
    ]
    assert groups["full"].requests == 50 and groups["full"].p50_ms == pytest.approx(21.0)
    assert groups["degraded: SHED"].p50_ms == pytest.approx(30.2)
    assert groups["degraded"].degraded == 1.0 and groups["full"].degraded == 0.0
    assert groups["all"].share == 1.0 and groups["degraded: SHED"].share == pytest.approx(5 / 62)
    assert report.quick == {"degraded: SHED": 5}
    assert "5 degraded: SHED" in rows.quick_line(report)
    assert "30.0 to 30.0 ms" in rows.quick_line(report)
    assert [b.group for b in report.breakdowns] == ["all", "full", "degraded"]
    assert report.breakdowns[2].parts["rank"] == pytest.approx(30.0)
    assert {m.group for m in report.by_model} == {"ranker-1", "(not ranked)"}


def test_the_window_is_the_latest_run_unless_told(tmp_path):
    first = [s for n in range(10) for s in request(n, n, 20, FULL)]
    latest = [s for n in range(10, 15) for s in request(n, 600 + n, 30, FULL)]
    spans = write(tmp_path, export(first), export(latest))
    report = report_of(spans)
    assert len(report.requests) == 5 and len(report.runs) == 2
    assert report.window.label.startswith("run 2 of 2 (the latest), 2023-11-14 22:23:30")
    assert report.title.startswith("Latency budget: run 2 of 2")
    assert len(report_of(spans, run=1).requests) == 10
    assert len(report_of(spans, all_runs=True).requests) == 15
    assert len(report_of(spans, gap_s=1000).requests) == 15  # one run: no gap that long
    since = str(BASE_MS / 1000 + 300)
    assert len(report_of(spans, since=since).requests) == 5
    assert len(report_of(spans, until="2023-11-14T22:14:00").requests) == 10
    with pytest.raises(ValueError, match="runs 1 to 2"):
        report_of(spans, run=3)


def test_a_restarted_gateway_starts_a_run_and_a_canary_joining_does_not(tmp_path):
    before = [s for n in range(10) for s in request(n, n, 20, FULL)]
    after = [s for n in range(10, 20) for s in request(n, n + 5, 20, FULL)]
    canary = [s for n in range(20, 25) for s in request(n, n, 20, FULL)]  # from 20 s, alongside
    spans = write(
        tmp_path,
        export(before, instance="first"),
        export(after, instance="second"),
        export(canary, instance="canary"),
    )
    report = report_of(spans)
    assert [run.requests for run in report.runs] == [10, 15]
    assert {r.instance for r in report.requests} == {"second", "canary"}


def test_the_slowest_trace_ids_are_listed_with_their_durations(tmp_path):
    spans = [s for n in range(30) for s in request(n, n, 10 + n, FULL)]
    report = report_of(write(tmp_path, export(spans)))
    assert [r.trace_id for r in report.slowest] == [f"{n:032x}" for n in range(29, 19, -1)]
    assert [r.e2e_ms for r in report.slowest] == pytest.approx(
        [10.0 + n for n in range(29, 19, -1)]
    )


def test_split_by_model_version_and_gateway_build(tmp_path):
    stable = [s for n in range(20) for s in request(n, n * 0.1, 20, FULL, model="ranker-3")]
    canary = [s for n in range(20, 25) for s in request(n, n * 0.1, 40, FULL, model="ranker-4")]
    report = report_of(
        write(tmp_path, export(stable, version="2024.06.1"), export(canary, version="2024.07.0"))
    )
    models = {s.group: s for s in report.by_model}
    assert models["ranker-3"].requests == 20 and models["ranker-4"].requests == 5
    assert models["ranker-4"].p50_ms == pytest.approx(40.0)
    builds = {s.group: s for s in report.by_build}
    assert builds["2024.06.1"].share == pytest.approx(0.8) and builds["2024.07.0"].requests == 5
    assert {r.build for r in report.requests} == {"2024.06.1", "2024.07.0"}


def test_envoy_time_is_its_span_less_the_gateway_and_the_queue(tmp_path):
    gateway = request(1, 0, 20, FULL, queued_ms=4)
    gateway[0]["parentSpanId"] = b64("e" * 16)
    envoy = {"traceId": f"{1:032x}", "spanId": "e" * 16, "name": "ingress"}
    envoy |= {
        "startTimeUnixNano": str(BASE_MS * MS - 5 * MS),
        "endTimeUnixNano": str(BASE_MS * MS + 25 * MS),
    }
    report = report_of(write(tmp_path, export(gateway), export([envoy], service="envoy")))
    (r,) = report.requests
    assert r.envoy_ms == pytest.approx(30.0) and r.e2e_ms == pytest.approx(30.0)
    assert r.parts["envoy"] == pytest.approx(6.0) and r.parts["other"] == pytest.approx(5.0)


def test_stage_rows_against_a_hand_computed_example(tmp_path):
    spans = request(1, 0, 20, (("features", 2), ("rank", 10))) + request(
        2, 1, 40, (("features", 4), ("rank", 35))
    )
    budgets = Budgets(100.0, {"features": 3.0, "rank": 30.0})
    report = build_report(write(tmp_path, export(spans)), budgets, Selection(), "test")
    assert report.summaries[0].p50_ms == pytest.approx(30.0)
    assert report.summaries[0].p99_ms == pytest.approx(39.8)
    features, rank = report.stages
    assert (features.stage, features.ran, features.p99_ms) == ("features", 2, pytest.approx(3.98))
    assert features.over_budget == 0.5 and rank.over_budget == 0.5  # rates, not counts
    assert rank.p50_ms == pytest.approx(22.5) and rank.p95_ms == pytest.approx(33.75)
    assert rank.tail_mean_ms == pytest.approx(35.0)  # the slowest request's rank


def test_the_page_holds_tables_charts_and_explanations(tmp_path):
    from bench.report import write_html, write_png

    spans = [s for n in range(30) for s in request(n, n, 10 + n, FULL)]
    report = report_of(write(tmp_path, export(spans)))
    png = write_png(report, tmp_path / "out" / "latency_budget.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = write_html(report, tmp_path / "out" / "latency_budget.html").read_text()
    assert page.count("data:image/png;base64,") == 3
    assert report.window.label in page and "SLO" in page and f"{29:032x}" in page
    for heading in (
        "Where the slowest 1% spent their time",
        "Stages against their caps",
        "Slowest traces",
        "By gateway build",
    ):
        assert heading in page


def test_spans_are_read_from_tempos_http_api():
    """The reader against Tempo's documented search and trace endpoints, served
    here by a stand-in HTTP server (no Tempo can be installed on this machine)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from bench.report import spans_from_tempo

    trace = {"batches": export(request(1, 0, 20, (("rank", 10),)))["resourceSpans"]}
    seen = []

    class Tempo(BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.path)
            found = {"traces": [{"traceID": "abc123"}]}
            data = json.dumps(trace if self.path.startswith("/api/traces/") else found).encode()
            self.send_response(200)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Tempo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        spans = spans_from_tempo(f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
    assert [s.name for s in spans] == [RECOMMEND, "gateway.rank"]
    assert spans[0].service == "gateway" and spans[0].trace_id == f"{1:032x}"
    assert seen[0].startswith("/api/search?") and "gateway" in seen[0]
    assert seen[1] == "/api/traces/abc123"
    report = report_of(spans)
    assert len(report.requests) == 1 and report.stages[0].p50_ms == pytest.approx(10.0)
    assert not math.isnan(report.p99_ms)


def test_no_spans_make_an_empty_report_not_an_error(tmp_path):
    from bench.report import write_html

    report = report_of([])
    assert report.requests == [] and report.runs == [] and report.slowest == []
    assert "No gateway requests" in write_html(report, tmp_path / "page.html").read_text()
