"""A read-only retriever that follows the writer on the same host.

Where the request path runs as one process per core, each process searches
its own Qdrant Edge shards (a shard is one process's alone: docs/design.md),
and one retriever, the writer, takes every write. A follower reads the
writer's ``state.json`` and change feed (``change_feed.py``) below the same
data folder and mirrors them into generations of its own:

- the writer's current generation: built from the same artifact's items,
  then the feed's writes after the generation's ``from_seq`` replayed, as
  the writer replayed its journal; swapped in as ``Retriever._switch`` does,
  so no search sees a half-built one;
- its prepared model version (a rollout's candidate), the same way; its
  promotion makes the follower's copy current without a rebuild, its drop
  drops it;
- every write since: read from the feed as the kernel reports it written
  (inotify; else each ``follow_interval_s``) and applied to each generation
  it belongs to.

Each held generation reads the feed on its own from its start, so one
that starts later or falls behind never holds the others back. Reads are
eventually consistent (a write shows here once the writer has appended it
and the next look has read it: ``recserve_retriever_follower_lag_seconds``);
writes sent here are refused naming the writer. A gap in the feed (records
a generation needs removed before it read them) rebuilds that generation
while the held one goes on serving; where the feed no longer has its
start, the held one serves until the writer's next generation.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path

from prometheus_client import Gauge

from recserve_kit.file_changes import FileChanges
from recserve_model import artifacts
from recserve_model.catalogue import CatalogueSchema
from services.retriever import followers
from services.retriever.change_feed import FeedGap, FeedReader
from services.retriever.domain import Retriever
from services.retriever.followers import HEARTBEAT_S
from services.retriever.generations import Recorded
from services.retriever.prepared import ITEMS_FILE, Prepared
from services.retriever.store import VectorStore

log = logging.getLogger(__name__)
LAG = Gauge(
    "recserve_retriever_follower_lag_seconds",
    "How long ago the newest write this follower has applied was appended by the writer "
    "(0 while nothing is unread).",
)


class Follower:
    def __init__(self, retriever: Retriever, writer_dir: Path) -> None:
        self.retriever = retriever  # generations of its own; refuses writes
        self.state_path = writer_dir / "state.json"
        self.feed_dir = writer_dir / "feed"
        self.readers: dict[int, FeedReader] = {}  # a held store's id -> its writes
        self.stale: set[str] = set()  # generations to rebuild (a gap in their writes)
        self.unfollowable = ""  # why the writer's generation cannot be rebuilt now
        self._seen: tuple[int, int] = (0, 0)  # state.json's (mtime, size) last read
        self._state: dict[str, object] = {}
        self._told: tuple[str, str, float] = ("", "", 0.0)  # the status last written

    def writer_state(self) -> dict[str, object]:
        try:
            stat = self.state_path.stat()
        except FileNotFoundError:
            return {}
        if (stat.st_mtime_ns, stat.st_size) != self._seen:
            self._state = dict(json.loads(self.state_path.read_text()))
            self._seen = (stat.st_mtime_ns, stat.st_size)
        return self._state

    async def run(self, interval_s: float) -> None:
        """Looks at each change the kernel reports (inotify: a write shows
        here within the time it takes to apply it), and every ``interval_s``."""
        self.feed_dir.mkdir(parents=True, exist_ok=True)
        changes = FileChanges([self.state_path.parent, self.feed_dir])
        try:
            await self._follow(changes, interval_s)
        finally:
            changes.close()
            followers.remove(self.state_path.parent)

    async def _follow(self, changes: FileChanges, interval_s: float) -> None:
        while True:
            try:
                await self.step()
            except FeedGap as gap:
                if str(gap) != self.unfollowable:
                    log.error(
                        "cannot rebuild the writer's generation (%s); serving what is held", gap
                    )
                self.unfollowable = str(gap)
            except Exception:
                log.exception("following the writer failed; serving what is held")
            await changes.wait(interval_s)

    async def step(self) -> None:
        """One look at the writer: its generations, then its new writes."""
        state = self.writer_state()
        if "generation" not in state:
            return  # nothing built yet
        prepared = state.get("prepared")
        await self._follow_current(Recorded.of(state))
        await self._follow_prepared(Recorded.of(prepared) if isinstance(prepared, dict) else None)
        self._tail()
        self.unfollowable = ""
        self._tell()

    def _tell(self) -> None:
        """This follower's generations, for the writer (``followers.py``)."""
        r = self.retriever
        current = r.current.generation if r.current is not None else ""
        held = r.prepared.store if r.prepared is not None else None
        prepared = held.generation if held is not None else ""
        if (current, prepared) != self._told[:2] or time.time() - self._told[2] > HEARTBEAT_S:
            followers.write(self.state_path.parent, current, prepared)
            self._told = (current, prepared, time.time())

    async def _follow_current(self, recorded: Recorded) -> None:
        r = self.retriever
        same = r.current is not None and r.current.generation == recorded.generation
        stale = recorded.generation in self.stale
        if same and not stale and r.artifact_version == recorded.artifact_version:
            return
        schema = CatalogueSchema.load(self._artifact(recorded))
        held = r.prepared.store if r.prepared is not None else None
        promoted = held is not None and held.generation == recorded.generation and not stale
        if same and not stale:
            store = r._store()  # an artifact with the same items: adopted
        elif promoted and held is not None:
            store = held  # the candidate promoted: no rebuild
        else:
            store = await self._build(recorded, schema)
        async with r._write_lock:
            if promoted:
                r.prepared = None
            r._switch(store, recorded.artifact_version, schema, recorded.items_sha256)

    async def _follow_prepared(self, recorded: Recorded | None) -> None:
        r = self.retriever
        held = r.prepared.store if r.prepared is not None else None
        if held is not None and (recorded is None or held.generation != recorded.generation):
            await r.preparer.drop("the writer no longer holds it")
        elif held is not None and held.generation not in self.stale:
            return
        if recorded is None or recorded.generation == r._store().generation:
            return
        store = await self._build(recorded, CatalogueSchema.load(self._artifact(recorded)))
        prepared = Prepared(
            recorded.artifact_version, recorded.items_sha256, recorded.dimension, store, recorded.at
        )
        async with r._write_lock:
            old, r.prepared = r.prepared, prepared
        if old is not None and old.store is not None:  # rebuilt after a gap
            old.store.close()
            old.store.drop()

    def _artifact(self, recorded: Recorded) -> Path:
        root = artifacts.artifacts_root(self.retriever.settings.data_dir)
        return root / recorded.artifact_version

    async def _build(self, recorded: Recorded, schema: CatalogueSchema) -> VectorStore:
        """The writer's generation rebuilt here with the feed's writes after
        its start, before it serves (``FeedGap`` first, where the feed no
        longer has them: no build that could not catch up)."""
        reader = FeedReader(self.feed_dir, recorded.from_seq)
        reader.check()
        generations = self.retriever.generations
        items = self._artifact(recorded) / ITEMS_FILE
        store = await asyncio.to_thread(generations.build, recorded.generation, items, schema)
        try:
            for _, write in await asyncio.to_thread(reader.read_new):
                write.apply(store, recorded.artifact_version)
        except BaseException:
            store.close()
            store.drop()
            raise
        self.readers[id(store)] = reader
        self.stale.discard(recorded.generation)
        return store

    def _tail(self) -> None:
        """The writes appended since the last look, to each held generation."""
        r = self.retriever
        held = [(r._store(), r.artifact_version)]
        if r.prepared is not None and r.prepared.store is not None:
            held.append((r.prepared.store, r.prepared.version))
        self.readers = {id(s): self.readers[id(s)] for s, _ in held if id(s) in self.readers}
        newest = 0.0
        for store, version in held:
            reader = self.readers.get(id(store))
            if reader is None:
                continue
            try:
                writes = reader.read_new()
            except FeedGap as gap:
                log.warning("%s missed writes (%s); rebuilding it", store.generation, gap)
                self.stale.add(store.generation)
                continue
            for _, write in writes:
                write.apply(store, version)
            if writes:
                newest = max(newest, reader.appended_at)
        LAG.set(time.time() - newest if newest else 0.0)
