"""Item reads: through Feast's online store interface (one read per view,
services.features.online), and served from an in-process cache (size- and
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
from recserve_kit.validation import check_ids
from recserve_model.attribute_features import texts_from_json
from services.features.catalogue import Catalogue
from services.features.config import FeaturesSettings
from services.features.online import OnlineView
from services.features.records import ItemRecord

CACHE = Counter("recserve_feature_cache_total", "Item-feature cache lookups.", ["result"])


class ItemReader:
    def __init__(self, store: FeatureStore, settings: FeaturesSettings) -> None:
        self.store = store
        self.settings = settings
        self.profile = OnlineView(store, "item_profile", "item_id")
        self.stats = OnlineView(store, "item_stats", "item_id")
        self.cache: TTLCache[str, ItemRecord] = TTLCache(
            maxsize=max(settings.item_cache_size, 1), ttl=settings.item_cache_ttl_s
        )
        self._cache_lock = threading.Lock()
        # Statistics merged from events, not yet in the store
        # (services.features.events): read before the store's.
        self.unwritten: dict[str, dict[str, object]] = {}
        # Every item of the published artifact, for watchers (ranker, gateway).
        self.catalogue: Catalogue[ItemRecord] = Catalogue()

    def follow_registry(self) -> None:
        """A newly published artifact's item features (the registry refreshed by the caller)."""
        self.profile.forget()
        self.stats.forget()

    def read(self, item_ids: Sequence[str]) -> list[ItemRecord]:
        profiles, stats = self.profile.read(item_ids), self.stats.read(item_ids)
        stats = [self.unwritten.get(i, stat) for i, stat in zip(item_ids, stats, strict=True)]
        return [
            ItemRecord(
                item_id=item_id,
                found=profile is not None or stat is not None,
                title=str(profile.get("title") or "") if profile else "",
                year=int(cast(int, profile.get("year") or 0)) if profile else 0,
                categories=tuple(cast(list[str], profile.get("genres") or ())) if profile else (),
                popularity=int(cast(int, stat.get("popularity") or 0)) if stat else 0,
                mean_rating=float(cast(float, stat.get("mean_rating") or 0.0)) if stat else 0.0,
                attributes=texts_from_json(profile.get("attributes") or "") if profile else {},
            )
            for item_id, profile, stat in zip(item_ids, profiles, stats, strict=True)
        ]

    async def get(self, item_ids: Sequence[str]) -> tuple[list[ItemRecord], int]:
        """One record per id, in order, and how many came from the cache."""
        if len(item_ids) > self.settings.max_item_ids:
            raise InvalidArgument(
                "item_ids", f"at most {self.settings.max_item_ids} per call, got {len(item_ids)}"
            )
        check_ids(item_ids, "item_ids")
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

    def known(self, item_ids: Sequence[str]) -> dict[str, ItemRecord]:
        """The records the catalogue holds (the published items, as last
        written) of these ids."""
        records = self.catalogue.records
        return {i: records[i] for i in item_ids if i in records}

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
