"""`python -m bench load`: its options, its table and its JSON record."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from bench.output import console, write


def load(
    target: Annotated[
        str, typer.Option(envvar="RECSERVE_ENVOY_ADDRESS", help="Envoy's address.")
    ] = "127.0.0.1:8080",
    rate: Annotated[float, typer.Option(help="Requests per second.")] = 200.0,
    duration: Annotated[float, typer.Option(help="Seconds.", max=600)] = 30.0,
    k: int = 20,
    users: Annotated[int, typer.Option(help="Users asked for, in turn.", min=1)] = 943,
    user_prefix: Annotated[
        str, typer.Option(help="Their ids are PREFIX1..PREFIXN (a generated shop's: s).")
    ] = "",
    out: Path | None = None,
) -> None:
    """Open-loop Recommend load through Envoy (constant arrival rate).
    SIGTERM or SIGINT (Ctrl-C) ends it early: what was sent is reported."""
    from bench.load import LoadResult, run_load

    async def until_stopped() -> LoadResult:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        return await run_load(
            target, rate, duration, k=k, users=users, user_prefix=user_prefix, stop=stop
        )

    result = asyncio.run(until_stopped())
    ran = f"{result.duration_s:.0f}s" + ("" if result.duration_s == duration else " (stopped)")
    table = Table(title=f"Recommend at {rate:.0f}/s for {ran} via {target}")
    for column in ("p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "errors", "degraded"):
        table.add_column(column)
    s = result.summary()
    table.add_row(
        str(s["p50_ms"]),
        str(s["p90_ms"]),
        str(s["p99_ms"]),
        str(s["p999_ms"]),
        str(sum(result.errors.values())),
        str(sum(result.degraded.values())),
    )
    console.print(table)
    write(out, {"benchmark": "recommend_open_loop", **s})
