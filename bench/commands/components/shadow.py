"""`python -m bench shadow`: its options, its table and its JSON record."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from bench.output import console, write


def shadow(
    rate: float = 100.0,
    duration: Annotated[float, typer.Option(max=600)] = 20.0,
    rounds: Annotated[int, typer.Option(min=1)] = 3,
    percent: Annotated[float, typer.Option(min=0, max=100)] = 10.0,
    candidate: Annotated[str, typer.Option(help="Default: the current artifact again.")] = "",
    out: Path | None = None,
) -> None:
    """Shadow scoring at PERCENT vs off, alternating rounds on the running stack."""
    from bench.shadow import run as run_shadow
    from recserve_kit.config import load_settings
    from recserve_stack.settings import StackSettings

    result = run_shadow(load_settings(StackSettings), rate, duration, rounds, percent, candidate)
    table = Table(title=f"shadow {percent:g}% vs off at {rate:.0f}/s, {rounds} rounds each")
    table.add_column("figure (median of rounds)")
    table.add_column("off", justify="right")
    table.add_column(f"shadow {percent:g}%", justify="right")
    off, on = result["off"], result["on"]
    assert isinstance(off, dict) and isinstance(on, dict)
    for name in off:
        table.add_row(name, f"{off[name]:g}", f"{on[name]:g}")
    console.print(table)
    cpu_ratio, p99_ratio = result["cpu_ratio_on_over_off"], result["p99_ratio_on_over_off"]
    console.print(f"CPU on/off {cpu_ratio}, p99 on/off {p99_ratio}")
    write(out, {"benchmark": "shadow_scoring", **result})
