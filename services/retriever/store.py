"""What the retriever needs from a vector database, and the id mapping.

Qdrant point ids are unsigned integers or UUIDs; our item ids are strings.
Decimal ids map to themselves (so ML-100K's "42" is point 42), others to a
stable 63-bit hash. The original string is kept in the payload either way.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from recserve_kit.validation import is_decimal
from recserve_model.catalogue import PAYLOAD_KEY, AttributeFilter, CatalogueSchema

MAX_NUMERIC_ID = (1 << 63) - 1

# Filters match the keyword field ``state`` rather than the bool ``active``:
# qdrant-edge-py 0.9.0 sends MatchValue(True) as the integer 1, which never
# matches a bool payload (measured; see docs/design.md). Both are written.
STATE_FIELD = "state"


def state_of(active: bool) -> str:
    return "active" if active else "inactive"


def soft_deleted_payload() -> dict[str, object]:
    return {"active": False, STATE_FIELD: state_of(False)}


@functools.lru_cache(maxsize=1 << 17)  # a request names up to 1,450 ids; most recur
def point_id(item_id: str) -> int:
    if is_decimal(item_id) and len(item_id) < 19 and not (len(item_id) > 1 and item_id[0] == "0"):
        return int(item_id)
    digest = hashlib.blake2b(item_id.encode(), digest_size=8).digest()
    # High bit set keeps hashed ids apart from every decimal id below 2**63.
    return int.from_bytes(digest, "big") | (1 << 63)


@dataclass(frozen=True)
class ItemRecord:
    item_id: str
    vector: np.ndarray
    categories: tuple[str, ...] = ()
    active: bool = True
    title: str = ""
    year: int = 0
    # Filterable attributes as the payload stores them (CatalogueSchema.stored).
    attributes: dict[str, object] = field(default_factory=dict)

    def payload(self) -> dict[str, object]:
        return {
            "item_id": self.item_id,
            "categories": list(self.categories),
            "active": self.active,
            "state": state_of(self.active),
            "title": self.title,
            "year": self.year,
            PAYLOAD_KEY: self.attributes,
        }


@dataclass(frozen=True)
class SearchFilter:
    categories: tuple[str, ...] = ()
    exclude_item_ids: tuple[str, ...] = ()
    include_inactive: bool = False
    attributes: tuple[AttributeFilter, ...] = ()
    # Only these items (the candidate sources' pools); empty: every item.
    only_item_ids: tuple[str, ...] = ()


def attribute_key(name: str) -> str:
    return f"{PAYLOAD_KEY}.{name}"


@dataclass
class StoreInfo:
    point_count: int
    indexed_count: int
    dimension: int
    generation: str
    backend: str
    extra: dict[str, object] = field(default_factory=dict)


class VectorStore(Protocol):
    """One generation of the item collection."""

    generation: str
    dimension: int

    def search(
        self, vector: np.ndarray, k: int, flt: SearchFilter, ef: int, exact: bool = False
    ) -> list[tuple[str, float]]:
        """``exact``: every point that passes is scored (the sources' few
        pooled ids), not an HNSW walk that may miss some of them."""

    def vector_of(self, item_id: str) -> np.ndarray | None: ...

    def payloads(self, item_ids: Sequence[str]) -> dict[str, dict[str, object]]:
        """The stored payload of each of these items the collection holds."""

    def upsert(self, items: Sequence[ItemRecord]) -> None: ...

    def soft_delete(self, item_ids: Sequence[str]) -> int: ...

    def hard_delete(self, item_ids: Sequence[str]) -> int: ...

    def build_index(self) -> None: ...

    def index_attributes(self, schema: CatalogueSchema) -> None:
        """A payload index for every filterable attribute."""

    def info(self) -> StoreInfo: ...

    def close(self) -> None: ...

    def drop(self) -> None: ...
