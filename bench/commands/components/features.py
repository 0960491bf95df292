"""`python -m bench features`: its options, its table and its JSON record."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from bench.output import console, write


def features(
    data_dir: Annotated[Path, typer.Option(help="A data dir with built artifacts.")] = Path("data"),
    redis_url: Annotated[str, typer.Option(help="A running Redis (host:port); empty skips.")] = "",
    calls: int = 2000,
    out: Path | None = None,
) -> None:
    """Features service latency: SQLite vs Redis, item cache cold vs warm."""
    from bench.features_bench import run

    rows = run(data_dir.resolve(), redis_url, calls)
    table = Table(title="features service via gRPC (sequential calls)")
    for column in ("store", "cache", "rpc", "p50 ms", "p99 ms", "max ms"):
        table.add_column(column)
    for r in rows:
        table.add_row(
            str(r["store"]),
            str(r["cache"]),
            str(r["rpc"]),
            str(r["p50_ms"]),
            str(r["p99_ms"]),
            str(r["max_ms"]),
        )
    console.print(table)
    write(out, {"benchmark": "features", "calls": calls, "rows": rows})
