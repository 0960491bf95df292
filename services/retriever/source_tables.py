"""Each artifact version's candidate sources table (``recserve_model.sources``),
read once when a search first needs it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from recserve_model.sources import Sources

log = logging.getLogger(__name__)
KEPT_VERSIONS = 4  # artifacts' tables held at once (the current, a prepared one, rollbacks)


class SourceTables:
    """Each artifact version's sources table, loaded when asked for first."""

    def __init__(self, artifact_dir: Callable[[str], Path]) -> None:
        self.artifact_dir = artifact_dir
        self.tables: dict[str, Sources | None] = {}

    def of(self, version: str) -> Sources | None:
        if version not in self.tables:
            if len(self.tables) >= KEPT_VERSIONS:
                self.tables.pop(next(iter(self.tables)))
            table = Sources.load(self.artifact_dir(version)) if version else None
            self.tables[version] = table
            if table is not None:
                log.info(
                    "candidate sources loaded",
                    extra={"fields": {"artifact": version, "model": table.model}},
                )
        return self.tables[version]
