"""The retriever's domain: validated search and writes over the current
generation, and bulk refresh into a new generation with an atomic switch.

Searches run on the event-loop thread against ``self.current``; a refresh
builds the next generation in a worker thread while journaling the writes
that arrive meanwhile, replays them into the new generation under the write
lock, then swaps ``self.current``. No search ever sees a half-built or empty
collection, and no acknowledged write is lost by the switch.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from recserve_kit.errors import FailedPrecondition, InvalidArgument, NotFound
from recserve_kit.validation import check_id
from recserve_model import artifacts
from recserve_model.catalogue import CatalogueSchema
from services.retriever.checks import ItemInput, check_filter, check_item, check_vector
from services.retriever.config import RetrieverSettings
from services.retriever.store import ItemRecord, SearchFilter, StoreInfo, VectorStore

log = logging.getLogger(__name__)

LOAD_BATCH = 2000


@dataclass
class Write:
    """A journaled write, replayed into a generation being built."""

    kind: str  # "upsert" | "soft" | "hard"
    items: Sequence[ItemRecord] = ()
    ids: Sequence[str] = ()

    def apply(self, store: VectorStore) -> int:
        if self.kind == "upsert":
            store.upsert(self.items)
            return len(self.items)
        if self.kind == "soft":
            return store.soft_delete(self.ids)
        return store.hard_delete(self.ids)


class Generations:
    """Creates, opens, publishes and removes generations of one backend.

    The current generation and the artifact it came from are recorded in
    ``state.json`` (written atomically), next to the Edge shards.
    """

    def __init__(
        self,
        state_dir: Path,
        create: Callable[[str, int], VectorStore],
        open_: Callable[[str, int], VectorStore],
        publish: Callable[[VectorStore], None] = lambda store: None,
    ) -> None:
        self.state_dir = state_dir
        self.create = create
        self.open = open_
        self.publish_hook = publish
        state_dir.mkdir(parents=True, exist_ok=True)

    @property
    def state_path(self) -> Path:
        return self.state_dir / "state.json"

    def state(self) -> dict[str, object]:
        if not self.state_path.exists():
            return {}
        return dict(json.loads(self.state_path.read_text()))

    def next_name(self) -> str:
        last = str(self.state().get("generation", "g0000"))
        return f"g{int(last[1:]) + 1:04d}"

    def publish(self, store: VectorStore, artifact_version: str, schema: CatalogueSchema) -> None:
        self.publish_hook(store)
        state = {
            "generation": store.generation,
            "dimension": store.dimension,
            "artifact_version": artifact_version,
            "filterable": dict(schema.attributes),
        }
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, self.state_path)


def read_items(path: Path) -> tuple[list[ItemRecord], int]:
    """The artifact's items; ``attributes`` (JSON, already in payload form)
    is absent from artifacts built before the catalogue schema."""
    table = pq.read_table(path).to_pydict()
    vectors = np.asarray(table["vector"], dtype=np.float32)
    attributes = [json.loads(a) for a in table.get("attributes", [])] or [{}] * len(vectors)
    records = [
        ItemRecord(
            item_id=str(table["item_id"][i]),
            vector=vectors[i],
            categories=tuple(table["categories"][i] or ()),
            active=bool(table["active"][i]),
            title=str(table["title"][i] or ""),
            year=int(table["year"][i] or 0),
            attributes=attributes[i],
        )
        for i in range(len(vectors))
    ]
    return records, int(vectors.shape[1])


class Retriever:
    def __init__(self, settings: RetrieverSettings, generations: Generations) -> None:
        self.settings = settings
        self.generations = generations
        self.current: VectorStore | None = None
        self.schema = CatalogueSchema({})
        self.artifact_version = ""
        self._write_lock = asyncio.Lock()
        self._refresh_lock = asyncio.Lock()
        self._journal: list[Write] | None = None

    # -- lifecycle -----------------------------------------------------------

    def open_current(self) -> bool:
        state = self.generations.state()
        if "generation" not in state:
            return False
        self.current = self.generations.open(str(state["generation"]), int(str(state["dimension"])))
        self.artifact_version = str(state.get("artifact_version", ""))
        self.schema = CatalogueSchema(dict(state.get("filterable", {})))  # type: ignore[call-overload]
        return True

    @property
    def ready(self) -> bool:
        return self.current is not None

    def _store(self) -> VectorStore:
        if self.current is None:
            raise FailedPrecondition("no item collection loaded yet")
        return self.current

    async def refresh_from_artifacts(self) -> bool:
        """Loads the current model artifact's items if it is not the one served."""
        pointer = artifacts.artifacts_root(self.settings.data_dir) / "CURRENT"
        if not pointer.exists():
            return False
        version = pointer.read_text().strip()
        if version == self.artifact_version and self.current is not None:
            return False
        directory = await asyncio.to_thread(artifacts.current, self.settings.data_dir)
        schema = CatalogueSchema.load(directory)
        await self.refresh(directory / "item_vectors.parquet", version, schema)
        return True

    async def refresh(
        self, items_path: Path, artifact_version: str, schema: CatalogueSchema
    ) -> str:
        async with self._refresh_lock:
            name = self.generations.next_name()
            self._journal = []
            try:
                store = await asyncio.to_thread(self._build, name, items_path, schema)
            except BaseException:
                self._journal = None
                raise
            async with self._write_lock:
                for write in self._journal:
                    write.apply(store)
                self._journal = None
                old, self.current = self.current, store
                self.generations.publish(store, artifact_version, schema)
                self.artifact_version = artifact_version
                self.schema = schema
            if old is not None:
                old.close()
                old.drop()
            log.info(
                "switched generation",
                extra={"fields": {"generation": name, "artifact": artifact_version}},
            )
            return name

    def _build(self, name: str, items_path: Path, schema: CatalogueSchema) -> VectorStore:
        records, dimension = read_items(items_path)
        store = self.generations.create(name, dimension)
        try:
            store.index_attributes(schema)
            for start in range(0, len(records), LOAD_BATCH):
                store.upsert(records[start : start + LOAD_BATCH])
            store.build_index()
        except BaseException:
            store.close()
            store.drop()  # the next attempt starts clean
            raise
        log.info("built generation", extra={"fields": {"generation": name, "items": len(records)}})
        return store

    def close(self) -> None:
        if self.current is not None:
            self.current.close()

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
    ) -> tuple[list[tuple[str, float]], str]:
        store = self._store()
        query = check_vector(vector, store.dimension, field)
        if not math.isfinite(float(np.linalg.norm(query))) or not query.any():
            raise InvalidArgument(field, "must not be all zeros")
        check_filter(flt, self.schema)
        k = self._k(k)
        return store.search(query, k, flt, self._ef(ef, k)), store.generation

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
        for n, item_id in enumerate(item_ids):
            check_id(item_id, f"item_ids[{n}]")
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
        store = self._store()
        if not raw:
            raise InvalidArgument("items", "is empty")
        if len(raw) > self.settings.max_upsert_batch:
            raise InvalidArgument("items", f"at most {self.settings.max_upsert_batch} per call")
        seen: dict[str, int] = {}
        records = []
        for n, item in enumerate(raw):
            if item.item_id in seen:
                raise InvalidArgument(
                    f"items[{n}].item_id", f"duplicates items[{seen[item.item_id]}]"
                )
            seen[item.item_id] = n
            records.append(check_item(item, f"items[{n}]", store.dimension, self.schema))
        return records

    async def _write(self, write: Write) -> int:
        async with self._write_lock:
            count = write.apply(self._store())
            if self._journal is not None:
                self._journal.append(write)
            return count

    async def upsert(self, records: Sequence[ItemRecord]) -> int:
        return await self._write(Write("upsert", items=records))

    async def delete(self, item_ids: Sequence[str], hard: bool) -> int:
        if not item_ids:
            raise InvalidArgument("item_ids", "is empty")
        if len(item_ids) > self.settings.max_upsert_batch:
            raise InvalidArgument("item_ids", f"at most {self.settings.max_upsert_batch} per call")
        for n, item_id in enumerate(item_ids):
            check_id(item_id, f"item_ids[{n}]")
        return await self._write(Write("hard" if hard else "soft", ids=list(item_ids)))
