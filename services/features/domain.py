"""The features service's domain: typed reads from the Feast online store
(``users``, ``items`` with its cache and catalogue) and validated real-time
pushes (``events``), behind one object the servicer and server use."""

from __future__ import annotations

from collections.abc import Sequence

from feast import FeatureStore

from services.features.catalogue import Catalogue
from services.features.config import FeaturesSettings
from services.features.events import EventWriter
from services.features.items import ItemReader
from services.features.records import Event, ItemRecord, UserRecord
from services.features.users import UserReader
from services.features.vectors import VectorRefresher

__all__ = ["Event", "Features", "ItemRecord", "UserRecord"]


class Features:
    def __init__(self, store: FeatureStore, settings: FeaturesSettings) -> None:
        self.store = store
        self.settings = settings
        self.user_reader = UserReader(store, settings)
        self.item_reader = ItemReader(store, settings)
        self.event_writer = EventWriter(settings, self.user_reader, self.item_reader)
        self.vectors = VectorRefresher(settings, self.user_reader)

    @property
    def catalogue(self) -> Catalogue[ItemRecord]:
        return self.item_reader.catalogue

    async def user(self, user_id: str) -> UserRecord:
        return await self.user_reader.user(user_id)

    async def items(self, item_ids: Sequence[str]) -> tuple[list[ItemRecord], int]:
        """One record per id, in order, and how many came from the cache."""
        return await self.item_reader.get(item_ids)

    def read_catalogue(self, item_ids: Sequence[str], batch: int = 1000) -> list[ItemRecord]:
        return self.item_reader.read_catalogue(item_ids, batch)

    def publish_catalogue(self, records: Sequence[ItemRecord], version: str) -> None:
        self.item_reader.publish_catalogue(records, version)

    def follow_registry(self) -> None:
        """After a new artifact is published: its feature views as Feast's
        registry now has them (an artifact may add declared attributes or
        stored user vectors; read with the old feature services they would
        not be served until a restart)."""
        self.store.refresh_registry()
        self.user_reader.follow_registry()
        self.item_reader.follow_registry()

    def invalidate_items(self, item_ids: Sequence[str] | None = None) -> None:
        self.item_reader.invalidate(item_ids)

    async def push(self, events: Sequence[Event]) -> int:
        """Validates every event, then writes each user's new activity once;
        their vectors are computed again off the request path."""
        activities = await self.event_writer.push(events)
        self.vectors.changed(activities)
        return len(events)
