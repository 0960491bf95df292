"""`python -m pipelines outcomes`: the outcome report, printed (and as JSON)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from recserve_cli import console as cli_console
from recserve_delivery.outcomes import ATTRIBUTION_WINDOW_S, Cell, Outcomes, compare, outcomes
from recserve_model import artifacts
from recserve_model.catalogue import CatalogueSchema


def table(report: Outcomes) -> Table:
    out = Table(title="Outcomes per model version, arm and surface", title_justify="left")
    for column in ("model version", "arm", "surface"):
        out.add_column(column)
    for column in ("lists", "items shown", "converted", "conversion", "events"):
        out.add_column(column, justify="right")
    for (version, arm, surface), cell in sorted(report.cells.items()):
        events = ", ".join(f"{t} {n}" for t, n in sorted(cell.events.items())) or "-"
        out.add_row(
            version, arm or "-", surface, str(cell.lists), str(cell.items_shown),
            str(cell.converted), f"{cell.rate:.2%}", events,
        )  # fmt: skip
    return out


def by_arm(report: Outcomes, arm: str) -> Cell:
    """Every cell of one arm, added up (all surfaces)."""
    total = Cell()
    for (_, cell_arm, _), cell in report.cells.items():
        if cell_arm == arm:
            total.lists += cell.lists
            total.converted += cell.converted
    return total


def outcomes_command(
    data_dir: Annotated[Path, typer.Option(help="The stack's data directory.")] = Path("data"),
    out: Annotated[Path | None, typer.Option(help="Also write the report as JSON here.")] = None,
    attribution_window_s: Annotated[
        float,
        typer.Option(
            min=1.0,
            help="An event converts a list it names only this long after the list was shown; "
            "the report holds the lists of one such window in memory.",
        ),
    ] = ATTRIBUTION_WINDOW_S,
) -> None:
    """Impressions joined with app events: conversion per model version, rollout
    arm and surface; the candidate arm against the stable one when both served."""
    console = cli_console()
    schema = CatalogueSchema.load(artifacts.current(data_dir))
    report = outcomes(data_dir, schema, attribution_window_s)
    console.print(table(report))
    console.print(f"events naming no recorded list or item: {report.unattributed}")
    stable, candidate = by_arm(report, "stable"), by_arm(report, "candidate")
    record: dict[str, object] = {
        "cells": [
            {"model_version": v, "arm": a, "surface": s, "lists": c.lists,
             "items_shown": c.items_shown, "converted": c.converted, "conversion": c.rate,
             "events": dict(c.events)}
            for (v, a, s), c in sorted(report.cells.items())
        ],
        "unattributed": report.unattributed,
    }  # fmt: skip
    if stable.lists and candidate.lists:
        result = compare(stable, candidate)
        console.print(
            f"candidate against stable: {result.difference:+.2%} conversion "
            f"(95% interval {result.low:+.2%} to {result.high:+.2%}, p = {result.p_value:.3f}; "
            f"{candidate.lists} and {stable.lists} lists)"
        )
        record["candidate_vs_stable"] = result.__dict__
    if out is not None:
        out.write_text(json.dumps(record, indent=2))
