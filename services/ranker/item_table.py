"""The ranker's item-feature table: every catalogue item's features, encoded
for the loaded model, kept live from the features service's watch.

Score gets candidate ids only; their feature rows are gathered here with one
numpy index instead of travelling through the gateway as messages. Slot 0 is
the unknown item (all zeros), which is how an item without features was
always encoded. Each encoder (one per model version in use) has its own
encoded copy, updated in place on every change.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from recserve.features.v1 import features_pb2 as fpb
from recserve_model.encoding import Encoder

UNKNOWN_SLOT = 0


class EncodedItems:
    """Feature rows of one encoder, by slot."""

    def __init__(self, encoder: Encoder, capacity: int) -> None:
        self.encoder = encoder
        self.rows = np.zeros((max(capacity, 1), encoder.spec.item_dim), dtype=np.float32)

    def set(self, slot: int, item: fpb.ItemFeatures) -> None:
        if slot >= len(self.rows):
            grown = np.zeros((max(slot + 1, 2 * len(self.rows)), self.rows.shape[1]), np.float32)
            grown[: len(self.rows)] = self.rows
            self.rows = grown
        self.rows[slot] = self.encoder.item(
            item.year, item.popularity, item.mean_rating, item.categories, item.attributes
        )


class ItemTable:
    def __init__(self) -> None:
        self.slot_of: dict[str, int] = {}
        self.items: list[fpb.ItemFeatures | None] = [None]  # slot 0: unknown
        self.version = ""
        self._encoded: dict[int, EncodedItems] = {}

    def __len__(self) -> int:
        return len(self.slot_of)

    def replace(self, items: Sequence[fpb.ItemFeatures], version: str) -> None:
        """A full listing: the table becomes exactly these items."""
        self.slot_of = {item.item_id: n + 1 for n, item in enumerate(items)}
        self.items = [None, *items]
        self.version = version
        for key, encoded in list(self._encoded.items()):
            self._encoded[key] = self._encode_all(encoded.encoder)

    def update(self, items: Sequence[fpb.ItemFeatures]) -> None:
        for item in items:
            slot = self.slot_of.get(item.item_id)
            if slot is None:
                slot = len(self.items)
                self.slot_of[item.item_id] = slot
                self.items.append(item)
            else:
                self.items[slot] = item
            for encoded in self._encoded.values():
                encoded.set(slot, item)

    def get(self, item_id: str) -> fpb.ItemFeatures | None:
        """The item's live features, if the catalogue has it."""
        slot = self.slot_of.get(item_id)
        return None if slot is None else self.items[slot]

    def _encode_all(self, encoder: Encoder) -> EncodedItems:
        encoded = EncodedItems(encoder, len(self.items))
        for slot, item in enumerate(self.items):
            if item is not None:
                encoded.set(slot, item)
        return encoded

    def features(self, encoder: Encoder, item_ids: Sequence[str]) -> np.ndarray:
        """[len(item_ids), item_dim] encoded features; unknown ids get zeros."""
        encoded = self._encoded.get(id(encoder))
        if encoded is None or encoded.encoder is not encoder:
            # A model version's first use; two kept (a switch has old and new in flight).
            while len(self._encoded) >= 2:
                self._encoded.pop(next(iter(self._encoded)))
            encoded = self._encoded[id(encoder)] = self._encode_all(encoder)
        get = self.slot_of.get
        slots = np.fromiter(
            (get(i, UNKNOWN_SLOT) for i in item_ids), dtype=np.int64, count=len(item_ids)
        )
        return encoded.rows[slots]
