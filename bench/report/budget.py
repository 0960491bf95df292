"""The figures of a latency-budget review, from request records.

- ``summaries``: end-to-end percentiles and over-budget rates per group of
  requests (full answers, degraded ones by reason, errors).
- ``tail_breakdown``: where the time of the slowest 1% of requests went:
  the mean of each part over exactly those requests, so the parts add up to
  their mean end-to-end time (each stage's own p99 would not: the slowest
  features calls and the slowest rank calls are rarely the same requests).
- ``stage_rows``: each stage's own percentiles against its cap.
- ``split``: the same summary per model version or gateway build.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from bench.report.requests import OUTSIDE_STAGES, UNSET, Request, stage_order

# The service-level objective: 99% of requests answered within 120 ms end to
# end. The gateway's own budget (GatewaySettings.budget_ms, 100 ms) sits
# inside it, leaving room for Envoy, the network and queueing.
SLO_P99_MS = 120.0
TAIL_FRACTION = 0.01  # the slowest 1%: the requests past the p99


@dataclass(frozen=True)
class Budgets:
    end_to_end_ms: float
    stages_ms: dict[str, float] = field(default_factory=dict)
    slo_p99_ms: float = SLO_P99_MS


def default_budgets() -> Budgets:
    from services.gateway.config import GatewaySettings

    s = GatewaySettings()
    stages = {"features": s.features_ms, "embed": s.embed_ms}
    stages |= {"retrieve": s.retrieve_ms, "rank": s.rank_ms}
    return Budgets(s.budget_ms, stages)


@dataclass(frozen=True)
class Summary:
    group: str
    requests: int
    share: float  # of all requests in the window
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    over_budget: float  # share of the group's requests over the end-to-end budget
    over_slo: float  # share over the SLO's latency
    degraded: float  # share of the group's answers that were degraded


@dataclass(frozen=True)
class Breakdown:
    group: str
    requests: int  # in the group
    tail: int  # the slowest 1% of them, at least one
    p99_ms: float  # the group's end-to-end p99
    tail_mean_ms: float  # the tail's mean end to end: the parts add up to it
    parts: dict[str, float]  # mean ms per part over the tail


@dataclass(frozen=True)
class StageRow:
    stage: str
    ran: int
    ran_share: float  # of the window's requests
    p50_ms: float
    p95_ms: float
    p99_ms: float
    budget_ms: float
    over_budget: float  # share of the stage's calls over its cap
    tail_mean_ms: float  # mean over the slowest 1% of all requests


def percentile(values: Sequence[float] | np.ndarray, q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if len(values) else 0.0


def summary(group: str, requests: Sequence[Request], total: int, budgets: Budgets) -> Summary:
    e2e = np.asarray([r.e2e_ms for r in requests])
    n = len(requests)

    def rate(mask: np.ndarray) -> float:
        return float(mask.mean()) if n else 0.0

    return Summary(
        group,
        n,
        n / total if total else 0.0,
        percentile(e2e, 50),
        percentile(e2e, 95),
        percentile(e2e, 99),
        float(e2e.max()) if n else 0.0,
        rate(e2e > budgets.end_to_end_ms),
        rate(e2e > budgets.slo_p99_ms),
        sum(r.kind == "degraded" for r in requests) / n if n else 0.0,
    )


def answer_groups(requests: Sequence[Request]) -> dict[str, list[Request]]:
    """All, full answers, degraded ones (then each reason), errors; empty ones left out."""
    groups: dict[str, list[Request]] = {"all": list(requests)}
    groups["full"] = [r for r in requests if r.kind == "full"]
    groups["degraded"] = [r for r in requests if r.kind == "degraded"]
    for group in sorted({r.group for r in groups["degraded"]}):
        groups[group] = [r for r in groups["degraded"] if r.group == group]
    groups["error"] = [r for r in requests if r.kind == "error"]
    return {name: members for name, members in groups.items() if members}


def summaries(requests: Sequence[Request], budgets: Budgets) -> list[Summary]:
    return [
        summary(name, members, len(requests), budgets)
        for name, members in answer_groups(requests).items()
    ]


def tail(requests: Sequence[Request], fraction: float = TAIL_FRACTION) -> list[Request]:
    """The slowest ``fraction`` of requests end to end (at least one), slowest first."""
    count = max(1, math.ceil(len(requests) * fraction)) if requests else 0
    return sorted(requests, key=lambda r: r.e2e_ms, reverse=True)[:count]


def part_names(requests: Sequence[Request]) -> list[str]:
    return [*stage_order(requests), *OUTSIDE_STAGES]


def tail_breakdown(group: str, requests: Sequence[Request]) -> Breakdown:
    slowest = tail(requests)
    names = part_names(requests)
    parts = {
        name: sum(r.parts.get(name, 0.0) for r in slowest) / len(slowest) if slowest else 0.0
        for name in names
    }
    mean = sum(r.e2e_ms for r in slowest) / len(slowest) if slowest else 0.0
    p99 = percentile([r.e2e_ms for r in requests], 99)
    return Breakdown(group, len(requests), len(slowest), p99, mean, parts)


def breakdowns(requests: Sequence[Request]) -> list[Breakdown]:
    groups = answer_groups(requests)
    return [tail_breakdown(g, groups[g]) for g in ("all", "full", "degraded") if g in groups]


def stage_rows(requests: Sequence[Request], budgets: Budgets) -> list[StageRow]:
    slowest = tail(requests)
    rows = []
    for stage in stage_order(requests):
        times = [r.stages[stage] for r in requests if stage in r.stages]
        cap = budgets.stages_ms.get(stage, math.inf)
        rows.append(
            StageRow(
                stage,
                len(times),
                len(times) / len(requests),
                percentile(times, 50),
                percentile(times, 95),
                percentile(times, 99),
                cap,
                sum(t > cap for t in times) / len(times),
                sum(r.stages.get(stage, 0.0) for r in slowest) / len(slowest),
            )
        )
    return rows


def split(
    requests: Sequence[Request],
    key: Callable[[Request], str],
    budgets: Budgets,
    missing: str = UNSET,
) -> list[Summary]:
    """The summary per value of ``key`` (model version, gateway build), largest first."""
    groups: dict[str, list[Request]] = defaultdict(list)
    for r in requests:
        groups[key(r) or missing].append(r)
    ordered = sorted(groups.items(), key=lambda item: -len(item[1]))
    return [summary(name, members, len(requests), budgets) for name, members in ordered]
