"""Item reads: Feast's Python SDK costs milliseconds per call and more with
every entity, so items are served from an in-process cache (size- and
time-bounded, hit/miss counters exported, cleared when a new artifact is
published), and watchers (the ranker, the gateway) get the whole catalogue
(``catalogue``)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import cast

from cachetools import TTLCache
from feast import FeatureStore
from prometheus_client import Counter

from recserve_kit.errors import InvalidArgument
from recserve_kit.validation import check_id
from recserve_model.attribute_features import texts_from_json
from services.features.catalogue import Catalogue
from services.features.config import FeaturesSettings
from services.features.records import ItemRecord, value_or

CACHE = Counter("recserve_feature_cache_total", "Item-feature cache lookups.", ["result"])


class ItemReader:
    def __init__(self, store: FeatureStore, settings: FeaturesSettings) -> None:
        self.store = store
        self.settings = settings
        self.item_service = store.get_feature_service("item_features")
        self.cache: TTLCache[str, ItemRecord] = TTLCache(
            maxsize=max(settings.item_cache_size, 1), ttl=settings.item_cache_ttl_s
        )
        self._cache_lock = threading.Lock()
        # Every item of the published artifact, for watchers (ranker, gateway).
        self.catalogue: Catalogue[ItemRecord] = Catalogue()

    def follow_registry(self) -> None:
        """A newly published artifact's item features (the registry refreshed by the caller)."""
        self.item_service = self.store.get_feature_service("item_features")

    def read(self, item_ids: Sequence[str]) -> list[ItemRecord]:
        rows = self.store.get_online_features(
            features=self.item_service, entity_rows=[{"item_id": i} for i in item_ids]
        ).to_dict()
        return [
            ItemRecord(
                item_id=item_id,
                found=rows["title"][i] is not None or rows["popularity"][i] is not None,
                title=str(value_or(rows["title"], i, "")),
                year=int(value_or(rows["year"], i, 0)),
                categories=tuple(value_or(rows["genres"], i, cast(tuple[str, ...], ()))),
                popularity=int(value_or(rows["popularity"], i, 0)),
                mean_rating=float(value_or(rows["mean_rating"], i, 0.0)),
                attributes=texts_from_json(value_or(rows.get("attributes", []), i, "")),
            )
            for i, item_id in enumerate(item_ids)
        ]

    async def get(self, item_ids: Sequence[str]) -> tuple[list[ItemRecord], int]:
        """One record per id, in order, and how many came from the cache."""
        if len(item_ids) > self.settings.max_item_ids:
            raise InvalidArgument(
                "item_ids", f"at most {self.settings.max_item_ids} per call, got {len(item_ids)}"
            )
        for n, item_id in enumerate(item_ids):
            check_id(item_id, f"item_ids[{n}]")
        found: dict[str, ItemRecord] = {}
        with self._cache_lock:
            for item_id in item_ids:
                cached = self.cache.get(item_id) if self.settings.item_cache_size else None
                if cached is not None:
                    found[item_id] = cached
        missing = list(dict.fromkeys(i for i in item_ids if i not in found))
        hits = len(item_ids) - sum(1 for i in item_ids if i not in found)
        CACHE.labels("hit").inc(hits)
        CACHE.labels("miss").inc(len(item_ids) - hits)
        if missing:
            fresh = await asyncio.to_thread(self.read, missing)
            with self._cache_lock:
                for record in fresh:
                    found[record.item_id] = record
                    if self.settings.item_cache_size:
                        self.cache[record.item_id] = record
        return [found[i] for i in item_ids], hits

    def read_catalogue(self, item_ids: Sequence[str], batch: int = 1000) -> list[ItemRecord]:
        """Every item's record from Feast; the cache is filled (up to its size)
        so first requests do not pay Feast's cost."""
        out: list[ItemRecord] = []
        for start in range(0, len(item_ids), batch):
            records = self.read(item_ids[start : start + batch])
            out.extend(records)
        with self._cache_lock:
            for record in out[: self.settings.item_cache_size]:
                self.cache[record.item_id] = record
        return out

    def publish_catalogue(self, records: Sequence[ItemRecord], version: str) -> None:
        """Serves these records to watchers, replacing the previous catalogue (loop thread)."""
        self.catalogue.replace([r for r in records if r.found], version)

    def replace(self, records: Sequence[ItemRecord]) -> None:
        """Records just written to the online store: cached, and sent to
        watchers."""
        if self.settings.item_cache_size:
            with self._cache_lock:
                for record in records:
                    self.cache[record.item_id] = record
        self.catalogue.update([r for r in records if r.found])

    def invalidate(self, item_ids: Sequence[str] | None = None) -> None:
        with self._cache_lock:
            if item_ids is None:
                self.cache.clear()
            else:
                for item_id in item_ids:
                    self.cache.pop(item_id, None)
