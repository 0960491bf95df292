"""The item catalogue the features service serves to watchers.

Every item of the published artifact, read from Feast at start and on each
publish (a new listing, ``reset``), and changed items re-read after each push
(``changes``). Watchers get the whole catalogue first and then every change,
in order; one that falls behind by more than ``MAX_PENDING`` updates is sent
the whole catalogue again instead of an unbounded queue.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

MAX_PENDING = 64


class Keyed(Protocol):
    @property
    def item_id(self) -> str: ...


R = TypeVar("R", bound=Keyed)


@dataclass(frozen=True)
class Listing(Generic[R]):
    """What a watcher receives: everything (reset) or what changed."""

    reset: bool
    records: Sequence[R]
    version: str


class _Watcher(Generic[R]):
    def __init__(self) -> None:
        # None: the catalogue closed (the service stops); the stream ends.
        self.queue: asyncio.Queue[Listing[R] | None] = asyncio.Queue(MAX_PENDING + 1)
        self.behind = False


class Catalogue(Generic[R]):
    def __init__(self) -> None:
        self.records: dict[str, R] = {}
        self.version = ""
        self._watchers: set[_Watcher[R]] = set()
        self.closed = False

    def _full(self) -> Listing[R]:
        return Listing(True, list(self.records.values()), self.version)

    def _broadcast(self, listing: Listing[R]) -> None:
        for watcher in self._watchers:
            if watcher.behind:
                continue
            try:
                if watcher.queue.qsize() >= MAX_PENDING:
                    raise asyncio.QueueFull  # the last place is kept for close()
                watcher.queue.put_nowait(listing)
            except asyncio.QueueFull:
                watcher.behind = True  # it gets the whole catalogue when it catches up

    def replace(self, records: Sequence[R], version: str) -> None:
        self.records = {r.item_id: r for r in records}
        self.version = version
        self._broadcast(self._full())

    def update(self, records: Sequence[R]) -> None:
        if not records:
            return
        for record in records:
            self.records[record.item_id] = record
        self._broadcast(Listing(False, list(records), self.version))

    async def close(self) -> None:
        """Ends every watch: on shutdown the streams finish cleanly (the
        watchers reconnect to another process) instead of being cancelled
        when the server's grace runs out."""
        self.closed = True
        for watcher in self._watchers:
            watcher.queue.put_nowait(None)

    @property
    def watchers(self) -> int:
        return len(self._watchers)

    async def watch(self) -> AsyncIterator[Listing[R]]:
        """The whole catalogue, then each change, until the caller stops."""
        if self.closed:
            return
        watcher: _Watcher[R] = _Watcher()
        # Registered and listed in one step (no await between): no change is missed.
        self._watchers.add(watcher)
        try:
            yield self._full()
            while True:
                listing = await watcher.queue.get()
                if listing is None:
                    return
                if watcher.behind and watcher.queue.empty():
                    watcher.behind = False
                    yield self._full()
                    continue
                yield listing
        finally:
            self._watchers.discard(watcher)
