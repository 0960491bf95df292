"""The report's tables as headers and rows of text, shared by the console and the page."""

from __future__ import annotations

from collections.abc import Sequence

from bench.report.budget import Breakdown, StageRow, Summary
from bench.report.build import QUICK_MS, Report
from bench.report.requests import Request
from bench.report.window import Run, Window, clock

Table = tuple[list[str], list[list[str]]]


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def pct(value: float) -> str:
    return f"{value:.1%}"


def summaries(items: Sequence[Summary]) -> Table:
    headers = ["group", "requests", "share", "p50 ms", "p95 ms", "p99 ms", "max ms"]
    headers += ["over budget", "over SLO", "degraded"]
    body = [
        [
            s.group,
            str(s.requests),
            pct(s.share),
            *(ms(v) for v in (s.p50_ms, s.p95_ms, s.p99_ms, s.max_ms)),
            *(pct(v) for v in (s.over_budget, s.over_slo, s.degraded)),
        ]
        for s in items
    ]
    return headers, body


def breakdowns(items: Sequence[Breakdown]) -> Table:
    parts = list(dict.fromkeys(p for b in items for p in b.parts))
    headers = ["group", "requests", "slowest 1%", "p99 ms", "their mean ms"]
    headers += [f"{p} ms" for p in parts]
    body = [
        [
            b.group,
            str(b.requests),
            str(b.tail),
            ms(b.p99_ms),
            ms(b.tail_mean_ms),
            *(ms(b.parts.get(p, 0.0)) for p in parts),
        ]
        for b in items
    ]
    return headers, body


def stages(items: Sequence[StageRow]) -> Table:
    headers = ["stage", "ran", "of requests", "p50 ms", "p95 ms", "p99 ms", "cap ms"]
    headers += ["over cap", "tail mean ms"]
    body = [
        [
            r.stage,
            str(r.ran),
            pct(r.ran_share),
            *(ms(v) for v in (r.p50_ms, r.p95_ms, r.p99_ms)),
            "-" if r.budget_ms == float("inf") else f"{r.budget_ms:g}",
            pct(r.over_budget),
            ms(r.tail_mean_ms),
        ]
        for r in items
    ]
    return headers, body


def slowest(items: Sequence[Request]) -> Table:
    headers = ["trace id", "end to end ms", "gateway ms", "queued ms", "Envoy ms", "answer"]
    headers += ["model version", "build", "method", "started (UTC)"]
    body = [
        [
            r.trace_id,
            *(ms(v) for v in (r.e2e_ms, r.gateway_ms, r.queued_ms, r.envoy_ms)),
            r.group,
            r.model_version or "-",
            r.build or "-",
            r.method,
            clock(r.start_ns),
        ]
        for r in items
    ]
    return headers, body


def covered(run: Run, window: Window) -> str:
    if window.start_ns <= run.start_ns and run.end_ns <= window.end_ns:
        return "yes"
    return "part" if run.start_ns <= window.end_ns and window.start_ns <= run.end_ns else ""


def runs(report: Report) -> Table:
    body = [
        [
            str(run.number),
            clock(run.start_ns),
            clock(run.end_ns),
            str(run.requests),
            covered(run, report.window),
        ]
        for run in report.runs
    ]
    return ["run", "first request (UTC)", "last request (UTC)", "requests", "in report"], body


def quick_line(report: Report) -> str:
    """What the answers that spent almost no time in the gateway were."""
    count = sum(report.quick.values())
    if not count:
        return f"No answer spent under {QUICK_MS:g} ms in the gateway."
    share = count / len(report.requests)
    what = ", ".join(f"{n} {group}" for group, n in report.quick.items())
    queued = [r.queued_ms for r in report.requests if r.gateway_ms < QUICK_MS]
    return (
        f"{count} answers ({share:.1%}) spent under {QUICK_MS:g} ms in the gateway: {what}. "
        f"End to end they count the wait before the gateway too "
        f"(here {min(queued):.1f} to {max(queued):.1f} ms)."
    )
