"""A whole report: the requests of a run or window and every figure of them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from bench.report import budget
from bench.report.budget import Breakdown, Budgets, StageRow, Summary
from bench.report.requests import Request, requests_of
from bench.report.spans import Span
from bench.report.window import DEFAULT_GAP_S, Run, Window, select, split_runs

SLOWEST = 10
QUICK_MS = 1.0  # a gateway span shorter than this did no stage work to speak of


@dataclass(frozen=True)
class Selection:
    run: int | None = None  # 1 is the oldest; None: the latest
    since: str = ""
    until: str = ""
    all_runs: bool = False
    gap_s: float = DEFAULT_GAP_S


@dataclass(frozen=True)
class Report:
    source: str  # where the spans came from
    window: Window
    runs: list[Run]
    budgets: Budgets
    requests: list[Request]
    summaries: list[Summary]
    breakdowns: list[Breakdown]
    stages: list[StageRow]
    by_model: list[Summary]
    by_build: list[Summary]
    slowest: list[Request]
    quick: dict[str, int]  # answers with almost no gateway time, by what they were

    @property
    def title(self) -> str:
        return f"Latency budget: {self.window.label}"

    @property
    def p99_ms(self) -> float:
        return self.summaries[0].p99_ms if self.summaries else 0.0


def quick_answers(requests: Sequence[Request]) -> dict[str, int]:
    """What the answers under ``QUICK_MS`` in the gateway were, most common first."""
    counts = Counter(r.group for r in requests if r.gateway_ms < QUICK_MS)
    return dict(counts.most_common())


def build_report(
    spans: Sequence[Span], budgets: Budgets, selection: Selection, source: str
) -> Report:
    everything = requests_of(spans)
    runs = split_runs(everything, selection.gap_s)
    window, chosen = select(
        everything,
        runs,
        selection.run,
        selection.since,
        selection.until,
        selection.all_runs,
    )
    return Report(
        source=source,
        window=window,
        runs=runs,
        budgets=budgets,
        requests=chosen,
        summaries=budget.summaries(chosen, budgets),
        breakdowns=budget.breakdowns(chosen),
        stages=budget.stage_rows(chosen, budgets),
        by_model=budget.split(chosen, lambda r: r.model_version, budgets, "(not ranked)"),
        by_build=budget.split(chosen, lambda r: r.build, budgets),
        slowest=sorted(chosen, key=lambda r: r.e2e_ms, reverse=True)[:SLOWEST],
        quick=quick_answers(chosen),
    )
