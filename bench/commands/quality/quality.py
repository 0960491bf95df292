"""`python -m bench quality`: its options, its table and its JSON record."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from bench.output import console, write


def quality(
    target: Annotated[str, typer.Option(help="Envoy's address.")] = "127.0.0.1:8080",
    data_dir: Annotated[Path, typer.Option(help="The stack's data dir.")] = Path("data"),
    dataset_dir: Annotated[
        Path | None,
        typer.Option(
            "--dataset",
            help="The dataset the artifact was built from; default: the one its manifest "
            "names (ML-100K for an artifact from before that record).",
        ),
    ] = None,
    out: Path | None = None,
) -> None:
    """Recall and NDCG of Recommend through the live stack for every held-out
    user, next to the offline evaluation of the artifact it serves."""
    from bench.quality import compare

    result = compare(target, data_dir.resolve(), dataset_dir=dataset_dir)
    table = Table(title=f"{result['users']} held-out users, artifact {result['artifact']}")
    for column in ("metric", "offline", "live (Envoy)", "difference"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    offline, live, diff = result["offline"], result["live"], result["relative_difference"]
    assert isinstance(offline, dict) and isinstance(live, dict) and isinstance(diff, dict)
    for key in offline:
        table.add_row(key, f"{offline[key]:.4f}", f"{live[key]:.4f}", f"{diff[key]:+.2%}")
    console.print(table)
    console.print(
        f"degraded answers: {result['degraded_answers']}; served by {result['served_versions']}"
    )
    write(out, {"benchmark": "live_quality", **result})
