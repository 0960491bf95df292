"""The retriever's domain: validated search and writes over the current
generation, and bulk refresh into a new generation with an atomic switch.

Searches run on the event-loop thread against ``self.current``; a refresh
builds the next generation in a worker thread while journaling the writes
that arrive meanwhile, replays them into the new generation under the write
lock, then swaps ``self.current``. No search ever sees a half-built or empty
collection, and no acknowledged write is lost by the switch.

A retrained model has item vectors of its own: before its rollout its
version is prepared (``prepared.py``), a second generation that searches
naming that version use and every write goes to as well; the promotion
makes it current without a rebuild, a rollback drops it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from recserve_kit.errors import FailedPrecondition, InvalidArgument, NotFound, Unavailable
from recserve_kit.validation import check_id, check_ids
from recserve_model import artifacts
from recserve_model.catalogue import CatalogueSchema
from recserve_model.sources import Sources
from services.retriever.catalogue_log import CatalogueLog
from services.retriever.change_feed import ChangeFeed
from services.retriever.checks import ItemInput, check_filter, check_items, check_vector
from services.retriever.config import RetrieverSettings
from services.retriever.generations import Generations, Journal, Recorded, Write
from services.retriever.prepared import VERSION, Prepared, Preparer
from services.retriever.source_tables import SourceTables
from services.retriever.store import ItemRecord, SearchFilter, StoreInfo, VectorStore

log = logging.getLogger(__name__)


class Retriever:
    def __init__(self, settings: RetrieverSettings, generations: Generations) -> None:
        self.settings = settings
        self.generations = generations
        self.current: VectorStore | None = None
        self.schema = CatalogueSchema({})
        self.artifact_version = ""
        self.items_sha256 = ""  # the current generation's vector space
        self.prepared: Prepared | None = None  # a retrained model's generation, while held
        self._write_lock = asyncio.Lock()
        self._refresh_lock = asyncio.Lock()
        # Generations being built, by the model version they are for: writes
        # meanwhile are journaled and replayed before they serve.
        self._journals: list[tuple[str, Journal]] = []
        # Every write applied, numbered, for followers (change_feed.py), and
        # where each generation's own writes start in it.
        self.feed = ChangeFeed(generations.state_dir / "feed", kept=not settings.qdrant_url)
        self.from_seqs: dict[str, int] = {}
        self.writer = ""  # on a follower: where writes go instead (read-only here)
        self._digests: dict[str, str] = {}  # model version -> its item vectors' checksum
        self.preparer = Preparer(self)
        root = artifacts.artifacts_root(settings.data_dir)
        self.sources = SourceTables(lambda version: root / version)
        self.catalogue_log = CatalogueLog(settings.data_dir)  # the next build's catalogue

    # -- lifecycle -----------------------------------------------------------

    def open_current(self) -> bool:
        state = self.generations.state()
        if "generation" not in state:
            return False
        recorded = Recorded.of(state)
        self.current = self.generations.open(recorded.generation, recorded.dimension)
        self.from_seqs[recorded.generation] = recorded.from_seq
        self.artifact_version = recorded.artifact_version
        self.items_sha256 = recorded.items_sha256
        self.schema = CatalogueSchema(dict(state.get("filterable", {})))  # type: ignore[call-overload]
        prepared = self.generations.prepared()
        if prepared is not None:
            store = self.generations.open(prepared.generation, prepared.dimension)
            self.from_seqs[prepared.generation] = prepared.from_seq
            self.prepared = Prepared(
                prepared.artifact_version,
                prepared.items_sha256,
                prepared.dimension,
                store,
                prepared.at,
            )
        return True

    @property
    def ready(self) -> bool:
        return self.current is not None

    def _store(self) -> VectorStore:
        if self.current is None:
            raise FailedPrecondition("no item collection loaded yet")
        return self.current

    def _store_for(self, model_version: str) -> VectorStore:
        """The prepared version's generation for its own vectors, else the
        current one, unless the version's item vectors are another space
        that is not served here (not prepared, or dropped when its rollout
        ended): searched in the current space its vector would find noise,
        so the search is refused and the caller answers with its fallback."""
        prepared = self.prepared
        if (
            model_version
            and prepared is not None
            and prepared.version == model_version
            and prepared.store is not None
        ):
            return prepared.store
        store = self._store()
        if model_version and model_version != self.artifact_version:
            digest = self._items_digest_of(model_version)
            if digest and self.items_sha256 and digest != self.items_sha256:
                raise FailedPrecondition(
                    f"model_version: the items of {model_version} are not served here "
                    "(not prepared, or its rollout has ended)"
                )
        return store

    def _items_digest_of(self, version: str) -> str:
        """A version's item vectors' checksum from its manifest ("" when it
        has no readable artifact here), read once per version."""
        known = self._digests.get(version)
        if known is not None:
            return known
        digest = ""
        if VERSION.fullmatch(version):  # a name under artifacts/, never a path
            root = artifacts.artifacts_root(self.settings.data_dir)
            digest = artifacts.read_items_checksum(root / version)
        if len(self._digests) >= 256:
            self._digests.clear()
        self._digests[version] = digest
        return digest

    async def refresh_from_artifacts(self) -> bool:
        """Serves the current model artifact's items if they are not served:
        a new generation, or the prepared one when the artifact is the
        prepared version (a promoted rollout), or the same generation when
        its item vectors are the current's (a copy of it)."""
        pointer = artifacts.artifacts_root(self.settings.data_dir) / "CURRENT"
        if not pointer.exists():
            return False
        version = pointer.read_text().strip()
        if version == self.artifact_version and self.current is not None:
            return False
        directory = await asyncio.to_thread(artifacts.current, self.settings.data_dir)
        schema = CatalogueSchema.load(directory)
        manifest = json.loads((directory / artifacts.MANIFEST).read_text())  # verified
        digest = artifacts.items_checksum(manifest)
        async with self._write_lock:
            store = self._adoptable(version, digest)
            if store is not None:
                self._switch(store, version, schema, digest)
                return True
        await self.refresh(directory / "item_vectors.parquet", version, schema, digest)
        return True

    def _adoptable(self, version: str, digest: str) -> VectorStore | None:
        """A generation that already holds ``version``'s items, if any."""
        if self.current is not None and digest and digest == self.items_sha256:
            return self.current
        prepared = self.prepared
        if prepared is not None and prepared.store is not None and prepared.version == version:
            self.prepared = None
            return prepared.store
        return None

    def _switch(
        self, store: VectorStore, version: str, schema: CatalogueSchema, digest: str
    ) -> None:
        """``store`` serves from now on (under the write lock); the old one goes."""
        old, self.current = self.current, store
        from_seq = self.from_seqs.get(store.generation, 0)
        self.generations.publish(store, version, schema, digest, from_seq)
        self.artifact_version, self.schema, self.items_sha256 = version, schema, digest
        if old is not None and old is not store:
            old.close()
            old.drop()
        self.trim_feed()
        log.info(
            "switched generation",
            extra={"fields": {"generation": store.generation, "artifact": version}},
        )

    async def refresh(
        self,
        items_path: Path,
        artifact_version: str,
        schema: CatalogueSchema,
        items_sha256: str = "",
    ) -> str:
        async with self._refresh_lock:
            store = await self.build_journaled(
                artifact_version,
                items_path,
                schema,
                lambda built: self._switch(built, artifact_version, schema, items_sha256),
            )
            return store.generation

    async def build_journaled(
        self,
        version: str,
        items_path: Path,
        schema: CatalogueSchema,
        install: Callable[[VectorStore], None],
        journal: Journal | None = None,
    ) -> VectorStore:
        """A new generation of ``version``'s items (the caller holds the
        refresh lock). Writes that arrive while it is built are journaled
        (in ``journal`` when the caller started one earlier: ``journal_from_now``);
        under the write lock they are replayed into it and ``install`` puts
        it in service, so no acknowledged write misses it."""
        name = self.generations.next_name()
        if journal is None:
            journal = self.journal_from_now(version)
        try:
            store = await asyncio.to_thread(self.generations.build, name, items_path, schema)
        except BaseException:
            self.forget_journal(journal)
            raise
        async with self._write_lock:
            try:
                for write in journal:
                    write.apply(store, version)
            finally:
                self.forget_journal(journal)
            self.from_seqs[store.generation] = journal.from_seq
            install(store)
        return store

    def journal_from_now(self, version: str) -> Journal:
        """Every write from now on, kept for a generation of ``version`` to be built."""
        journal = Journal(self.feed.last_seq)
        self._journals.append((version, journal))
        return journal

    def forget_journal(self, journal: Journal) -> None:
        self._journals = [e for e in self._journals if e[1] is not journal]

    def trim_feed(self) -> None:
        """The feed keeps what the generations held or being built replay."""
        prepared = self.prepared.store if self.prepared is not None else None
        held = {s.generation for s in (self.current, prepared) if s is not None}
        self.from_seqs = {g: n for g, n in self.from_seqs.items() if g in held}
        starts = [*self.from_seqs.values(), *(j.from_seq for _, j in self._journals)]
        if starts and not self.writer:
            self.feed.trim(min(starts))

    def close(self) -> None:
        """Closes the stores (once: a second call does nothing)."""
        self.feed.close()
        current, self.current = self.current, None
        if current is not None:
            current.close()
        prepared, self.prepared = self.prepared, None
        if prepared is not None and prepared.store is not None:
            prepared.store.close()

    # -- reads ---------------------------------------------------------------

    def _k(self, k: int) -> int:
        if not 1 <= k <= self.settings.max_k:
            raise InvalidArgument("k", f"must be between 1 and {self.settings.max_k}, got {k}")
        return k

    def _ef(self, ef: int, k: int) -> int:
        if ef < 0 or ef > 4096:
            raise InvalidArgument("ef", "must be between 0 (server default) and 4096")
        return max(ef or self.settings.search_ef, k)

    def search(
        self,
        vector: Sequence[float] | bytes,
        k: int,
        flt: SearchFilter,
        ef: int = 0,
        field: str = "vector",
        model_version: str = "",
    ) -> tuple[list[tuple[str, float]], str]:
        store = self._store_for(model_version)
        query = check_vector(vector, store.dimension, field)
        if not math.isfinite(float(np.linalg.norm(query))) or not query.any():
            raise InvalidArgument(field, "must not be all zeros")
        check_filter(flt, self.schema)
        k = self._k(k)
        return store.search(query, k, flt, self._ef(ef, k)), store.generation

    def sources_for(self, model_version: str) -> tuple[Sources | None, VectorStore]:
        """The candidate sources of the artifact that searches for this
        version (the prepared one's for its own), and its store."""
        prepared = self.prepared
        own = bool(model_version) and prepared is not None and prepared.version == model_version
        version = model_version if own else self.artifact_version
        return self.sources.of(version), self._store_for(model_version)

    def similar(
        self, item_id: str, k: int, flt: SearchFilter
    ) -> tuple[list[tuple[str, float]], str]:
        check_id(item_id, "item_id")
        check_filter(flt, self.schema)
        k = self._k(k)
        store = self._store()
        vector = store.vector_of(item_id)
        if vector is None:
            raise NotFound(f"item {item_id!r} is not in the collection")
        without_self = dataclasses.replace(flt, exclude_item_ids=(*flt.exclude_item_ids, item_id))
        return store.search(vector, k, without_self, self._ef(0, k)), store.generation

    def items(self, item_ids: Sequence[str]) -> list[dict[str, object]]:
        """The stored payloads of the items the index holds, in request order."""
        if len(item_ids) > self.settings.max_upsert_batch:
            raise InvalidArgument("item_ids", f"at most {self.settings.max_upsert_batch} per call")
        check_ids(item_ids, "item_ids")
        wanted = list(dict.fromkeys(item_ids))
        found = self._store().payloads(wanted)
        return [found[i] for i in wanted if i in found]

    def info(self) -> StoreInfo:
        return self._store().info()

    @property
    def dimension(self) -> int:
        return self._store().dimension

    # -- writes --------------------------------------------------------------

    def to_records(self, raw: Sequence[ItemInput]) -> list[ItemRecord]:
        """Checks a whole batch before anything of it is applied."""
        limit = self.settings.max_upsert_batch
        return check_items(raw, self._store().dimension, self.schema, limit)

    def spaces(self) -> list[tuple[str, int]]:
        """(model version, dimension) of every generation a write goes to:
        the current one, and the prepared version's (ready or being built);
        an upsert's items without a vector are embedded once for each."""
        out = [(self.artifact_version, self._store().dimension)]
        prepared = self.prepared
        if prepared is not None and prepared.version != self.artifact_version:
            out.append((prepared.version, prepared.dimension))
        return out

    async def _write(self, write: Write) -> int:
        if self.writer:
            raise FailedPrecondition(f"this retriever follows {self.writer}: send writes there")
        async with self._write_lock:
            prepared = self.prepared
            if (
                write.kind == "upsert"
                and prepared is not None
                and prepared.version != self.artifact_version
                and prepared.version not in write.by_version
            ):
                # Prepared while this upsert's items were embedded: it has no
                # items in that version's space. Nothing is written; a retry
                # embeds for every generation.
                raise Unavailable(
                    f"model version {prepared.version} began preparing while these items "
                    "were embedded; send them again"
                )
            count = write.apply(self._store(), self.artifact_version)
            if prepared is not None and prepared.store is not None:
                write.apply(prepared.store, prepared.version)
            seq = self.feed.stamp()  # in the order applied, journals kept from it on
            for _, journal in self._journals:
                journal.append(write)
            await asyncio.to_thread(self._record, seq, write)  # on disk before the reply
            return count

    def _record(self, seq: int, write: Write) -> None:
        try:
            self.catalogue_log.record(write)
        finally:  # the index applied it: followers must get it, now or after a retry
            self.feed.append(seq, write)

    async def upsert(self, by_version: Mapping[str, Sequence[ItemRecord]]) -> int:
        """Items as each generation's model version has them (``spaces``)."""
        items = by_version.get(self.artifact_version) or next(iter(by_version.values()))
        return await self._write(Write("upsert", items=items, by_version=dict(by_version)))

    async def delete(self, item_ids: Sequence[str], hard: bool) -> int:
        if not item_ids:
            raise InvalidArgument("item_ids", "is empty")
        if len(item_ids) > self.settings.max_upsert_batch:
            raise InvalidArgument("item_ids", f"at most {self.settings.max_upsert_batch} per call")
        check_ids(item_ids, "item_ids")
        return await self._write(Write("hard" if hard else "soft", ids=list(item_ids)))
