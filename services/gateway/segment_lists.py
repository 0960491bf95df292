"""A new user's list, chosen for their attributes (the segment lists).

The build writes one list per segment of the user attributes the dataset
declares (MovieLens: gender, age band, occupation) into the artifact
(``cold_start.json``, pipelines/onboarding_model.py); this loads the current
artifact's and follows it as it changes. An artifact from before the lists
has none: new users then get the popular list, as before.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from recserve_model import artifacts
from recserve_model import segments as segment

log = logging.getLogger(__name__)

MAX_AGE = 120
GENDERS = segment.GENDERS


@dataclass(frozen=True)
class Attributes:
    """A new user's attributes as the request gives them: MovieLens's typed
    fields, or any declared attribute by name (as text) in ``declared``."""

    age: int = 0
    gender: str = ""
    occupation: str = ""
    declared: tuple[tuple[str, str], ...] = ()

    def values(self) -> dict[str, str]:
        if self.declared:
            return dict(self.declared)
        return {"age": str(self.age), "gender": self.gender, "occupation": self.occupation}


class SegmentLists:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.version = ""
        self.lists: dict[str, list[str]] = {}
        self.attributes: tuple[segment.Attribute, ...] = ()
        self.unused: frozenset[str] = frozenset()  # declared, but in no segment

    def reload(self) -> bool:
        """Reads the current artifact's lists if the artifact changed."""
        pointer = artifacts.artifacts_root(self.data_dir) / "CURRENT"
        if not pointer.exists():
            return False
        version = pointer.read_text().strip()
        if version == self.version:
            return False
        path = artifacts.current(self.data_dir) / segment.FILE  # verified before use
        document = json.loads(path.read_text()) if path.exists() else {}
        self.load(document)
        self.version = version
        log.info(
            "loaded cold-start lists",
            extra={"fields": {"source": version, "segments": len(self.lists)}},
        )
        return True

    def load(self, document: Mapping[str, object]) -> None:
        attributes, unused = segment.read(document)
        self.attributes, self.unused = attributes, frozenset(unused)
        self.lists = dict(document.get("lists", {}))  # type: ignore[call-overload]

    def declared(self) -> list[str]:
        """The user attributes a request may give by name."""
        return sorted({a.name for a in self.attributes} | self.unused)

    def problem(self, name: str, text: str) -> str | None:
        """Why a request's value of a declared attribute is refused, or None."""
        for attribute in self.attributes:
            if attribute.name == name:
                return attribute.problem(text)
        if name in self.unused:
            return None if len(text) <= 256 else "at most 256 characters"
        declared = ", ".join(self.declared()) or "none"
        return f"no user attribute of this catalogue; it declares {declared}"

    def items(self, attributes: Attributes) -> list[str]:
        """The segment's item ids, best first; empty when there is no list
        (none of the segments' attributes given, or no such segment)."""
        key = segment.segment_key(self.attributes, attributes.values())
        return self.lists.get(key, []) if key.strip("|") else []
