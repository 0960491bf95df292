"""Real-time activity: validated events update each user's activity and
each item's statistics in the online store (Feast push), once per user and
item a batch; the items' new values go to watchers at once."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
from feast import FeatureStore
from feast.data_source import PushMode

from recserve_feast.activity import Activity
from recserve_feast.repo import ITEM_PUSH_SOURCE, USER_PUSH_SOURCE
from recserve_kit.errors import InvalidArgument
from recserve_kit.validation import check_id
from services.features.config import FeaturesSettings
from services.features.items import ItemReader
from services.features.records import Event, ItemRecord
from services.features.users import UserReader


class EventWriter:
    def __init__(
        self, store: FeatureStore, settings: FeaturesSettings, users: UserReader, items: ItemReader
    ) -> None:
        self.store = store
        self.settings = settings
        self.users = users
        self.items = items
        self._push_lock = asyncio.Lock()

    def validate(self, events: Sequence[Event]) -> None:
        if not events:
            raise InvalidArgument("events", "is empty")
        if len(events) > self.settings.max_events:
            raise InvalidArgument("events", f"at most {self.settings.max_events} per call")
        latest = datetime.now(UTC) + timedelta(days=1)
        for n, event in enumerate(events):
            check_id(event.user_id, f"events[{n}].user_id")
            check_id(event.item_id, f"events[{n}].item_id")
            if not math.isfinite(event.rating) or not (
                event.rating == 0 or 0.5 <= event.rating <= 5.0
            ):
                raise InvalidArgument(f"events[{n}].rating", "must be 0 (implicit) or 0.5 to 5")
            if event.event_time.timestamp() <= 0:
                raise InvalidArgument(f"events[{n}].event_time", "is missing")
            if event.event_time > latest:
                raise InvalidArgument(f"events[{n}].event_time", "is in the future")

    async def push(self, events: Sequence[Event]) -> int:
        """Validates every event, then writes each user's new activity once."""
        self.validate(events)
        async with self._push_lock:
            users = sorted({e.user_id for e in events})
            current = await asyncio.to_thread(self.users.read, users)
            rows = []
            for record in current:
                mine = sorted(
                    (e for e in events if e.user_id == record.user_id), key=lambda e: e.event_time
                )
                activity = Activity.of(
                    record.rating_count,
                    record.mean_rating,
                    record.recent_item_ids,
                    record.seen_item_ids,
                )
                for event in mine:
                    activity.add(event.item_id, event.rating)
                rows.append(
                    {
                        "user_id": record.user_id,
                        **activity.columns(),
                        # Pushed rows must be newer than what the store holds.
                        "event_timestamp": max(datetime.now(UTC), mine[-1].event_time),
                    }
                )
            frame = pd.DataFrame(rows)
            frame["rating_count"] = frame["rating_count"].astype("int64")
            frame["mean_rating"] = frame["mean_rating"].astype("float32")
            item_frame, items = await asyncio.to_thread(self._item_stats_after, events)
            await asyncio.to_thread(self.store.push, USER_PUSH_SOURCE, frame, to=PushMode.ONLINE)
            await asyncio.to_thread(
                self.store.push, ITEM_PUSH_SOURCE, item_frame, to=PushMode.ONLINE
            )
            # The items' popularity changed: the cache and watchers (the
            # ranker's feature table) get the values just written, as a read
            # would give them (not read back: a third of an event's CPU).
            self.items.replace(items)
        return len(events)

    def _item_stats_after(self, events: Sequence[Event]) -> tuple[pd.DataFrame, list[ItemRecord]]:
        """The items' new statistics, as a frame to push and as records."""
        by_item: dict[str, list[float]] = {}
        for event in events:
            by_item.setdefault(event.item_id, []).append(event.rating)
        item_ids = sorted(by_item)
        now = datetime.now(UTC)
        rows, records = [], []
        for record in self.items.read(item_ids):
            ratings = by_item[record.item_id]
            rated = [r for r in ratings if r > 0]
            count = record.popularity + len(ratings)
            total = record.mean_rating * record.popularity + sum(rated)
            mean = total / (record.popularity + len(rated)) if rated else record.mean_rating
            mean = float(np.float32(mean))  # as the online store keeps it
            rows.append(
                {"item_id": record.item_id, "popularity": count, "mean_rating": mean,
                 "event_timestamp": now}
            )  # fmt: skip
            # Written, so found (as a read would say), with its other features.
            records.append(replace(record, found=True, popularity=count, mean_rating=mean))
        frame = pd.DataFrame(rows)
        frame["popularity"] = frame["popularity"].astype("int64")
        frame["mean_rating"] = frame["mean_rating"].astype("float32")
        return frame, records
