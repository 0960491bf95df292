"""Popular items per category: the answer when the full path cannot run.

Loaded from the live nightly re-scoring run's ``popular.json`` when one is
published (``rescoring/PUBLISHED.json``), else from the current artifact's,
and reloaded when either changes (hourly in production).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from recserve_model import artifacts, published
from recserve_model.catalogue import AttributeFilter, CatalogueSchema

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PopularItem:
    item_id: str
    popularity: int
    title: str
    categories: tuple[str, ...]
    attributes: dict[str, object]  # filterable ones, as the retriever stores them

    def passes(self, filters: Sequence[AttributeFilter]) -> bool:
        return all(f.matches(self.attributes.get(f.name)) for f in filters)


class PopularItems:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.version = ""
        self.all: list[PopularItem] = []
        self.by_category: dict[str, list[PopularItem]] = {}
        self.by_id: dict[str, PopularItem] = {}
        # The current artifact's filterable attributes: what a filter may name.
        self.schema = CatalogueSchema({})

    def _source(self) -> tuple[str, Path] | None:
        """(version, file) of the lists to serve: the live run's, else the artifact's."""
        live = published.live_run(self.data_dir)
        if live is not None:
            run_id = str(live["run_id"])
            return f"rescore:{run_id}", published.run_dir(self.data_dir, run_id) / "popular.json"
        pointer = artifacts.artifacts_root(self.data_dir) / "CURRENT"
        if not pointer.exists():
            return None
        version = pointer.read_text().strip()
        return version, artifacts.artifacts_root(self.data_dir) / version / "popular.json"

    def reload(self) -> bool:
        """Reads the lists if their source changed."""
        source = self._source()
        if source is None or source[0] == self.version:
            return False
        version, path = source
        if not version.startswith("rescore:"):
            artifacts.current(self.data_dir)  # verified before use
        raw = json.loads(path.read_text())

        def parse(entries: Iterable[dict[str, object]]) -> list[PopularItem]:
            return [
                PopularItem(
                    str(e["item_id"]),
                    int(e["popularity"]),  # type: ignore[call-overload]
                    str(e["title"]),
                    tuple(e["categories"]),  # type: ignore[arg-type]
                    dict(e.get("attributes") or {}),  # type: ignore[call-overload]
                )
                for e in entries
            ]

        self.all = parse(raw["all"])
        self.by_category = {c: parse(v) for c, v in raw["by_category"].items()}
        lists = [self.all, *self.by_category.values()]
        self.by_id = {item.item_id: item for items in lists for item in items}
        self.version = version
        root = artifacts.artifacts_root(self.data_dir)
        self.schema = CatalogueSchema.load(root / (root / "CURRENT").read_text().strip())
        log.info("loaded popular lists", extra={"fields": {"source": version}})
        return True

    def describe(self, item_id: str) -> PopularItem | None:
        """Title and categories, for the items these lists know."""
        return self.by_id.get(item_id)

    @property
    def loaded(self) -> bool:
        return bool(self.all)

    def top(
        self,
        k: int,
        categories: Sequence[str] = (),
        exclude: Iterable[str] = (),
        attributes: Sequence[AttributeFilter] = (),
    ) -> list[PopularItem]:
        """The k most popular that pass the filters: of the lists' top items
        only, so a narrow attribute filter may leave fewer than k."""
        blocked = set(exclude)
        if categories:
            pool: dict[str, PopularItem] = {}
            for category in categories:
                for item in self.by_category.get(category, ()):
                    pool[item.item_id] = item
            ranked = sorted(pool.values(), key=lambda i: (-i.popularity, i.item_id))
        else:
            ranked = self.all
        passing = (i for i in ranked if i.item_id not in blocked and i.passes(attributes))
        return [i for _, i in zip(range(k), passing, strict=False)]
