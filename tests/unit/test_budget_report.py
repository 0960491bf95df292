"""The latency-budget report against a hand-computed example."""

import json

import pytest

from bench.report import spans_from_files, stage_report

MS = 1_000_000  # nanoseconds


def span(span_id, name, start_ms, end_ms, parent=""):
    return {
        "spanId": span_id,
        "parentSpanId": parent,
        "name": name,
        "startTimeUnixNano": str(start_ms * MS),
        "endTimeUnixNano": str(end_ms * MS),
    }


def test_report_numbers_equal_a_hand_computed_example(tmp_path):
    recommend = "/recserve.recommend.v1.RecommendService/Recommend"
    spans = [
        span("r1", recommend, 0, 20),
        span("a", "gateway.features", 0, 2, "r1"),
        span("b", "gateway.rank", 2, 12, "r1"),
        span("r2", recommend, 100, 140),
        span("c", "gateway.features", 100, 104, "r2"),
        span("d", "gateway.rank", 104, 140, "r2"),
        span("x", "gateway.rank", 0, 99, "not-a-request"),  # ignored: no request parent
    ]
    path = tmp_path / "gateway.jsonl"
    path.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}) + "\n")
    e2e, rows = stage_report(spans_from_files([path]), {"features": 3.0, "rank": 30.0})
    # End to end: 20 and 40 ms -> p50 30 (linear interpolation), p99 39.8.
    assert e2e["requests"] == 2
    assert e2e["p50_ms"] == pytest.approx(30.0)
    assert e2e["p99_ms"] == pytest.approx(39.8)
    by_stage = {r.stage: r for r in rows}
    assert list(by_stage) == ["features", "rank"]
    features, rank = by_stage["features"], by_stage["rank"]
    assert features.count == 2 and features.p50_ms == pytest.approx(3.0)
    assert features.p99_ms == pytest.approx(3.98)
    assert features.share_p50 == pytest.approx(3.0 / 30.0)
    assert features.over_budget == 1  # 4 ms > 3 ms
    assert rank.p50_ms == pytest.approx(23.0) and rank.p95_ms == pytest.approx(34.7)
    assert rank.share_p99 == pytest.approx(35.74 / 39.8)
    assert rank.over_budget == 1  # 36 ms > 30 ms


def test_charts_are_written_as_png_and_html(tmp_path):
    from bench.report import StageRow, write_charts

    rows = [
        StageRow("features", 2, 3.0, 3.8, 3.98, 0.1, 0.1, 3.0, 1),
        StageRow("rank", 2, 23.0, 34.7, 35.74, 0.77, 0.9, 30.0, 1),
    ]
    e2e = {"requests": 2, "p50_ms": 30.0, "p95_ms": 39.0, "p99_ms": 39.8}
    png, html = write_charts(e2e, rows, [20.0, 40.0], tmp_path)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = html.read_text()
    assert "<td>rank</td><td>23.00</td>" in page and "data:image/png;base64," in page


def test_spans_are_read_from_tempos_http_api():
    """The reader against Tempo's documented search and trace endpoints, served
    here by a stand-in HTTP server (no Tempo can be installed on this machine)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from bench.report import spans_from_tempo

    recommend = "/recserve.recommend.v1.RecommendService/Recommend"
    trace = {
        "batches": [
            {
                "scopeSpans": [
                    {
                        "spans": [
                            span("r1", recommend, 0, 20),
                            span("a", "gateway.rank", 2, 12, "r1"),
                        ]
                    }
                ]
            }
        ]
    }
    seen = []

    class Tempo(BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.path)
            body = (
                trace
                if self.path.startswith("/api/traces/")
                else {"traces": [{"traceID": "abc123"}]}
            )
            data = json.dumps(body).encode()
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
    assert [s["name"] for s in spans] == [recommend, "gateway.rank"]
    assert seen[0].startswith("/api/search?") and "gateway" in seen[0]
    assert seen[1] == "/api/traces/abc123"
    e2e, rows = stage_report(spans, {"rank": 30.0})
    assert e2e["requests"] == 1 and rows[0].p50_ms == pytest.approx(10.0)
