"""`python -m pipelines rescore ...`: the nightly job, its gates, publish and rollback."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from pipelines.rescore import layout
from recserve_cli import console as cli_console
from recserve_model import artifacts

app = typer.Typer(add_completion=False, help=__doc__, no_args_is_help=True)
console = cli_console(stderr=True)
DataDir = Annotated[Path, typer.Option(help="Where the artifacts and runs live.")]
RedisUrl = Annotated[str, typer.Option(help="Redis online store; empty: SQLite.")]


def _fail(message: str, code: int = 1) -> None:
    console.print(f"[bold red]{message}[/]")
    raise typer.Exit(code)


WithEvents = Annotated[
    bool,
    typer.Option(
        help="Fold the rating events the gateways kept since the artifact was built "
        "into the users' activity first (pipelines/rescore/with_events.py)."
    ),
]


def fold_events(data_dir: Path, artifact: Path, out: Path) -> Path:
    """The artifact's user tables with the logged events since, in ``out``."""
    from pipelines.rescore.with_events import features_with_events

    logged = features_with_events(data_dir, artifact, out)
    users = logged.rows["user_id"].nunique()
    console.print(
        f"logged events: {len(logged.rows)} folded into {users} users' activity, "
        f"{logged.skipped} left out"
    )
    return out


@app.command()
def run(
    data_dir: DataDir = Path("data"),
    run_id: Annotated[str, typer.Option(help="Resume this run; new id when empty.")] = "",
    master: Annotated[str, typer.Option(help="Spark master URL.")] = "local[*]",
    features_dir: Annotated[
        Path | None, typer.Option(help="User tables; default: the artifact's snapshot.")
    ] = None,
    candidates: Annotated[int, typer.Option(min=1, max=1000)] = 200,
    top_n: Annotated[int, typer.Option(min=1, max=1000)] = 100,
    buckets: Annotated[int, typer.Option(min=0, help="0: two per core.")] = 0,
    ranking_model: str = "ranker",
    inactive: Annotated[Path | None, typer.Option(help="File of inactive item ids.")] = None,
    publish: Annotated[bool, typer.Option(help="Publish when every gate passes.")] = True,
    redis_url: RedisUrl = "",
    with_events: WithEvents = False,
) -> None:
    """Score every user's candidates on Spark, validate, then publish."""
    from pipelines.rescore import spark
    from pipelines.rescore.job import RunConfig, run_job
    from pipelines.rescore.publish import publish as do_publish
    from pipelines.rescore.validate import validate

    artifact = artifacts.current(data_dir).resolve()
    run_id = run_id or datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    run_dir = layout.staging(data_dir, run_id)
    session = spark.session(master)
    if (run_dir / "run.json").exists():
        config = RunConfig.load(run_dir / "run.json")
        console.print(f"resuming run {run_id}")
    else:
        if with_events and features_dir is None:
            features_dir = fold_events(data_dir, artifact, run_dir / "features-with-events")
        config = RunConfig(
            run_id=run_id,
            artifact_dir=str(artifact),
            artifact_version=artifact.name,
            features_dir=str((features_dir or artifact / "features").resolve()),
            ranking_model=ranking_model,
            candidates=candidates,
            top_n=top_n,
            buckets=buckets or 2 * session.sparkContext.defaultParallelism,
            inactive_items=sorted(inactive.read_text().split()) if inactive else [],
        )
    result = run_job(session, config, run_dir, console)
    console.print(
        f"run {run_id}: {result.users:,} users, {result.pairs:,} pairs in {result.seconds:.1f} s "
        f"({result.pairs_per_second:,.0f} pairs/s); {result.buckets_skipped} buckets already done"
    )
    report = validate(data_dir, run_dir, console=console)
    console.print(f"report: {run_dir / 'report.json'}, plot: {run_dir / 'scores.png'}")
    if not report.passed:
        _fail(f"gates failed: {', '.join(report.failed)}; run {run_id} not published")
    if publish:
        state = do_publish(data_dir, run_id, redis_url)
        console.print(f"published run {run_id} (slot {state['slot']})")


@app.command("validate")
def validate_command(run_id: str, data_dir: DataDir = Path("data")) -> None:
    """Run the gates on a staged run again."""
    from pipelines.rescore.validate import validate

    report = validate(data_dir, layout.staging(data_dir, run_id), console=console)
    if not report.passed:
        _fail(f"gates failed: {', '.join(report.failed)}")


@app.command("publish")
def publish_command(
    run_id: str, data_dir: DataDir = Path("data"), redis_url: RedisUrl = ""
) -> None:
    """Publish a staged run whose gates passed (or republish a published one)."""
    from pipelines.rescore.publish import PublishError, publish

    try:
        state = publish(data_dir, run_id, redis_url)
    except PublishError as exc:
        _fail(str(exc))
    console.print(f"live run: {state['run_id']} (slot {state['slot']})")


@app.command()
def rollback(data_dir: DataDir = Path("data"), redis_url: RedisUrl = "") -> None:
    """Make the previously published run live again."""
    from pipelines.rescore.publish import PublishError
    from pipelines.rescore.publish import rollback as do_rollback

    try:
        state = do_rollback(data_dir, redis_url)
    except PublishError as exc:
        _fail(str(exc))
    console.print(f"rolled back; live run: {state['run_id']} (slot {state['slot']})")


@app.command()
def status(data_dir: DataDir = Path("data")) -> None:
    """The live run and the publish history."""
    from pipelines.rescore.publish import live

    state = live(data_dir)
    if state is None:
        console.print("no run published yet")
        return
    console.print_json(data=state)


@app.command("synth-users")
def synth_users(
    out: Annotated[Path, typer.Option(help="Folder for user_profile/user_activity parquet.")],
    users: Annotated[int, typer.Option(min=1)] = 100_000,
    data_dir: DataDir = Path("data"),
) -> None:
    """Synthetic users over the current artifact's items, for benchmarks."""
    from pipelines.rescore.synthetic import write_users

    write_users(artifacts.current(data_dir), out, users)
    console.print(f"wrote {users:,} users to {out}")
