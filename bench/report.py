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
STAGES = ("features", "embed", "retrieve", "item_features", "rank")


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
        "item_features": s.item_features_ms,
        "rank": s.rank_ms,
    }
