"""`python -m pipelines ...`: build the artifacts the stack serves."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from pipelines import data_cli, outcomes_cli
from pipelines.rescore.cli import app as rescore_app
from recserve_cli import console as cli_console

app = typer.Typer(add_completion=False, help=__doc__, no_args_is_help=True)
app.add_typer(rescore_app, name="rescore")
app.command("validate")(data_cli.validate)
app.command("import-movielens")(data_cli.import_movielens)
app.command("generate-shop")(data_cli.generate_shop)
app.command("snapshot")(data_cli.snapshot_command)
app.command("compact")(data_cli.compact_command)
app.command("outcomes")(outcomes_cli.outcomes_command)
console = cli_console(stderr=True)


def metrics_table(metrics: dict[str, dict[str, float]], title: str) -> Table:
    from pipelines.evaluate import CUTOFFS

    table = Table(title=title, title_justify="left")
    columns = [f"recall@{k}" for k in CUTOFFS] + ["ndcg@10"]
    table.add_column("model")
    for column in columns:
        table.add_column(column, justify="right")
    for name, values in metrics.items():
        table.add_row(name, *(f"{values[c]:.4f}" for c in columns))
    return table


DatasetOption = Annotated[
    Path | None,
    typer.Option(
        "--dataset",
        help="A dataset directory in the contract (docs/data.md); default: the data dir's "
        "current artifact's dataset, MovieLens-100K where nothing was built yet.",
    ),
]
WithEventsOption = Annotated[
    bool,
    typer.Option(
        "--with-events",
        help="Also learn from the app events kept under DATA_DIR/events/app "
        "(docs/events.md): retraining from what users did with the lists.",
    ),
]
OverTheGateOption = Annotated[
    bool,
    typer.Option(
        "--publish-over-the-gate",
        help="Publish even if it loses to a baseline (recorded: artifacts/OVERRIDES.jsonl).",
    ),
]
CandidateOption = Annotated[
    bool,
    typer.Option(
        "--candidate",
        help="A candidate even where nothing is served yet: the Triton repository only, "
        "for `recserve-stack rollout start VERSION`, current once promoted. (A build on a "
        "data dir that serves a model is a candidate anyway, unless --promote.)",
    ),
]
PromoteOption = Annotated[
    bool,
    typer.Option(
        "--promote",
        help="Serve it now, without a rollout: it becomes CURRENT and every service "
        "follows within seconds (docs/delivery.md). Refused while a rollout runs.",
    ),
]


@app.command()
def build(
    data_dir: Annotated[Path, typer.Option(help="Where raw data and artifacts live.")] = Path(
        "data"
    ),
    dataset_dir: DatasetOption = None,
    with_events: WithEventsOption = False,
    over_the_gate: OverTheGateOption = False,
    candidate: CandidateOption = False,
    promote: PromoteOption = False,
) -> None:
    """Dataset -> validate -> training -> ONNX -> evaluation -> Triton repository
    (idempotent). A dataset that fails validation builds nothing; an artifact
    whose served lists lose to a baseline is not published (unless
    --publish-over-the-gate). It serves users on a first install or with
    --promote; otherwise it is a candidate for a rollout."""
    # torch and the training code only for the commands that learn: the
    # others (compact, snapshot, validate, version: each a step of a nightly
    # cycle) start in half the time.
    from pipelines.build import QualityGateError
    from pipelines.build import build as run_build
    from pipelines.current import PromoteRefused, candidate_line
    from pipelines.dataset import UnsupportedDataset
    from recserve_data import InvalidDataset
    from recserve_model.artifacts import current_version

    try:
        result = run_build(
            data_dir,
            console=console,
            dataset_dir=dataset_dir,
            with_events=with_events,
            over_the_gate=over_the_gate,
            candidate=candidate,
            promote=promote,
        )
    except InvalidDataset as refused:
        data_cli.print_report(refused.report, console)
        console.print("[red]the dataset fails validation: nothing was built[/]")
        raise typer.Exit(1) from None
    except (UnsupportedDataset, PromoteRefused) as refused:
        console.print(f"[red]{refused}[/]")
        raise typer.Exit(1) from None
    except QualityGateError as refused:
        console.print(metrics_table(refused.metrics, "held-out evaluation (refused)"))
        console.print(f"[red]{refused}[/]")
        raise typer.Exit(1) from None
    console.print(metrics_table(result.metrics, f"held-out evaluation, artifact {result.version}"))
    console.print(
        f"artifact {result.directory} ({'reused' if result.reused else 'built'}); "
        f"Triton versions {result.triton_versions}"
    )
    if result.serving:
        console.print(f"serving {result.version}: CURRENT names it")
    else:
        console.print(candidate_line(result.version, current_version(data_dir)))


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
    from recserve_feast.repo import apply_and_publish
    from recserve_model import artifacts

    directory = artifacts.current(data_dir)
    apply_and_publish(data_dir / "feast", directory, directory.name, redis_url)
    console.print(f"published features of {directory.name}")
    if qdrant_url:
        # The retriever's own load, in its own process (pipelines import no service).
        subprocess.run(
            [
                sys.executable,
                "-m",
                "services.retriever",
                "index",
                "--data-dir",
                str(data_dir),
                "--qdrant-url",
                qdrant_url,
            ],
            check=True,
        )


@app.command()
def version(
    label: Annotated[str, typer.Argument(help="Names the version: <source>-<label>.")],
    kind: Annotated[
        str,
        typer.Option(
            help="copy: the same models (a second version to roll out); slow, nan or "
            "reversed: a rehearsal of a bad version (its ranking model sleeps --delay-ms per "
            "call, scores NaN, or ranks the worst candidates first: healthy but worse for "
            "users, for the outcome guardrail), for the judge to roll back."
        ),
    ] = "copy",
    source: Annotated[str, typer.Option(help="Artifact to publish again; default: current.")] = "",
    delay_ms: Annotated[float, typer.Option(help="With --kind slow.")] = 200.0,
    data_dir: Annotated[
        Path, typer.Option(envvar="RECSERVE_STACK_DATA_DIR", help="The stack's data.")
    ] = Path("data"),
) -> None:
    """A new model version in the Triton repository, ready to roll out
    (`recserve-stack rollout start <version>`); prints its name."""
    from pipelines.rehearsal import VersionError, make_version

    try:
        made = make_version(data_dir, label, kind, source, delay_ms)
    except VersionError as refused:
        console.print(f"[red]{refused}[/]")
        raise typer.Exit(1) from None
    console.print(f"published {made} ({kind}) into {data_dir / 'triton' / 'repository'}")
    print(made)


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
