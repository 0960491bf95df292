"""`python -m bench simulate`: its options, its table and its JSON record."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from bench.output import console, write


def simulate(
    lists: Annotated[int, typer.Option(min=1, help="Lists to show (full answers).")] = 500,
    p_hit: Annotated[float, typer.Option(min=0, max=1, help="Click on a future item.")] = 1.0,
    p_noise: Annotated[float, typer.Option(min=0, max=1, help="Click on any other.")] = 0.0,
    data_dir: Annotated[Path, typer.Option(help="Raw data and data/auth/app.token.")] = Path(
        "data"
    ),
    seed: int = 0,
    prefer: Annotated[
        str, typer.Option(help="A model version: users click only on its lists.")
    ] = "",
    rate: Annotated[
        float, typer.Option(min=0, help="Lists a second at most (0: one after another).")
    ] = 0.0,
    out: Path | None = None,
) -> None:
    """Simulated users through Envoy: lists shown, clicks sent back through the
    events API (bench/simulate.py's click model); conversion per model version."""
    from bench.simulate import held_out_futures, rating_type
    from bench.simulate import simulate as run
    from pipelines.dataset import artifact_dataset
    from recserve_model import artifacts

    target = os.environ.get("RECSERVE_ENVOY_ADDRESS", "127.0.0.1:8080")
    token = (data_dir / "auth" / "app.token").read_text().strip()
    directory = artifacts.current(data_dir)
    futures = held_out_futures(data_dir / "raw", artifact_dataset(directory))
    result = run(
        target, token, futures, lambda r: r.lists >= lists, p_hit, p_noise, seed, max_s=3600,
        prefer=prefer, rate=rate, event=rating_type(directory),
    )  # fmt: skip
    table = Table(title=f"simulated users: {result.lists} lists, p_hit {p_hit}, p_noise {p_noise}")
    for column in ("model version", "lists", "converted", "conversion"):
        table.add_column(column, justify="left" if column == "model version" else "right")
    for version, (shown, converted) in sorted(result.by_version.items()):
        table.add_row(version, str(shown), str(converted), f"{converted / shown:.2%}")
    console.print(table)
    if result.failures:
        console.print(f"failed calls: {result.failed}")
    write(
        out,
        {
            "benchmark": "simulate",
            "p_hit": p_hit,
            "p_noise": p_noise,
            "prefer": prefer,
            "rate": rate,
            "lists": result.lists,
            "converted": result.converted,
            "events": result.events,
            "by_version": result.by_version,
            "failed": result.failed,
        },
    )
