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

from recserve_model import artifacts

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PopularItem:
    item_id: str
    popularity: int
    title: str
    categories: tuple[str, ...]


class PopularItems:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.version = ""
        self.all: list[PopularItem] = []
        self.by_category: dict[str, list[PopularItem]] = {}

    def _source(self) -> tuple[str, Path] | None:
        """(version, file) of the lists to serve: the live run's, else the artifact's."""
        published = self.data_dir / "rescoring" / "PUBLISHED.json"
        if published.exists():
            run_id = str(json.loads(published.read_text())["run_id"])
            run_dir = self.data_dir / "rescoring" / "runs" / run_id
            return f"rescore:{run_id}", run_dir / "popular.json"
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
                )
                for e in entries
            ]

        self.all = parse(raw["all"])
        self.by_category = {c: parse(v) for c, v in raw["by_category"].items()}
        self.version = version
        log.info("loaded popular lists", extra={"fields": {"source": version}})
        return True

    @property
    def loaded(self) -> bool:
        return bool(self.all)

    def top(
        self, k: int, categories: Sequence[str] = (), exclude: Iterable[str] = ()
    ) -> list[PopularItem]:
        blocked = set(exclude)
        if categories:
            pool: dict[str, PopularItem] = {}
            for category in categories:
                for item in self.by_category.get(category, ()):
                    pool[item.item_id] = item
            ranked = sorted(pool.values(), key=lambda i: (-i.popularity, i.item_id))
        else:
            ranked = self.all
        return [i for i in ranked if i.item_id not in blocked][:k]
