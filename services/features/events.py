"""Real-time activity: validated events update each user's activity and
each item's statistics, once per user and item a batch; the items' new
values go to watchers at once.

Written behind, answered when written: a push merges its events into the
rows not yet written (``UserReader.unwritten``, ``ItemReader.unwritten``),
which reads serve at once; one writer task puts them into the online store
(services.features.online), all that merged since its last write in one,
then rests (``REST_S``, longer after a slow write); the push answers once
the write that holds its rows is done, so an answered push is in the
store as before. How soon an event shows no longer waits for the store's
write, which took most of a push at thousands of events a second; the
callers keep several pushes under way (services.gateway.online_updates)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
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

log = logging.getLogger(__name__)
# Between writes: at least REST_S, so that each write takes what merged
# in that time (a user's row once, however many pushes changed it); as long
# as a slow write took, at most MAX_REST_S, so the process's calls keep the
# GIL meanwhile.
REST_S = 1.0
MAX_REST_S = 2.0
RETRY_S = 1.0  # after a write the store refused
CLOSE_S = 10.0  # at a stop, how long the store may take the unwritten rows
# Users whose rows wait for the store at most: past it a push waits for a write.
MAX_UNWRITTEN = 100_000


def forget_written(unwritten: dict[str, Any], written: dict[str, Any]) -> None:
    """The rows just written leave ``unwritten``; a row merged again since stays."""
    for key, row in written.items():
        if unwritten.get(key) is row:
            del unwritten[key]


class EventWriter:
    def __init__(self, settings: FeaturesSettings, users: UserReader, items: ItemReader) -> None:
        self.settings = settings
        self.users = users
        self.items = items
        # Held while a push merges and while the writer takes or clears what
        # it writes: a row merged meanwhile is never cleared unwritten.
        self._merge_lock = asyncio.Lock()
        self._written = asyncio.Condition()
        self._newest = datetime.fromtimestamp(0, UTC)  # the newest event merged
        self._writer: asyncio.Task[None] | None = None
        self._hurry = asyncio.Event()  # set by flush: no rest between writes
        self._merged = 0  # merges so far
        self._stored = 0  # of which the store has all

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
        """Validates every event, then merges each user's new activity and
        each item's new statistics into the unwritten rows; the users'
        activity merged."""
        self.validate(events)
        if len(self.users.unwritten) >= MAX_UNWRITTEN:
            async with self._written:  # the store is behind: wait for its write
                await self._written.wait_for(lambda: len(self.users.unwritten) < MAX_UNWRITTEN)
        async with self._merge_lock:
            rows, items = await asyncio.to_thread(self._merge, events)
            self._merged += 1
            merge = self._merged
            # The items' popularity changed: the cache and watchers (the
            # ranker's feature table) get the new values, as a read would
            # give them; on the loop, as watchers are.
            self.items.replace(items)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_behind())
        async with self._written:  # served already; answered once stored
            await self._written.wait_for(lambda: self._stored >= merge)
        return rows

    def _merge(self, events: Sequence[Event]) -> tuple[dict[str, dict[str, Any]], list[ItemRecord]]:
        by_user: dict[str, list[Event]] = {}
        for event in sorted(events, key=lambda e: e.event_time):
            by_user.setdefault(event.user_id, []).append(event)
        self._newest = max(self._newest, max(e.event_time for e in events))
        unwritten = self.users.unwritten
        users = list(by_user)
        stored = [u for u in users if u not in unwritten]
        current = dict(zip(stored, self.users.activity.read(stored), strict=True)) if stored else {}
        rows: dict[str, dict[str, Any]] = {}
        for user_id in users:
            activity = Activity.from_columns(unwritten.get(user_id) or current[user_id])
            activity.extend((event.item_id, event.rating) for event in by_user[user_id])
            rows[user_id] = activity.columns()
        unwritten.update(rows)
        items = self._item_stats_after(events)
        self.items.unwritten.update(
            {r.item_id: {"popularity": r.popularity, "mean_rating": r.mean_rating} for r in items}
        )
        return rows, items

    async def _write_behind(self) -> None:
        """Writes the unwritten rows until none are left, resting between writes."""
        while self.users.unwritten or self.items.unwritten:
            async with self._merge_lock:
                users, items = dict(self.users.unwritten), dict(self.items.unwritten)
                merged = self._merged  # every merge up to here is in this write
                # Written rows must be newer than what the store holds.
                at = max(datetime.now(UTC), self._newest)
            started = time.monotonic()
            try:
                await asyncio.to_thread(self._write, users, items, at)
            except Exception:
                log.exception("cannot write %d users' activity; trying again", len(users))
                await asyncio.sleep(RETRY_S)
                continue
            took = time.monotonic() - started
            async with self._merge_lock:
                for unwritten, done in (
                    (self.users.unwritten, users),
                    (self.items.unwritten, items),
                ):
                    forget_written(unwritten, done)
            async with self._written:
                self._stored = merged
                self._written.notify_all()
            with contextlib.suppress(TimeoutError):  # rested: what merged meanwhile goes next
                await asyncio.wait_for(self._hurry.wait(), min(max(took, REST_S), MAX_REST_S))

    def _write(
        self,
        users: dict[str, dict[str, Any]],
        items: dict[str, dict[str, Any]],
        at: datetime,
    ) -> None:
        self.users.activity.write(users, at)
        self.items.stats.write(items, at)

    async def flush(self) -> None:
        """Until every merged row is in the store (tests), no rest taken."""
        self._hurry.set()
        try:
            while self._writer is not None and not self._writer.done():
                await asyncio.shield(self._writer)
        finally:
            self._hurry.clear()

    async def close(self) -> None:
        """At a stop, once no call can push more: the merged rows into the
        store, unless the store refuses them for ``CLOSE_S`` (then lost, as
        a push that failed is; the events stay on disk)."""
        try:
            await asyncio.wait_for(self.flush(), CLOSE_S)
        except TimeoutError:
            log.warning("stopped with %d users' activity unwritten", len(self.users.unwritten))
        if self._writer is not None:
            self._writer.cancel()

    def _item_stats_after(self, events: Sequence[Event]) -> list[ItemRecord]:
        """The items' records with their new statistics."""
        by_item: dict[str, list[float]] = {}
        for event in events:
            by_item.setdefault(event.item_id, []).append(event.rating)
        item_ids = sorted(by_item)
        # The statistics not yet written, else the store's; the rest of
        # each record as served.
        unwritten = self.items.unwritten
        stored = [i for i in item_ids if i not in unwritten]
        read = dict(zip(stored, self.items.stats.read(stored), strict=True)) if stored else {}
        stats = [unwritten.get(i) or read[i] for i in item_ids]
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
