"""`python -m bench burst`: its options, its table and its JSON record."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from bench.output import console, write


def burst(
    target: Annotated[str, typer.Option(help="Envoy's address.")] = "127.0.0.1:8080",
    sizes: Annotated[str, typer.Option(help="Comma-separated burst sizes.")] = "8,32,64",
    repeats: int = 5,
    quiet: Annotated[float, typer.Option(help="Idle seconds before each burst.")] = 2.0,
    out: Path | None = None,
) -> None:
    """Bursts of concurrent Recommend calls after a quiet spell: shed, degraded, errors."""
    from bench.burst import run as run_bursts

    rows = run_bursts(target, tuple(int(s) for s in sizes.split(",")), repeats, quiet)
    table = Table(title=f"Bursts after {quiet:.0f} s idle, through {target}")
    for column in ("size", "shed", "other degraded", "errors", "slowest ms"):
        table.add_column(column, justify="right")
    for row in rows:
        degraded = row["degraded"]
        assert isinstance(degraded, dict)
        other = {k: v for k, v in degraded.items() if k != "DEGRADED_REASON_SHED"}
        table.add_row(
            str(row["size"]),
            str(row["shed"]),
            str(sum(other.values())),
            str(sum(row["errors"].values())),  # type: ignore[attr-defined]
            str(row["max_ms"]),
        )
    console.print(table)
    write(out, {"benchmark": "bursts", "quiet_s": quiet, "rows": rows})
