"""`python -m bench chaos`: its options, its table and its JSON record."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from bench.output import console, write


def chaos(
    target: Annotated[str, typer.Option(help="Envoy's address.")] = "127.0.0.1:8080",
    admin: Annotated[str, typer.Option(help="Envoy's admin URL.")] = "http://127.0.0.1:9901",
    kill: Annotated[
        str,
        typer.Option(
            help="Comma-separated processes, in turn (one-process: the first request-path "
            "process, whose retriever writes; one-process-2: a further one); empty: each "
            "that runs."
        ),
    ] = "",
    rate: float = 100.0,
    duration: Annotated[float, typer.Option(help="Seconds of load per kill.", max=120)] = 15.0,
    freeze: Annotated[
        float,
        typer.Option(
            help="Seconds to stop each process (SIGSTOP, then SIGCONT: a hang) instead "
            "of killing it; 0: SIGKILL.",
            min=0,
            max=60,
        ),
    ] = 0.0,
    out: Path | None = None,
) -> None:
    """SIGKILL (or freeze) each stack process in turn under open-loop load: what
    clients saw."""
    from bench.chaos import run as run_chaos
    from bench.chaos import running_names

    if freeze and freeze >= duration - 2.0:
        raise typer.BadParameter("must end before the load does (2 s in)", param_hint="--freeze")
    names = tuple(kill.split(",")) if kill else running_names()
    rows = run_chaos(target, admin, names, rate, duration, freeze)
    fault = f"SIGSTOP for {freeze:g} s" if freeze else "SIGKILL"
    table = Table(title=f"{fault} under {rate:.0f} req/s through {target}, 2 s into the load")
    for column in ("process", "errors", "degraded", "last non-full answer, s after it", "p99 ms"):
        table.add_column(column)
    for row in rows:
        if "ready_again_after_s" in row:  # Envoy killed: its clients get errors meanwhile
            table.add_row("envoy", "", "", f"ready again after {row['ready_again_after_s']} s", "")
            continue
        table.add_row(
            str(row["killed"]),
            str(sum(row["errors"].values())),  # type: ignore[attr-defined]
            str(sum(row["degraded"].values())),  # type: ignore[attr-defined]
            str(row["last_not_full_after_s"]),
            str(row["p99_ms"]),
        )
    console.print(table)
    record = {"benchmark": "chaos", "rate": rate, "duration_s": duration, "frozen_s": freeze}
    write(out, {**record, "rows": rows})
