"""`python -m bench rescore`: its options, its table and its JSON record."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from bench.output import console, write


def rescore(
    data_dir: Path = Path("data"),
    users: Annotated[int, typer.Option(min=1)] = 50_000,
    candidates: Annotated[int, typer.Option(min=1, max=1000)] = 200,
    master: str = "local[*]",
    work_dir: Path = Path("build/bench-rescore"),
    out: Path | None = None,
) -> None:
    """Spark re-scoring: pairs per second end to end, fp32 vs int8, 100M projection."""
    from bench.rescore_bench import run

    result = run(data_dir, work_dir, users, candidates, master, console)
    table = Table(title=f"re-scoring {users:,} users x {candidates} candidates ({master})")
    for column in ("ranker", "pairs", "seconds", "pairs/s", "minutes for 100M pairs"):
        table.add_column(column)
    for name in ("fp32", "int8"):
        row = result[name]
        assert isinstance(row, dict)
        table.add_row(
            name,
            f"{row['pairs']:,}",
            str(row["seconds"]),
            f"{row['pairs_per_second']:,}",
            str(row["minutes_for_100M_pairs"]),
        )
    console.print(table)
    write(out, {"benchmark": "rescore", **result})
