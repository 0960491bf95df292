"""`python -m bench report`: its options, its tables and its JSON record."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from bench.output import console, write

if TYPE_CHECKING:
    from bench.report import Report


NUMBER = re.compile(r"-|-?[\d.,]+%?")


def rich_table(title: str, headers: list[str], body: list[list[str]]) -> Table:
    """Figures right-aligned, words left."""
    table = Table(title=title, title_justify="left")
    for n, header in enumerate(headers):
        numeric = bool(body) and all(NUMBER.fullmatch(line[n]) for line in body)
        table.add_column(header, justify="right" if numeric else "left")
    for line in body:
        table.add_row(*line)
    return table


def print_report(report: Report) -> None:
    from bench.report import rows

    console.print(f"[bold]{report.title}[/bold]  (spans from {report.source})")
    tables = (
        ("Answers, end to end", rows.summaries(report.summaries)),
        (
            "The slowest 1%: mean ms per part (adds up to their mean)",
            rows.breakdowns(report.breakdowns),
        ),
        ("Stages against their caps", rows.stages(report.stages)),
        ("By model version", rows.summaries(report.by_model)),
        ("By gateway build (service.version)", rows.summaries(report.by_build)),
        ("Slowest traces", rows.slowest(report.slowest)),
        ("Runs in the span files", rows.runs(report)),
    )
    for title, (headers, body) in tables:
        console.print(rich_table(title, headers, body))
    console.print(rows.quick_line(report))


def record(report: Report) -> dict[str, object]:
    from dataclasses import asdict

    return {
        "report": "latency_budget",
        "window": asdict(report.window),
        "source": report.source,
        "budgets": asdict(report.budgets),
        "answers": [asdict(s) for s in report.summaries],
        "slowest_1pct": [asdict(b) for b in report.breakdowns],
        "stages": [asdict(s) for s in report.stages],
        "by_model_version": [asdict(s) for s in report.by_model],
        "by_build": [asdict(s) for s in report.by_build],
        "slowest_traces": [
            {"trace_id": r.trace_id, "end_to_end_ms": round(r.e2e_ms, 3)} for r in report.slowest
        ],
        "quick_answers": report.quick,
        "runs": [asdict(r) for r in report.runs],
    }


def report(
    traces: Annotated[Path, typer.Option(help="Folder of OTLP JSON span files.")] = Path(
        "data/traces"
    ),
    tempo: Annotated[str, typer.Option(help="Tempo base URL; read spans there instead.")] = "",
    run: Annotated[
        int | None, typer.Option(help="Run number (1 the oldest, as listed); default the latest.")
    ] = None,
    all_runs: Annotated[bool, typer.Option(help="Every run in the span files.")] = False,
    since: Annotated[
        str, typer.Option(help="Window start: ISO 8601 (UTC unless it says), Unix s, or 15m.")
    ] = "",
    until: Annotated[str, typer.Option(help="Window end, as --since.")] = "",
    gap: Annotated[float, typer.Option(help="Seconds without requests that split runs.")] = 60.0,
    charts_dir: Path = Path("build/report"),
    out: Path | None = None,
) -> None:
    """Latency budget from the spans: where the slowest 1% spend their time, per answer kind."""
    from bench.report import (
        Selection,
        build_report,
        default_budgets,
        spans_from_files,
        spans_from_tempo,
        trace_files,
        write_html,
        write_png,
    )
    from bench.report.window import WindowError

    if tempo:
        spans, source = spans_from_tempo(tempo), tempo
    else:
        files = trace_files(traces)
        spans, source = spans_from_files(files), f"{len(files)} files in {traces}"
    selection = Selection(run, since, until, all_runs, gap)
    try:
        built = build_report(spans, default_budgets(), selection, source)
    except WindowError as exc:
        raise typer.BadParameter(str(exc), param_hint="--run/--since/--until") from None
    print_report(built)
    png = write_png(built, charts_dir / "latency_budget.png")
    html = write_html(built, charts_dir / "latency_budget.html")
    console.print(f"charts: {png}, {html}")
    if out is not None:
        write(out, record(built))
