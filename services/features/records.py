"""What the features service reads and takes: users, items and events, as
typed records, and the conversion of Feast's values into them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar, cast

from feast.protos.feast.types.Value_pb2 import Value

T = TypeVar("T")


@dataclass(frozen=True)
class UserRecord:
    user_id: str
    found: bool
    age: int = 0
    gender: str = ""
    occupation: str = ""
    rating_count: int = 0
    mean_rating: float = 0.0
    recent_item_ids: tuple[str, ...] = ()
    seen_item_ids: tuple[str, ...] = ()
    precomputed_item_ids: tuple[str, ...] = ()
    precomputed_run_id: str = ""
    attributes: Mapping[str, str] = field(default_factory=dict)  # declared, as text
    # The user's vector (little-endian float32) and the model version that
    # computed it, when it was computed for the profile above.
    vector_f32: bytes = b""
    vector_version: str = ""


@dataclass(frozen=True)
class ItemRecord:
    item_id: str
    found: bool
    title: str = ""
    year: int = 0
    categories: tuple[str, ...] = ()
    popularity: int = 0
    mean_rating: float = 0.0
    attributes: Mapping[str, str] = field(default_factory=dict)  # declared, as text


@dataclass(frozen=True)
class Event:
    user_id: str
    item_id: str
    rating: float
    event_time: datetime


def plain(value: Value | None) -> object:
    """A Feast value as Python (None when unset), for the types our views use."""
    if value is None:
        return None
    kind = value.WhichOneof("val")
    if kind is None or kind == "null_val":
        return None
    if kind == "string_list_val":
        return list(value.string_list_val.val)
    if kind == "float_list_val":
        return list(value.float_list_val.val)
    return getattr(value, kind)


def value_or(column: list[object], i: int, default: T) -> T:
    """The row's value, or ``default`` where it is unset (typed as the default)."""
    value = column[i] if i < len(column) else None
    return default if value is None else cast(T, value)
