"""`python -m bench capacity`: its options, its table and its JSON record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from bench.output import console, write


def capacity(
    measured: Annotated[Path, typer.Option(help="JSON from `bench cpu` or `bench sweep`.")],
    rate: Annotated[float, typer.Option(help="With a sweep: which rate's CPU to use.")] = 200.0,
    utilisation: float = 0.6,
    rows_per_request: int = 200,
    gpu_rows_per_s: Annotated[
        float, typer.Option(help="Assumed ranking rows/s of one GPU (a projection).")
    ] = 2_000_000.0,
    out: Path | None = None,
) -> None:
    """Cores and replicas per component for 1,000 and 10,000 Recommend/s."""
    from bench.capacity import plan

    source = json.loads(measured.read_text())
    if "rows" in source:
        chosen = next(r for r in source["rows"] if float(r["rate_rps"]) == rate)
    else:
        chosen = source
    cpu_ms = chosen["cpu_ms_per_request"]
    rates = (1000, 10000)
    rows = plan(cpu_ms, rates, utilisation, rows_per_request, gpu_rows_per_s)
    table = Table(
        title=f"Capacity at {utilisation:.0%} utilisation, from CPU measured at "
        f"{chosen['rate_rps']:.0f}/s ({measured})"
    )
    table.add_column("component")
    table.add_column("CPU ms/req", justify="right")
    for r in rates:
        table.add_column(f"cores @{r:,}/s", justify="right")
        table.add_column(f"replicas @{r:,}/s", justify="right")
    for row in rows:
        cells = [str(row["component"]), "" if row["cpu_ms"] is None else str(row["cpu_ms"])]
        for r in rates:
            cores, replicas = row[f"cores@{r}"], row[f"replicas@{r}"]
            cells += [
                "" if cores is None else str(cores),
                "" if replicas is None else str(replicas),
            ]
        table.add_row(*cells)
    console.print(table)
    for row in rows:
        if row.get("note"):
            console.print(f"{row['component']}: {row['note']}")
    write(out, {"benchmark": "capacity", "source": str(measured), "rows": rows})
