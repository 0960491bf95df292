"""What the retriever checks at its edge: vectors, filters and items, each
refused as INVALID_ARGUMENT naming the field."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from recserve_kit.errors import InvalidArgument
from recserve_kit.validation import check_id
from recserve_model.catalogue import CatalogueSchema
from services.retriever.store import ItemRecord, SearchFilter

MAX_FILTER_VALUES = 1000


@dataclass(frozen=True)
class ItemInput:
    """An item as a caller sent it to UpsertItems."""

    item_id: str
    vector: Sequence[float]
    categories: Sequence[str] = ()
    active: bool = True
    title: str = ""
    year: int = 0
    attributes: Mapping[str, object] = field(default_factory=dict)


def check_vector(values: Sequence[float] | bytes, dimension: int, field: str) -> np.ndarray:
    """The vector as float32; ``values`` may be little-endian float32 bytes."""
    if isinstance(values, bytes):
        if len(values) != 4 * dimension:
            raise InvalidArgument(
                field, f"has {len(values)} bytes; the collection has {dimension} float32 values"
            )
        vector = np.frombuffer(values, dtype="<f4")
    else:
        vector = np.asarray(values, dtype=np.float32)
    if len(vector) != dimension:
        raise InvalidArgument(field, f"has {len(vector)} values; the collection has {dimension}")
    if not np.isfinite(vector).all():
        raise InvalidArgument(field, "contains NaN or infinity")
    return vector


def check_filter(flt: SearchFilter, schema: CatalogueSchema) -> None:
    if len(flt.categories) > MAX_FILTER_VALUES:
        raise InvalidArgument("filter.categories", f"at most {MAX_FILTER_VALUES} values")
    if len(flt.exclude_item_ids) > MAX_FILTER_VALUES:
        raise InvalidArgument("filter.exclude_item_ids", f"at most {MAX_FILTER_VALUES} values")
    if any(not c for c in flt.categories):
        raise InvalidArgument("filter.categories", "empty category")
    problem = schema.filters_problem(flt.attributes)
    if problem is not None:
        raise InvalidArgument("filter.attributes" + problem[0], problem[1])


NO_VECTOR = np.zeros(0, dtype=np.float32)  # the item tower embeds it (item_tower)


def check_item(item: ItemInput, field: str, dimension: int, schema: CatalogueSchema) -> ItemRecord:
    """The item as stored; an empty vector stays empty (NO_VECTOR) for the
    item tower to fill."""
    check_id(item.item_id, f"{field}.item_id")
    if len(item.vector):
        vector = check_vector(item.vector, dimension, f"{field}.vector")
    else:
        vector = NO_VECTOR
    if any(not c or len(c) > 64 for c in item.categories):
        raise InvalidArgument(f"{field}.categories", "empty or longer than 64 characters")
    if not 0 <= item.year <= 3000:
        raise InvalidArgument(f"{field}.year", "must be between 0 and 3000")
    attributes = {}
    for name, value in item.attributes.items():
        if name not in schema.attributes:
            raise InvalidArgument(
                f"{field}.attributes[{name!r}]",
                f"is not a filterable attribute (filterable: {schema.describe()})",
            )
        try:
            stored = schema.stored_value(name, value)
        except (ValueError, TypeError) as exc:
            raise InvalidArgument(f"{field}.attributes[{name!r}]", str(exc)) from None
        if stored is not None:
            attributes[name] = stored
    return ItemRecord(
        item.item_id,
        vector,
        tuple(item.categories),
        item.active,
        item.title,
        item.year,
        attributes,
    )


def check_items(
    raw: Sequence[ItemInput], dimension: int, schema: CatalogueSchema, limit: int
) -> list[ItemRecord]:
    """A whole batch checked before anything of it is applied."""
    if not raw:
        raise InvalidArgument("items", "is empty")
    if len(raw) > limit:
        raise InvalidArgument("items", f"at most {limit} per call")
    seen: dict[str, int] = {}
    records = []
    for n, item in enumerate(raw):
        if item.item_id in seen:
            raise InvalidArgument(f"items[{n}].item_id", f"duplicates items[{seen[item.item_id]}]")
        seen[item.item_id] = n
        records.append(check_item(item, f"items[{n}]", dimension, schema))
    return records
