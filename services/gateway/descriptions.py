"""Titles and categories of every catalogue item, for the k items an answer
returns: a copy kept live from the features service's item watch, so the
request path asks for none (misses are fetched for just the k returned)."""

from __future__ import annotations

from collections.abc import Sequence

from recserve.features.v1 import features_pb2 as fpb

Description = tuple[str, tuple[str, ...]]  # title, categories


class ItemDescriptions:
    def __init__(self) -> None:
        self.by_id: dict[str, Description] = {}
        self.categories: frozenset[str] = frozenset()  # every category an item has

    def __len__(self) -> int:
        return len(self.by_id)

    def replace(self, items: Sequence[fpb.ItemFeatures], version: str = "") -> None:
        self.by_id = {i.item_id: (i.title, tuple(i.categories)) for i in items}
        self.categories = frozenset(c for i in items for c in i.categories)

    def update(self, items: Sequence[fpb.ItemFeatures]) -> None:
        for i in items:
            self.by_id[i.item_id] = (i.title, tuple(i.categories))
        self.categories |= {c for i in items for c in i.categories}

    def get(self, item_id: str) -> Description | None:
        return self.by_id.get(item_id)
