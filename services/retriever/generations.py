"""The retriever's generations: each a collection built from one artifact's
items, recorded in ``state.json`` beside the stores (the current one and, while
a retrained model is rolled out, the prepared one), and the journaled
writes replayed into a generation being built."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from recserve_model.catalogue import CatalogueSchema
from services.retriever.store import ItemRecord, VectorStore

LOAD_BATCH = 2000
log = logging.getLogger(__name__)


@dataclass
class Write:
    """A journaled write, replayed into a generation being built.
    ``by_version``: an upsert's items as each model version's item tower
    embedded the ones sent without a vector (``items``: the current's)."""

    kind: str  # "upsert" | "soft" | "hard"
    items: Sequence[ItemRecord] = ()
    ids: Sequence[str] = ()
    by_version: dict[str, Sequence[ItemRecord]] = field(default_factory=dict)

    def apply(self, store: VectorStore, version: str = "") -> int:
        if self.kind == "upsert":
            store.upsert(self.by_version.get(version, self.items))
            return len(self.items)
        if self.kind == "soft":
            return store.soft_delete(self.ids)
        return store.hard_delete(self.ids)


class Journal(list[Write]):
    """The writes kept for a generation being built: those after the
    change feed's ``from_seq`` (change_feed.py)."""

    def __init__(self, from_seq: int = 0) -> None:
        super().__init__()
        self.from_seq = from_seq


@dataclass(frozen=True)
class Recorded:
    """One generation as ``state.json`` records it."""

    generation: str
    dimension: int
    artifact_version: str
    items_sha256: str = ""  # the artifact's item_vectors.parquet: its vector space
    at: float = 0.0  # when it was asked for (a prepared version)
    from_seq: int = 0  # the change feed's writes after this one are its journal's

    @classmethod
    def of(cls, raw: dict[str, object]) -> Recorded:
        return cls(
            str(raw["generation"]),
            int(str(raw["dimension"])),
            str(raw.get("artifact_version", "")),
            str(raw.get("items_sha256", "")),
            float(str(raw.get("at", 0.0))),
            int(str(raw.get("from_seq", 0))),
        )


class Generations:
    """Creates, opens, publishes and removes generations of one backend.

    The current generation, the artifact it came from and, while one is
    held, the prepared model version's generation are recorded in
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

    def prepared(self) -> Recorded | None:
        raw = self.state().get("prepared")
        return Recorded.of(raw) if isinstance(raw, dict) else None

    def next_name(self) -> str:
        """After every generation recorded (the prepared one's too)."""
        state = self.state()
        names = [str(state.get("generation", "g0000"))]
        prepared = self.prepared()
        if prepared is not None:
            names.append(prepared.generation)
        return f"g{max(int(n[1:]) for n in names) + 1:04d}"

    def build(self, name: str, items_path: Path, schema: CatalogueSchema) -> VectorStore:
        """A new generation of the artifact's items, indexed (blocking)."""
        records, dimension = read_items(items_path)
        store = self.create(name, dimension)
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

    def publish(
        self,
        store: VectorStore,
        artifact_version: str,
        schema: CatalogueSchema,
        items_sha256: str,
        from_seq: int = 0,
    ) -> None:
        """``store`` becomes the current generation (the prepared one, if it
        was, is no longer recorded as prepared)."""
        self.publish_hook(store)
        state = self.state()
        prepared = self.prepared()
        self._write(
            {
                "generation": store.generation,
                "dimension": store.dimension,
                "artifact_version": artifact_version,
                "items_sha256": items_sha256,
                "filterable": dict(schema.attributes),
                "from_seq": from_seq,
                **(
                    {"prepared": state["prepared"]}
                    if prepared is not None and prepared.generation != store.generation
                    else {}
                ),
            }
        )

    def record_prepared(self, prepared: Recorded | None) -> None:
        state = {k: v for k, v in self.state().items() if k != "prepared"}
        if prepared is not None:
            state["prepared"] = dataclasses.asdict(prepared)
        self._write(state)

    def _write(self, state: dict[str, object]) -> None:
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
