"""`python -m pipelines ...`: build the artifacts the stack serves."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from pipelines.build import build as run_build
from pipelines.evaluate import CUTOFFS
from pipelines.rescore.cli import app as rescore_app

app = typer.Typer(add_completion=False, help=__doc__, no_args_is_help=True)
app.add_typer(rescore_app, name="rescore")
console = Console(stderr=True)


def metrics_table(metrics: dict[str, dict[str, float]], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    columns = [f"recall@{k}" for k in CUTOFFS] + ["ndcg@10"]
    table.add_column("model")
    for column in columns:
        table.add_column(column, justify="right")
    for name, values in metrics.items():
        table.add_row(name, *(f"{values[c]:.4f}" for c in columns))
    return table


@app.command()
def build(
    data_dir: Annotated[Path, typer.Option(help="Where raw data and artifacts live.")] = Path(
        "data"
    ),
) -> None:
    """Dataset -> training -> ONNX -> evaluation -> Triton repository (idempotent).
    An artifact whose served lists lose to a baseline is not published."""
    from pipelines.build import QualityGateError

    try:
        result = run_build(data_dir, console=console)
    except QualityGateError as refused:
        console.print(metrics_table(refused.metrics, "held-out evaluation (refused)"))
        console.print(f"[red]{refused}[/]")
        raise typer.Exit(1) from None
    console.print(metrics_table(result.metrics, f"held-out evaluation, artifact {result.version}"))
    console.print(
        f"artifact {result.directory} ({'reused' if result.reused else 'built'}); "
        f"Triton versions {result.triton_versions}"
    )


@app.command()
def publish(
    data_dir: Annotated[Path, typer.Option(help="Where the artifacts live.")] = Path("data"),
    redis_url: Annotated[str, typer.Option(help="Redis online store; empty: SQLite.")] = "",
    qdrant_url: Annotated[
        str, typer.Option(help="Also load the items into this Qdrant server (a new generation).")
    ] = "",
) -> None:
    """Feast apply + materialization of the current artifact into the online store,
    and with --qdrant-url the item collection.

    The retriever and the features service also pick up a new CURRENT
    artifact by themselves within their refresh interval.
    """
    from recserve_model import artifacts

    from services.features.feature_repo import apply_and_publish

    directory = artifacts.current(data_dir)
    apply_and_publish(data_dir / "feast", directory, directory.name, redis_url)
    console.print(f"published features of {directory.name}")
    if qdrant_url:
        index(data_dir, qdrant_url)


@app.command()
def index(
    data_dir: Annotated[Path, typer.Option(help="Where the artifacts live.")] = Path("data"),
    qdrant_url: Annotated[
        str, typer.Option(help="A Qdrant server; empty: the Qdrant Edge shard under data-dir.")
    ] = "",
) -> None:
    """Loads the current artifact's items into the retriever's collection (a
    new generation), unless it holds them already: what the retriever does
    when it starts, done ahead of it (compose.local.yaml's `qdrant` step)."""
    import asyncio

    from recserve_model import artifacts

    from services.retriever.config import RetrieverSettings
    from services.retriever.domain import Retriever
    from services.retriever.server import generations_for

    settings = RetrieverSettings(data_dir=data_dir, qdrant_url=qdrant_url)
    backend = qdrant_url or "Qdrant Edge"
    version = artifacts.current(data_dir).name
    generations = generations_for(settings)
    # Current already: nothing to open. (A running retriever holds its Edge
    # shard's WAL lock, so `docker-compose up` again must not open it.)
    if generations.state().get("artifact_version") == version:
        console.print(f"{backend} collection {settings.collection}: already current ({version})")
        return
    retriever = Retriever(settings, generations)
    retriever.open_current()
    try:
        asyncio.run(retriever.refresh_from_artifacts())
    finally:
        retriever.close()
    console.print(f"{backend} collection {settings.collection}: loaded ({version})")


@app.command()
def synth(
    out: Annotated[Path, typer.Option(help="Output folder.")],
    items: Annotated[int, typer.Option(min=1, max=5_000_000)] = 100_000,
    users: Annotated[int, typer.Option(min=1)] = 10_000,
    dim: Annotated[int, typer.Option(min=1)] = 64,
    seed: int = 7,
) -> None:
    """Synthetic data with the same schemas, for benchmarks at scale."""
    from pipelines.synthetic import write_synthetic

    write_synthetic(out, items, users, dim, seed, console)


if __name__ == "__main__":
    app()
