"""Real-time activity: validated events update each user's activity and
each item's statistics in the online store (services.features.online), once
per user and item a batch; the items' new values go to watchers at once."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import numpy as np

from recserve_feast.activity import Activity
from recserve_kit.errors import InvalidArgument
from recserve_kit.validation import check_id
from services.features.config import FeaturesSettings
from services.features.items import ItemReader
from services.features.records import Event, ItemRecord
from services.features.users import UserReader


class EventWriter:
    def __init__(self, settings: FeaturesSettings, users: UserReader, items: ItemReader) -> None:
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

    async def push(self, events: Sequence[Event]) -> dict[str, dict[str, Any]]:
        """Validates every event, then writes each user's new activity and
        each item's new statistics once; the users' activity written."""
        self.validate(events)
        async with self._push_lock:
            rows, items = await asyncio.to_thread(self._write, events)
            # The items' popularity changed: the cache and watchers (the
            # ranker's feature table) get the values just written, as a read
            # would give them (not read back); on the loop, as watchers are.
            self.items.replace(items)
        return rows

    def _write(self, events: Sequence[Event]) -> tuple[dict[str, dict[str, Any]], list[ItemRecord]]:
        by_user: dict[str, list[Event]] = {}
        for event in sorted(events, key=lambda e: e.event_time):
            by_user.setdefault(event.user_id, []).append(event)
        # Written rows must be newer than what the store holds.
        at = max(datetime.now(UTC), max(e.event_time for e in events))
        users = list(by_user)
        rows: dict[str, dict[str, Any]] = {}
        for user_id, current in zip(users, self.users.activity.read(users), strict=True):
            activity = Activity.from_columns(current)
            activity.extend((event.item_id, event.rating) for event in by_user[user_id])
            rows[user_id] = activity.columns()
        self.users.activity.write(rows, at)
        items = self._item_stats_after(events)
        self.items.stats.write(
            {r.item_id: {"popularity": r.popularity, "mean_rating": r.mean_rating} for r in items},
            at,
        )
        return rows, items

    def _item_stats_after(self, events: Sequence[Event]) -> list[ItemRecord]:
        """The items' records with their new statistics."""
        by_item: dict[str, list[float]] = {}
        for event in events:
            by_item.setdefault(event.item_id, []).append(event.rating)
        item_ids = sorted(by_item)
        # The statistics from the store; the rest of each record as served.
        stats = self.items.stats.read(item_ids)
        known = self.items.known(item_ids)
        missing = [i for i in item_ids if i not in known]
        known.update({r.item_id: r for r in self.items.read(missing)} if missing else {})
        records = []
        for item_id, stat in zip(item_ids, stats, strict=True):
            record = replace(
                known[item_id],
                popularity=int(cast(int, stat["popularity"] or 0)) if stat else 0,
                mean_rating=float(cast(float, stat["mean_rating"] or 0.0)) if stat else 0.0,
            )
            ratings = by_item[item_id]
            rated = [r for r in ratings if r > 0]
            count = record.popularity + len(ratings)
            total = record.mean_rating * record.popularity + sum(rated)
            mean = total / (record.popularity + len(rated)) if rated else record.mean_rating
            mean = float(np.float32(mean))  # as the online store keeps it
            # Written, so found (as a read would say), with its other features.
            records.append(replace(record, found=True, popularity=count, mean_rating=mean))
        return records
