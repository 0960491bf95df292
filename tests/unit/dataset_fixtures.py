"""A tiny valid dataset in the contract, written as CSV, and the defects the
validator must refuse (one each)."""

from __future__ import annotations

import copy
import csv
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

NOW = 1_800_000_000  # the validator's "now" in these tests
START = 1_700_000_000
EVENTS = ["view", "click", "purchase", "rating"]
PER_USER = 16  # what the build's split needs: 10 held out, 5 for the ranker, 1 before


def manifest() -> dict[str, Any]:
    return {
        "format": 1,
        "name": "tiny",
        "title": "A tiny shop",
        "items": {
            "file": "items.csv",
            "columns": {
                "year": {"type": "numeric", "integer": True, "min": 1900, "max": 2100},
                "brand": {"type": "categorical", "filterable": True, "nullable": False},
                "price": {"type": "numeric", "min": 0, "filterable": True},
                "tags": {"type": "tags", "values": ["new", "sale", "eco"]},
                "summary": {"type": "text"},
                "embedding": {"type": "vector", "dim": 3},
                "on_sale": {"type": "boolean", "filterable": True},
                "launched": {"type": "timestamp"},
            },
        },
        "interactions": {
            "file": "interactions.csv",
            "columns": {"value": {"type": "numeric"}},
            "event_types": {
                "view": {"role": "exposure", "weight": 0.1},
                "click": {"role": "positive", "weight": 1},
                "purchase": {"role": "positive", "weight": 5},
                "rating": {"role": "rating", "value_column": "value", "min": 1, "max": 5},
            },
        },
        "users": {
            "file": "users.csv",
            "columns": {
                "age": {"type": "numeric", "integer": True, "min": 13, "max": 120},
                "segment": {"type": "categorical", "values": ["a", "b"]},
            },
        },
    }


def items() -> list[dict[str, str]]:
    return [
        {
            "item_id": f"i{n}",
            "title": f"Item {n}",
            "categories": "kitchen|home" if n % 2 else "garden",
            "active": "true" if n != 6 else "false",
            "year": str(2000 + n),
            "brand": "acme" if n < 4 else "globex",
            "price": f"{n * 2.5}",
            "tags": "new|sale" if n % 3 else "",
            "summary": f"The {n}th thing",
            "embedding": f"0.{n}|0.5|-1",
            "on_sale": "1" if n % 2 else "0",
            "launched": "2020-01-01T00:00:00Z" if n != 2 else "",
        }
        for n in range(1, 7)
    ]


def users() -> list[dict[str, str]]:
    return [{"user_id": f"u{n}", "age": str(20 + n), "segment": "ab"[n % 2]} for n in range(1, 4)]


def interactions() -> list[dict[str, str]]:
    rows = []
    for u in range(1, 4):
        for k in range(PER_USER):
            event = EVENTS[k % 4]
            rows.append(
                {
                    "user_id": f"u{u}",
                    "item_id": f"i{1 + (k + u) % 6}",
                    "timestamp": str(START + u * 10_000 + k * 60),
                    "event_type": event,
                    "value": str(1 + k % 5) if event == "rating" else "",
                }
            )
    return rows


@dataclass
class Data:
    manifest: dict[str, Any] = field(default_factory=manifest)
    items: list[dict[str, str]] = field(default_factory=items)
    interactions: list[dict[str, str]] = field(default_factory=interactions)
    users: list[dict[str, str]] = field(default_factory=users)


def write_csv(path: Path, rows: list[dict[str, str]]) -> None:
    names = list(dict.fromkeys(k for row in rows for k in row))
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, names)
        writer.writeheader()
        writer.writerows(rows)


def write(directory: Path, data: Data) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "dataset.yaml").write_text(yaml.safe_dump(data.manifest, sort_keys=False))
    for kind in ("items", "interactions", "users"):
        write_csv(directory / f"{kind}.csv", getattr(data, kind))
    return directory


def tiny(directory: Path) -> Path:
    return write(directory, Data())


@dataclass(frozen=True)
class Defect:
    """One thing wrong, and where the report must say it is."""

    name: str
    check: str
    file: str
    row: int | None  # None: the header (a column's problem) or the file itself
    column: str | None
    value: str
    change: Callable[[Data], None] | None = None
    after: Callable[[Path], None] | None = None  # edits the written files


def cell(table: str, row: int, column: str, value: str) -> Callable[[Data], None]:
    """Sets one cell; row 1 is the first data row, as the report counts."""

    def change(data: Data) -> None:
        getattr(data, table)[row - 1][column] = value

    return change


def drop_column(table: str, column: str) -> Callable[[Data], None]:
    def change(data: Data) -> None:
        for row in getattr(data, table):
            row.pop(column)

    return change


def add_column(table: str, column: str, value: str) -> Callable[[Data], None]:
    def change(data: Data) -> None:
        for row in getattr(data, table):
            row[column] = value

    return change


def manifest_edit(path: str, value: Any) -> Callable[[Data], None]:
    """Sets a manifest key by dotted path."""

    def change(data: Data) -> None:
        *parents, last = path.split(".")
        node = data.manifest
        for key in parents:
            node = node[key]
        node[last] = copy.deepcopy(value)

    return change


def short_user(data: Data) -> None:
    data.interactions = [r for r in data.interactions if r["user_id"] != "u3"] + [
        r for r in data.interactions if r["user_id"] == "u3"
    ][:5]


def to_parquet(column_types: dict[str, Any]) -> Callable[[Path], None]:
    """Rewrites the interactions as Parquet with some columns typed."""

    def after(path: Path) -> None:
        frame = pd.read_csv(path / "interactions.csv", dtype=str, keep_default_na=False)
        for name, convert in column_types.items():
            frame[name] = convert(frame[name])
        frame.to_parquet(path / "interactions.parquet", index=False)
        spec = yaml.safe_load((path / "dataset.yaml").read_text())
        spec["interactions"]["file"] = "interactions.parquet"
        (path / "dataset.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))

    return after
