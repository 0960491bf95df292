"""The manifest, ``dataset.yaml``: what a dataset directory holds and what
each column means.

Three tables (items, interactions and, optionally, users), each a Parquet or
CSV file. The columns every dataset has are fixed (``REQUIRED``); any other
column is declared here with a type, so nothing in a table goes unread or
unchecked. Event types are declared with a role and a weight: a purchase can
count for more than a view, and explicit ratings are one role among others.
"""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

MANIFEST = "dataset.yaml"
NAME = r"^[a-z][a-z0-9_]{0,63}$"
PATTERN = re.compile(NAME)
FORMATS = (".csv", ".parquet")


class ColumnType(StrEnum):
    CATEGORICAL = "categorical"  # one string value
    TAGS = "tags"  # a list of string values
    NUMERIC = "numeric"
    BOOLEAN = "boolean"
    TEXT = "text"
    VECTOR = "vector"  # a fixed-length list of floats
    TIMESTAMP = "timestamp"


FILTERABLE = {ColumnType.CATEGORICAL, ColumnType.TAGS, ColumnType.NUMERIC, ColumnType.BOOLEAN}

# The columns every table has, by table, with their types. Ids follow the
# services' id policy (recserve_kit.validation).
ID = "id"
REQUIRED: dict[str, dict[str, str]] = {
    "items": {"item_id": ID, "title": "text", "categories": "tags", "active": "boolean"},
    "interactions": {
        "user_id": ID,
        "item_id": ID,
        "timestamp": "timestamp",
        "event_type": "categorical",
    },
    "users": {"user_id": ID},
}


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Column(Strict):
    """A declared column: its type, whether filters may use it, its bounds."""

    type: ColumnType = Field(description="What the values are.")
    description: str = Field("", description="What the column means, for people.")
    filterable: bool = Field(
        False,
        description="Whether requests may filter on it (categorical, tags, numeric, boolean).",
    )
    nullable: bool = Field(True, description="Whether a row may leave it empty.")
    min: float | None = Field(None, description="Smallest allowed value (numeric).")
    max: float | None = Field(None, description="Largest allowed value (numeric).")
    integer: bool = Field(False, description="Values must be whole numbers (numeric).")
    values: list[str] | None = Field(
        None, description="The allowed values (categorical, tags); any string when absent."
    )
    dim: int | None = Field(None, ge=1, le=4096, description="The length of each vector.")

    @model_validator(mode="after")
    def _consistent(self) -> Column:
        numeric = self.type is ColumnType.NUMERIC
        if not numeric and (self.min is not None or self.max is not None or self.integer):
            raise ValueError("min, max and integer apply to numeric columns only")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} is above max {self.max}")
        if self.values is not None and self.type not in (ColumnType.CATEGORICAL, ColumnType.TAGS):
            raise ValueError("values apply to categorical and tags columns only")
        if (self.type is ColumnType.VECTOR) != (self.dim is not None):
            raise ValueError("dim is required for a vector column, and only there")
        if self.filterable and self.type not in FILTERABLE:
            raise ValueError(f"a {self.type.value} column cannot be filterable")
        return self


class Role(StrEnum):
    POSITIVE = "positive"  # the user wanted the item: a click, an add to cart, a purchase
    NEGATIVE = "negative"  # the user turned it down: a dislike, a hide, a return
    EXPOSURE = "exposure"  # the item was shown; nothing more is known
    RATING = "rating"  # an explicit rating, its value in a value column


class EventType(Strict):
    """One kind of interaction and how much it counts."""

    role: Role = Field(description="What the event says about the user's interest.")
    weight: float = Field(
        1.0, ge=0, le=1000, description="How much one event counts against the others."
    )
    description: str = Field("", description="What the event is, for people.")
    value_column: str | None = Field(
        None, description="The numeric interactions column holding each event's value."
    )
    min: float | None = Field(None, description="Smallest allowed value of this event type.")
    max: float | None = Field(None, description="Largest allowed value of this event type.")

    @model_validator(mode="after")
    def _consistent(self) -> EventType:
        if self.role is Role.RATING and (
            self.value_column is None or self.min is None or self.max is None
        ):
            raise ValueError("a rating needs value_column, min and max")
        if (self.min is not None or self.max is not None) and self.value_column is None:
            raise ValueError("min and max bound a value_column")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} is above max {self.max}")
        return self


