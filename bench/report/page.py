"""The report as one self-contained HTML page: every table, every figure
(embedded PNGs) and what each one shows, readable without the console."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path

from bench.report import charts, rows
from bench.report.build import Report

STYLE = """
body { font: 13px/1.4 system-ui, sans-serif; margin: 18px 28px; color: #222; max-width: 1300px }
h1 { font-size: 22px } h2 { font-size: 16px; margin-top: 20px; border-bottom: 1px solid #ddd }
table { border-collapse: collapse; margin: 8px 0 } td, th { padding: 3px 9px;
  border: 1px solid #ccc; text-align: right } th { background: #f3f3f3 }
td:first-child, th:first-child { text-align: left } p.note { color: #555; max-width: 1000px }
.ok { color: #2a7d2a; font-weight: 600 } .bad { color: #c62828; font-weight: 600 }
code { background: #f3f3f3; padding: 0 3px } img { max-width: 100% }
.pair { display: flex; gap: 28px } .pair > div { flex: 1; min-width: 0 }
"""

NOTES = {
    "answers": "End to end is the time from Envoy taking a request to the answer: Envoy's "
    "span when Envoy exports one, else the wait before the gateway (<code>queued</code>, "
    "from Envoy's <code>x-request-start</code>) plus the gateway's request span. "
    "Over budget / over SLO: the share of the group's requests slower than the gateway's "
    "end-to-end budget / the SLO's latency. Degraded answers come from a fallback and are "
    "counted apart from full ones: a fast fallback is not a fast recommendation.",
    "tail": "The slowest 1% of each group (at least one request), and the mean time per "
    "part over exactly those requests: the parts add up to their mean end-to-end time. "
    "<code>other in gateway</code> is the gateway's span outside every stage span "
    "(the handler before the first stage, merging, titles, serialisation); "
    "<code>queued before gateway</code> is the wait between Envoy and the gateway; "
    "<code>Envoy + network</code> is the rest of Envoy's span, zero when Envoy's spans are "
    "not exported. Stage p99s are not stacked: the slowest calls of two stages are rarely "
    "the same requests, so their sum says nothing about any request.",
    "stages": "Each stage's own calls (only the requests that ran it), against its cap "
    "(GatewaySettings). Over: the share of its calls slower than the cap. Tail mean: the "
    "stage's mean time over the slowest 1% of all requests (zero where they skipped it).",
    "cdf": "Fraction of each group's requests answered within a time. The black line is "
    "every request; the others split it by what was answered, so a step near zero is "
    "explained by the group it belongs to.",
    "model": "Per model version that ranked the answer (the request span's "
    "<code>recserve.model.version</code>); answers that were not ranked have none.",
    "build": "Per gateway build: the resource attribute <code>service.version</code>, set "
    "with <code>OTEL_RESOURCE_ATTRIBUTES=service.version=&lt;build&gt;</code> in the "
    "gateway's environment (for the local canary, in <code>gateway_canary_env</code>); "
    "unset when nobody set it.",
    "slowest": "The ten slowest requests end to end. Look a trace up by its id in Grafana "
    "(Tempo) or with <code>grep</code> in the span files (ids there are base64).",
    "runs": "Span files are appended to across stack starts. A run is a stretch of requests "
    "with no gap over the split (<code>--gap</code>); the report covers the latest unless "
    "told <code>--run N</code>, <code>--all-runs</code> or <code>--since/--until</code>.",
}


def table(headers: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    lines = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in line) + "</tr>"
        for line in body
    )
    return f"<table><tr>{head}</tr>{lines}</table>"


def figure(name: str, report: Report, alt: str) -> str:
    data = base64.b64encode(charts.figure_png(name, report)).decode()
    return f'<p><img alt="{html.escape(alt)}" src="data:image/png;base64,{data}"></p>'


def section(title: str, note: str, *content: str) -> str:
    return f"<h2>{html.escape(title)}</h2><p class=note>{NOTES[note]}</p>{''.join(content)}"


def pair(*sections: str) -> str:
    return "<div class=pair>" + "".join(f"<div>{s}</div>" for s in sections) + "</div>"


def verdict(report: Report) -> str:
    slo = report.budgets.slo_p99_ms
    if not report.requests:
        return "<p>No gateway requests in this window.</p>"
    ok = report.p99_ms <= slo
    word = "within" if ok else "over"
    return (
        f"<p>{len(report.requests)} requests. End-to-end p99 "
        f"<span class={'ok' if ok else 'bad'}>{report.p99_ms:.1f} ms, {word} the "
        f"{slo:g} ms SLO</span>; gateway budget {report.budgets.end_to_end_ms:g} ms.</p>"
    )


def body(report: Report) -> str:
    return "".join(
        (
            f"<h1>{html.escape(report.title)}</h1>",
            f"<p class=note>Spans from {html.escape(report.source)}.</p>",
            verdict(report),
            section(
                "Answers",
                "answers",
                table(*rows.summaries(report.summaries)),
                f"<p>{html.escape(rows.quick_line(report))}</p>",
            ),
            section(
                "Where the slowest 1% spent their time",
                "tail",
                figure("tail", report, "tail breakdown"),
                table(*rows.breakdowns(report.breakdowns)),
            ),
            pair(
                section(
                    "Stages against their caps",
                    "stages",
                    figure("stages", report, "stage percentiles and caps"),
                    table(*rows.stages(report.stages)),
                ),
                section("Distribution", "cdf", figure("cdf", report, "latency CDF")),
            ),
            section("By model version", "model", table(*rows.summaries(report.by_model))),
            section("By gateway build", "build", table(*rows.summaries(report.by_build))),
            section("Slowest traces", "slowest", table(*rows.slowest(report.slowest))),
            section("Runs in the span files", "runs", table(*rows.runs(report))),
        )
    )


def write_html(report: Report, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "<!doctype html><html lang=en><meta charset=utf-8>"
        f"<title>{html.escape(report.title)}</title><style>{STYLE}</style>"
        f"<body>{body(report)}</body></html>"
    )
    return path
