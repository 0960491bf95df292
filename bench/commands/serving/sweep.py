"""`python -m bench sweep`: its options, its table and its JSON record."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from bench.output import console, write


def sweep(
    target: Annotated[str, typer.Option(help="Envoy's address.")] = "127.0.0.1:8080",
    rates: Annotated[str, typer.Option(help="Comma-separated req/s.")] = "50,100,150,200,260,520",
    duration: Annotated[float, typer.Option(help="Seconds per rate.", max=600)] = 30.0,
    long_rate: Annotated[float, typer.Option(help="This rate runs long_duration.")] = 260.0,
    long_duration: Annotated[float, typer.Option(max=600)] = 60.0,
    chart: Path = Path("docs/img/load-sweep.png"),
    out: Path | None = None,
) -> None:
    """Open-loop load at each rate in turn: percentiles, degraded, errors, full
    answers/s, stage shares and CPU per request; one chart of every rate."""
    from bench.load import wait_for_full_answer
    from bench.sweep import plot, run_rate

    rows: list[dict[str, object]] = []
    for n, rate in enumerate(float(r) for r in rates.split(",")):
        if n:
            wait_for_full_answer(target)  # the previous rate's backlog has drained
        seconds = long_duration if rate == long_rate else duration
        console.print(f"{rate:.0f}/s for {seconds:.0f} s ...")
        _, row = run_rate(target, rate, seconds)
        rows.append(row)
    table = Table(title=f"Recommend through {target}, open loop, one rate after another")
    for column in (
        "rate",
        "s",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "p99.9 ms",
        "errors",
        "degraded",
        "full/s",
        "CPU ms/req",
        "died",
    ):
        table.add_column(column, justify="right")
    for row in rows:
        errors = sum(row["errors"].values())  # type: ignore[attr-defined]
        degraded = sum(row["degraded"].values())  # type: ignore[attr-defined]
        table.add_row(
            f"{row['rate_rps']:.0f}",
            f"{row['duration_s']:.0f}",
            str(row["p50_ms"]),
            str(row["p90_ms"]),
            str(row["p99_ms"]),
            str(row["p999_ms"]),
            str(errors),
            f"{degraded} ({100 * degraded / max(int(row['sent']), 1):.1f}%)",  # type: ignore[call-overload]
            str(row["full_answers_per_s"]),
            str(row["total_cpu_ms_per_request"]),
            ",".join(row["processes_died"]) or "none",  # type: ignore[arg-type]
        )
    console.print(table)
    console.print(f"chart: {plot(rows, chart)}")
    write(out, {"benchmark": "load_sweep", "rows": rows})
