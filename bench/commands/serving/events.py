"""`python -m bench events`: app events through Envoy, events a second and
CPU per event by process."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from bench.output import console, write


def events(
    senders: Annotated[int, typer.Option(min=1, max=64)] = 4,
    batch: Annotated[int, typer.Option(min=1, max=1000)] = 100,
    duration: Annotated[float, typer.Option(max=600)] = 20.0,
    rate: Annotated[
        float, typer.Option(min=0, help="Events a second in all; 0: as fast as acknowledged.")
    ] = 0.0,
    out: Path | None = None,
) -> None:
    """Events a second the running stack acknowledges (written and fsynced)
    and applies to the live features, CPU per event of each process, and
    how soon the features service shows an event under that load."""
    import pandas as pd

    from bench.events_load import run
    from bench.simulate import rating_type
    from recserve_kit.config import load_settings
    from recserve_model import artifacts
    from recserve_stack.settings import StackSettings

    settings = load_settings(StackSettings)
    directory = artifacts.current(settings.data_dir)
    users = sorted(pd.read_parquet(directory / "features" / "user_activity.parquet")["user_id"])
    items = sorted(pd.read_parquet(directory / "item_vectors.parquet")["item_id"])
    event_type, value = rating_type(directory)
    result = run(settings, users, items, event_type, value, senders, batch, duration, rate)
    paced = f"at {rate:g}/s" if rate else "as fast as acknowledged"
    table = Table(title=f"{senders} senders x {batch} events a batch {paced} for {duration:.0f}s")
    table.add_column("process")
    table.add_column("CPU µs / event acknowledged", justify="right")
    per_event = result["cpu_us_per_event"]
    assert isinstance(per_event, dict)
    for name, us in per_event.items():
        table.add_row(name, f"{us:.1f}")
    total = result["total_cpu_us_per_event"]
    table.add_row("total (stack, without the load generator)", f"{total}")
    console.print(table)
    console.print(
        f"{result['events_per_s']} events/s acknowledged ({result['events_acknowledged']}), "
        f"batch p50 {result['batch_p50_ms']} ms, p99 {result['batch_p99_ms']} ms, errors "
        f"{result['errors']}; live features: {result['live_updated_per_s']} events/s applied, "
        f"{result['live_dropped']} dropped, {result['live_failed']} failed; an event "
        f"visible there after {result['freshness_probes_s']} s under the load"
    )
    write(out, {"benchmark": "events", **result})
