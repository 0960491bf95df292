"""`python -m bench cold-start`: its options, its table and its JSON record."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from bench.output import console, write


def cold_start(
    data_dir: Annotated[Path, typer.Option(help="A data dir with the raw data.")] = Path("data"),
    folds: Annotated[int, typer.Option(min=2, help="Each user held out once.")] = 5,
    seed: int = 7,
    out: Path | None = None,
) -> None:
    """Users held out of training entirely, served from attributes: vs popularity."""
    from bench.new_user_eval import run as run_cold

    result = run_cold(data_dir / "raw", folds, seed)
    for protocol in ("last 10 ratings", "first 10 ratings"):
        rows = result[protocol]
        assert isinstance(rows, dict)
        table = Table(title=f"cold-start users ({result['users']}, {folds} folds), {protocol}")
        for column in ("served from", "recall@10", "recall@100", "ndcg@10"):
            table.add_column(column, justify="left" if column == "served from" else "right")
        for name, metrics in rows.items():
            table.add_row(
                name, *(f"{metrics[k]:.4f}" for k in ("recall@10", "recall@100", "ndcg@10"))
            )
        console.print(table)
    console.print(f"served / popularity recall@10 by fold (first 10): {result['per_fold']}")
    write(out, {"benchmark": "cold_start", **result})
