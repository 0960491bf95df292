"""The broken datasets: one defect each, and where the report must name it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from recserve_data.report import show
from tests.unit.dataset_fixtures import (
    Data,
    Defect,
    add_column,
    cell,
    drop_column,
    manifest_edit,
    to_parquet,
    write,
)

FILES = {"items": "items.csv", "interactions": "interactions.csv", "users": "users.csv"}

# A cell set to a bad value: name, the check that refuses it, table, row, column, value.
CELLS = [
    ("duplicate item id", "duplicates", "items", 2, "item_id", "i1"),
    ("duplicate user id", "duplicates", "users", 3, "user_id", "u1"),
    ("item id with a space", "ids", "items", 6, "item_id", "i 6"),
    ("user id too long", "ids", "users", 2, "user_id", "u" * 129),
    ("non-ASCII user id", "ids", "interactions", 4, "user_id", "ü1"),
    ("empty item id", "values", "interactions", 7, "item_id", ""),
    ("unknown item", "references", "interactions", 3, "item_id", "i99"),
    ("unknown user", "references", "interactions", 20, "user_id", "u9"),
    ("undeclared event type", "event types", "interactions", 5, "event_type", "share"),
    ("rating above its range", "event types", "interactions", 4, "value", "7"),
    ("rating below its range", "event types", "interactions", 8, "value", "0"),
    ("rating without a value", "event types", "interactions", 12, "value", ""),
    ("timestamp not a time", "timestamps", "interactions", 2, "timestamp", "yesterday"),
    ("timestamp before 1970", "timestamps", "interactions", 9, "timestamp", "-5"),
    ("timestamp in milliseconds", "timestamps", "interactions", 10, "timestamp", "1700000000000"),
    ("timestamp without offset", "timestamps", "interactions", 11, "timestamp", "2023-05-01T10:00"),
    ("timestamp with a fraction", "timestamps", "interactions", 13, "timestamp", "1700000000.5"),
    ("empty timestamp", "values", "interactions", 14, "timestamp", ""),
    ("declared timestamp not a time", "values", "items", 3, "launched", "soon"),
    ("numeric not a number", "values", "items", 1, "year", "nineteen"),
    ("numeric below min", "values", "items", 2, "price", "-1"),
    ("numeric above max", "values", "users", 1, "age", "300"),
    ("numeric not finite", "values", "items", 4, "price", "inf"),
    ("integer with a fraction", "values", "users", 2, "age", "30.5"),
    ("categorical not declared", "values", "users", 3, "segment", "z"),
    ("non-nullable categorical empty", "values", "items", 5, "brand", ""),
    ("active not a boolean", "values", "items", 4, "active", "maybe"),
    ("boolean not a boolean", "values", "items", 1, "on_sale", "sometimes"),
    ("vector too short", "values", "items", 2, "embedding", "0.2|0.5"),
    ("vector not numbers", "values", "items", 3, "embedding", "0.3|x|1"),
    ("tag not declared", "values", "items", 1, "tags", "new|gold"),
    ("empty tag", "values", "items", 2, "tags", "new||sale"),
    ("empty category", "values", "items", 3, "categories", "home|"),
    ("blank title", "values", "items", 6, "title", " "),
]

DEFECTS = [
    Defect(name, check, FILES[table], row, column, show(value), cell(table, row, column, value))
    for name, check, table, row, column, value in CELLS
] + [
    # A column's problem: the header is the row, the value what it holds.
    Defect(
        "required column missing",
        "columns",
        "items.csv",
        None,
        "title",
        "'item_id, categories",
        drop_column("items", "title"),
    ),
    Defect(
        "declared column missing",
        "columns",
        "users.csv",
        None,
        "segment",
        "'user_id, age'",
        drop_column("users", "segment"),
    ),
    Defect(
        "undeclared column",
        "columns",
        "items.csv",
        None,
        "colour",
        "'colour'",
        add_column("items", "colour", "red"),
    ),
    # Parquet: types the file itself carries.
    Defect(
        "float ids in Parquet",
        "values",
        "interactions.parquet",
        1,
        "item_id",
        "1.5",
        after=to_parquet({"item_id": lambda s: pd.Series(1.5, index=s.index)}),
    ),
    Defect(
        "zoneless timestamps in Parquet",
        "timestamps",
        "interactions.parquet",
        1,
        "timestamp",
        "Timestamp(",
        after=to_parquet({"timestamp": lambda s: pd.to_datetime(s.astype(int), unit="s")}),
    ),
]

# A manifest edit: name, the key the report names, part of the value or message, the edit.
MANIFESTS = [
    (
        "unknown column type",
        "items.columns.price.type",
        "'money'",
        manifest_edit("items.columns.price.type", "money"),
    ),
    (
        "rating's value column undeclared",
        "interactions",
        "'stars'",
        manifest_edit("interactions.event_types.rating.value_column", "stars"),
    ),
    (
        "negative weight",
        "interactions.event_types.click.weight",
        "-1",
        manifest_edit("interactions.event_types.click.weight", -1),
    ),
    (
        "filterable text column",
        "items.columns.summary",
        "cannot be filterable",
        manifest_edit("items.columns.summary.filterable", True),
    ),
    ("unsupported format", "format", "2", manifest_edit("format", 2)),
]


def broken(tmp_path: Path, defect: Defect) -> Path:
    """The tiny dataset with ``defect``, written under ``tmp_path``."""
    data = Data()
    if defect.change is not None:
        defect.change(data)
    directory = write(tmp_path / "dataset", data)
    if defect.after is not None:
        defect.after(directory)
    return directory
