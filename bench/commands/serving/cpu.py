"""`python -m bench cpu`: its options, its table and its JSON record."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from bench.output import console, write


def cpu(
    target: Annotated[str, typer.Option(help="Envoy's address.")] = "127.0.0.1:8080",
    rate: float = 50.0,
    duration: Annotated[float, typer.Option(max=600)] = 20.0,
    out: Path | None = None,
) -> None:
    """CPU milliseconds per request of each stack process under open-loop load."""
    from bench.cpu_profile import run as run_cpu

    result = run_cpu(target, rate, duration)
    table = Table(title=f"CPU per request at {rate:.0f}/s for {duration:.0f}s")
    table.add_column("process")
    table.add_column("CPU ms / request", justify="right")
    per_request = result["cpu_ms_per_request"]
    assert isinstance(per_request, dict)
    for name, ms in per_request.items():
        table.add_row(name, f"{ms:.2f}")
    table.add_row(
        "total (stack, without the load generator)", f"{result['total_cpu_ms_per_request']:.2f}"
    )
    console.print(table)
    write(out, {"benchmark": "cpu_per_request", **result})
