"""`python -m bench idle`: its options, its table and its JSON record."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from bench.output import console, write


def idle(
    target: Annotated[str, typer.Option(help="Envoy's address.")] = "127.0.0.1:8080",
    requests: int = 2000,
    out: Path | None = None,
) -> None:
    """Latency of an idle stack: one client, closed loop, through Envoy."""
    from bench.load import run_closed

    histogram, degraded = asyncio.run(run_closed(target, requests))
    row = {
        "requests": requests,
        **{
            f"p{p}_ms".replace(".", ""): round(histogram.get_value_at_percentile(p) / 1000, 2)
            for p in (50, 90, 99, 99.9)
        },
        "max_ms": round(histogram.get_max_value() / 1000, 2),
        "degraded": dict(degraded),
    }
    console.print(row)
    write(out, {"benchmark": "idle_latency", **row})
