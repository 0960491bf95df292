"""What the features service reads and takes: users, items and events, as
typed records, and the conversion of Feast's values into them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar, cast

from feast.protos.feast.types.Value_pb2 import FloatList, Int64List, StringList, Value
from feast.type_map import python_values_to_proto_values
from feast.value_type import ValueType

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


# Python values to Feast's, built directly for the types our views write:
# the same protos as Feast's python_values_to_proto_values (held equal by
# tests/unit/test_feast_values.py), without its per-element checks in
# Python, which took a sixth of a live events write (a user's seen items).
_BUILD: dict[ValueType, Callable[[Any], Value]] = {
    ValueType.STRING: lambda v: Value(string_val=v),
    ValueType.INT64: lambda v: Value(int64_val=v),
    ValueType.FLOAT: lambda v: Value(float_val=v),
    ValueType.STRING_LIST: lambda v: Value(string_list_val=StringList(val=v)),
    ValueType.FLOAT_LIST: lambda v: Value(float_list_val=FloatList(val=v)),
    ValueType.INT64_LIST: lambda v: Value(int64_list_val=Int64List(val=v)),
}


def proto_values(values: Sequence[Any], value_type: ValueType) -> list[Value]:
    """``values`` as Feast values of ``value_type`` (None as an unset value)."""
    build = _BUILD.get(value_type)
    if build is None:
        return python_values_to_proto_values(list(values), value_type)
    return [Value() if v is None else build(v) for v in values]


def value_or(column: list[object], i: int, default: T) -> T:
    """The row's value, or ``default`` where it is unset (typed as the default)."""
    value = column[i] if i < len(column) else None
    return default if value is None else cast(T, value)
