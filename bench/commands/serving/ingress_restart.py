"""`python -m bench ingress-restart`: its options, its table and its JSON record."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from bench.output import console, write


def ingress_restart(
    target: Annotated[str, typer.Option(help="Envoy's address.")] = "127.0.0.1:8080",
    threads: Annotated[int, typer.Option(help="Client threads calling in a loop.")] = 4,
    duration: Annotated[float, typer.Option(help="Seconds of calls per setting.")] = 6.0,
    rounds: Annotated[int, typer.Option(help="Each setting once a round.", min=1, max=2)] = 1,
    out: Path | None = None,
) -> None:
    """SIGKILL Envoy under the Python client's calls, once with its defaults
    and once failing fast: the errors each saw while the runner restarted it."""
    from bench.ingress_restart import run

    rows = run(target, threads, duration, rounds)
    table = Table(title=f"Envoy SIGKILLed under {threads} client threads, through {target}")
    for column in ("round", "client", "answered", "errors", "errors from / until, s", "slowest ms"):
        table.add_column(column)
    for row in rows:
        span = f"{row['errors_from_s']} / {row['errors_until_s']}" if row["errors"] else ""
        errors = ", ".join(f"{n} {code}" for code, n in row["errors"].items()) or "0"
        table.add_row(
            str(row["round"]), row["setting"], str(row["answered"]), errors, span,
            str(row["slowest_answer_ms"]),
        )  # fmt: skip
    console.print(table)
    record = {"benchmark": "ingress_restart", "threads": threads, "duration_s": duration}
    write(out, {**record, "rows": rows})
