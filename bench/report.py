"""The latency-budget report: where does each request's time go?

Reads OTLP JSON span files (what the services write without a collector,
``<data_dir>/traces/*.jsonl``), finds every gateway request span and its
stage spans (``gateway.<stage>``), and gives per stage: p50, p95 and p99
duration, its share of end-to-end latency at p50 and p99 (stage percentile
over end-to-end percentile), its budget and how often it ran over.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REQUEST_SPANS = (
    "/recserve.recommend.v1.RecommendService/Recommend",
    "/recserve.recommend.v1.RecommendService/SimilarItems",
)
STAGES = ("features", "embed", "retrieve", "rank")


@dataclass
class StageRow:
    stage: str
    count: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    share_p50: float
    share_p99: float
    budget_ms: float
    over_budget: int


def spans_from_files(paths: Iterable[Path]) -> list[dict[str, object]]:
    spans: list[dict[str, object]] = []
    for path in paths:
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            for resource in json.loads(line).get("resourceSpans", []):
                for scope in resource.get("scopeSpans", []):
                    spans.extend(scope.get("spans", []))
    return spans


def duration_ms(span: dict[str, object]) -> float:
    return (int(span["endTimeUnixNano"]) - int(span["startTimeUnixNano"])) / 1e6  # type: ignore[call-overload]


def stage_report(
    spans: list[dict[str, object]], budgets: dict[str, float]
) -> tuple[dict[str, float], list[StageRow]]:
    requests = {s["spanId"]: s for s in spans if s.get("name") in REQUEST_SPANS}
    stage_times: dict[str, list[float]] = defaultdict(list)
    for span in spans:
        name = str(span.get("name", ""))
        if name.startswith("gateway.") and span.get("parentSpanId") in requests:
            stage_times[name.removeprefix("gateway.")].append(duration_ms(span))
    total = np.array([duration_ms(s) for s in requests.values()]) if requests else np.zeros(1)
    e2e = {
        "requests": len(requests),
        "p50_ms": float(np.percentile(total, 50)),
        "p95_ms": float(np.percentile(total, 95)),
        "p99_ms": float(np.percentile(total, 99)),
    }
    rows = []
    for stage in [s for s in STAGES if s in stage_times] + sorted(set(stage_times) - set(STAGES)):
        times = np.array(stage_times[stage])
        p50, p95, p99 = (float(np.percentile(times, q)) for q in (50, 95, 99))
        budget = budgets.get(stage, float("inf"))
        rows.append(
            StageRow(
                stage,
                len(times),
                p50,
                p95,
                p99,
                p50 / e2e["p50_ms"] if e2e["p50_ms"] else 0.0,
                p99 / e2e["p99_ms"] if e2e["p99_ms"] else 0.0,
                budget,
                int((times > budget).sum()),
            )
        )
    return e2e, rows


def default_budgets() -> dict[str, float]:
    from services.gateway.config import GatewaySettings

    s = GatewaySettings()
    return {
        "features": s.features_ms,
        "embed": s.embed_ms,
        "retrieve": s.retrieve_ms,
        "rank": s.rank_ms,
    }


def write_charts(
    e2e: dict[str, float], rows: list[StageRow], totals_ms: list[float], out_dir: Path
) -> list[Path]:
    """Stacked stage shares at p50 and p99, and the end-to-end latency CDF,
    as a PNG and a self-contained HTML page that embeds it."""
    import base64

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    fig, (shares, cdf) = plt.subplots(1, 2, figsize=(12, 4.5))
    bottoms = {"p50": 0.0, "p99": 0.0}
    for row in rows:
        values = {"p50": row.p50_ms, "p99": row.p99_ms}
        shares.bar(
            list(values), list(values.values()), bottom=list(bottoms.values()), label=row.stage
        )
        for key in bottoms:
            bottoms[key] += values[key]
    shares.plot(
        ["p50", "p99"], [e2e["p50_ms"], e2e["p99_ms"]], "k_", markersize=40, label="end to end"
    )
    shares.set_ylabel("ms")
    shares.set_title("Stage latency stacked, at p50 and p99")
    shares.legend(fontsize=8)
    ordered = np.sort(np.asarray(totals_ms))
    cdf.plot(ordered, np.arange(1, len(ordered) + 1) / max(1, len(ordered)))
    cdf.set_xlabel("end-to-end ms")
    cdf.set_ylabel("fraction of requests")
    cdf.set_title(f"Latency CDF ({len(ordered)} requests)")
    cdf.grid(alpha=0.3)
    fig.tight_layout()
    png = out_dir / "latency_budget.png"
    fig.savefig(png, dpi=110)
    plt.close(fig)
    html = out_dir / "latency_budget.html"
    rows_html = "".join(
        f"<tr><td>{r.stage}</td><td>{r.p50_ms:.2f}</td><td>{r.p95_ms:.2f}</td>"
        f"<td>{r.p99_ms:.2f}</td><td>{r.share_p50:.0%}</td><td>{r.share_p99:.0%}</td>"
        f"<td>{r.budget_ms:.0f}</td><td>{r.over_budget}</td></tr>"
        for r in rows
    )
    image = base64.b64encode(png.read_bytes()).decode()
    html.write_text(
        "<!doctype html><meta charset=utf-8><title>recserve latency budget</title>"
        f"<h1>Latency budget</h1><p>{int(e2e['requests'])} requests; end to end p50 "
        f"{e2e['p50_ms']:.1f} ms, p99 {e2e['p99_ms']:.1f} ms</p>"
        "<table border=1 cellpadding=4><tr><th>stage</th><th>p50 ms</th><th>p95 ms</th>"
        "<th>p99 ms</th><th>share@p50</th><th>share@p99</th><th>budget ms</th>"
        f"<th>over budget</th></tr>{rows_html}</table>"
        f'<p><img alt="stage shares and latency CDF" src="data:image/png;base64,{image}"></p>'
    )
    return [png, html]


def request_totals(spans: list[dict[str, object]]) -> list[float]:
    return [duration_ms(s) for s in spans if s.get("name") in REQUEST_SPANS]


def spans_from_tempo(
    base_url: str, limit: int = 500, lookback_s: int = 3600
) -> list[dict[str, object]]:
    """Gateway traces from Tempo's HTTP API (search, then each trace as OTLP JSON)."""
    import time
    import urllib.parse
    import urllib.request

    query = urllib.parse.urlencode(
        {
            "q": '{ resource.service.name = "gateway" }',
            "limit": limit,
            "start": int(time.time()) - lookback_s,
            "end": int(time.time()),
        }
    )
    with urllib.request.urlopen(f"{base_url}/api/search?{query}", timeout=30) as response:
        found = json.loads(response.read())
    spans: list[dict[str, object]] = []
    for entry in found.get("traces", []):
        url = f"{base_url}/api/traces/{entry['traceID']}"
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            trace = json.loads(response.read())
        # Tempo answers OTLP JSON under "batches" (older) or "resourceSpans".
        for resource in trace.get("batches", []) + trace.get("resourceSpans", []):
            for scope in resource.get(
                "scopeSpans", resource.get("instrumentationLibrarySpans", [])
            ):
                spans.extend(scope.get("spans", []))
    return spans
