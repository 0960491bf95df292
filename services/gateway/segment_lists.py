"""A new user's list, chosen for their attributes (the segment lists).

The build writes one list per (gender, age band, occupation) into the
artifact (``cold_start.json``, pipelines/onboarding_model.py); this loads the
current artifact's and follows it as it changes. An artifact from before the
lists has none: new users then get the popular list, as before.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from recserve_model import artifacts
from recserve_model import segments as segment

log = logging.getLogger(__name__)

MAX_AGE = 120
GENDERS = segment.GENDERS


@dataclass(frozen=True)
class Attributes:
    age: int
    gender: str
    occupation: str


class SegmentLists:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.version = ""
        self.lists: dict[str, list[str]] = {}
        self.occupations: frozenset[str] = frozenset()

    def reload(self) -> bool:
        """Reads the current artifact's lists if the artifact changed."""
        pointer = artifacts.artifacts_root(self.data_dir) / "CURRENT"
        if not pointer.exists():
            return False
        version = pointer.read_text().strip()
        if version == self.version:
            return False
        path = artifacts.current(self.data_dir) / segment.FILE  # verified before use
        self.lists = json.loads(path.read_text())["lists"] if path.exists() else {}
        self.occupations = frozenset(k.rsplit("|", 1)[1] for k in self.lists)
        self.version = version
        log.info(
            "loaded cold-start lists",
            extra={"fields": {"source": version, "segments": len(self.lists)}},
        )
        return True

    def items(self, attributes: Attributes) -> list[str]:
        """The segment's item ids, best first; empty when there is no list."""
        occupation = attributes.occupation
        if occupation not in self.occupations:
            occupation = "other"
        return self.lists.get(segment.key(attributes.gender, attributes.age, occupation), [])
