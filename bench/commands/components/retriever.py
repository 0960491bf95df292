"""`python -m bench retriever`: its options, its table and its JSON record."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from bench.output import console, write


def retriever(
    points: Annotated[int, typer.Option(max=5_000_000)] = 1_000_000,
    compare_points: int = 100_000,
    queries: int = 200,
    work_dir: Path = Path("build/bench-retriever"),
    out: Path | None = None,
) -> None:
    """Qdrant Edge HNSW p50/p99 and recall@100 by ef; vs qdrant-client local mode."""
    from rich.progress import Progress

    from bench import retriever_bench as rb
    from pipelines.synthetic import write_synthetic

    items = work_dir / "synthetic" / "item_vectors.parquet"
    if not items.exists():
        write_synthetic(items.parent, points, 1000, 64, 7, console)
    efs = (100, 128, 256, 512)  # below k=100 Qdrant searches with ef = k anyway
    with Progress(console=console) as progress:
        big = rb.run(items, work_dir / "edge-big", points, queries, efs, progress)
        small = rb.run(items, work_dir / "edge-small", compare_points, queries, (128,), progress)
        # Local mode is brute force in Python (seconds per filtered query): fewer queries.
        local = rb.run_local_mode(items, compare_points, min(queries, 50), 128, progress)
    table = Table(title=f"Qdrant Edge, {points:,} x 64, k=100 (in-process search)")
    for column in ("filter", "ef", "p50 ms", "p99 ms", "recall@100"):
        table.add_column(column)
    for name in ("edge_unfiltered", "edge_filtered"):
        for row in big[name]:  # type: ignore[attr-defined]
            table.add_row(
                name.removeprefix("edge_"),
                str(row["ef"]),
                str(row["p50_ms"]),
                str(row["p99_ms"]),
                str(row["recall_at_100"]),
            )
    console.print(table)
    console.print({"at": compare_points, "edge": small, "qdrant_client_local": local})
    write(
        out,
        {
            "benchmark": "retriever",
            "large": big,
            "compare_edge": small,
            "compare_local_mode": local,
        },
    )