class Table(Strict):
    """One table: its file and the columns it has besides the required ones."""

    file: str = Field(description="Path relative to the dataset directory, .csv or .parquet.")
    columns: dict[str, Column] = Field(
        default_factory=dict, description="Declared columns beyond the required ones, by name."
    )

    @field_validator("file")
    @classmethod
    def _relative_table_file(cls, value: str) -> str:
        path = PurePosixPath(value)
        if path.is_absolute() or ".." in path.parts or path.suffix not in FORMATS:
            raise ValueError(f"must be a relative path to a {' or '.join(FORMATS)} file")
        return value

    @field_validator("columns")
    @classmethod
    def _column_names(cls, value: dict[str, Column]) -> dict[str, Column]:
        for name in value:
            if not PATTERN.match(name):
                raise ValueError(f"column name {name!r} must match {NAME}")
        return value


class Interactions(Table):
    event_types: dict[str, EventType] = Field(
        min_length=1, description="Every event type the table may hold, by name."
    )
    repeat: bool = Field(
        False,
        description="Items are bought again (groceries, consumables): a user's own past "
        "items are candidates too, and a held-out repeat counts as a hit.",
    )

    @model_validator(mode="after")
    def _event_types(self) -> Interactions:
        for name, event in self.event_types.items():
            if not PATTERN.match(name):
                raise ValueError(f"event type {name!r} must match {NAME}")
            column = self.columns.get(event.value_column or "")
            if event.value_column is not None and (
                column is None or column.type is not ColumnType.NUMERIC
            ):
                raise ValueError(
                    f"event type {name}: value_column {event.value_column!r} "
                    "is not a declared numeric column"
                )
        return self


class CsvOptions(Strict):
    """How the CSV tables are written."""

    delimiter: str = Field(",", min_length=1, max_length=1, description="Field separator.")
    list_separator: str = Field(
        "|",
        min_length=1,
        max_length=1,
        description="Separates the values of a tags or vector cell.",
    )
    encoding: str = Field("utf-8", description="The files' text encoding.")

    @model_validator(mode="after")
    def _distinct(self) -> CsvOptions:
        if self.delimiter == self.list_separator:
            raise ValueError("delimiter and list_separator must differ")
        return self


class Manifest(Strict):
    """A dataset directory's ``dataset.yaml``."""

    format: Literal[1] = Field(description="The contract's version.")
    name: str = Field(
        pattern=r"^[a-z][a-z0-9-]{0,31}$",
        description="Short name; artifact versions start with it.",
    )
    title: str = Field(min_length=1, description="What the data set is, for people.")
    source: str = Field("", description="Where it came from and its license.")
    items: Table = Field(description="The catalogue.")
    interactions: Interactions = Field(description="What users did, with timestamps.")
    users: Table | None = Field(None, description="User attributes; optional.")
    csv: CsvOptions = Field(default_factory=CsvOptions, description="How CSV tables are written.")

    @model_validator(mode="after")
    def _required_columns_are_not_declared(self) -> Manifest:
        for kind, table in self.tables().items():
            for name in table.columns:
                if name in REQUIRED[kind]:
                    raise ValueError(f"{kind}.columns.{name}: a required column, never declared")
        files = [t.file for t in self.tables().values()]
        if len(set(files)) != len(files):
            raise ValueError(f"each table needs a file of its own: {files}")
        return self

    def tables(self) -> dict[str, Table]:
        found: dict[str, Table] = {"items": self.items, "interactions": self.interactions}
        if self.users is not None:
            found["users"] = self.users
        return found


class ManifestError(ValueError):
    """A manifest that cannot be read or does not match the model: each
    problem as (key, value, message)."""

    def __init__(self, problems: list[tuple[str, Any, str]]) -> None:
        super().__init__("; ".join(f"{where}: {message}" for where, _, message in problems))
        self.problems = problems


def read_manifest(directory: Path) -> Manifest:
    path = directory / MANIFEST
    if not path.is_file():
        raise ManifestError([("", None, f"no {MANIFEST} in {directory}")])
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise ManifestError([("", None, f"not valid YAML: {error}")]) from None
    try:
        return Manifest.model_validate(raw)
    except ValidationError as error:
        raise ManifestError(
            [(".".join(str(p) for p in e["loc"]), e.get("input"), e["msg"]) for e in error.errors()]
        ) from None


def write_manifest(directory: Path, manifest: Manifest) -> None:
    data = manifest.model_dump(mode="json", exclude_defaults=True)
    (directory / MANIFEST).write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
