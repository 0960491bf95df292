"""The catalogue's filterable attributes: what a filter may name and how an
item's value is stored, shared by the build that writes them
(``<artifact>/catalogue.json``, from the dataset's declared columns), the
retriever that indexes and matches them, and the gateway that checks a
caller's filter at the edge.

An item's attributes live in the retriever's payload under ``attrs``:
categorical, tags and boolean values as keywords (booleans as "true" and
"false": qdrant-edge sends a bool match as the integer 1, which never
matches), numeric ones as floats.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

FILE = "catalogue.json"
PAYLOAD_KEY = "attrs"
KINDS = ("categorical", "tags", "numeric", "boolean")
KEYWORD_KINDS = ("categorical", "tags", "boolean")
MAX_FILTERS = 16
MAX_VALUES = 1000
BOOLEAN_WORDS = ("true", "false")

AttributeValue = str | float | bool | Sequence[str]


@dataclass(frozen=True)
class AttributeFilter:
    """One condition: any-of for keyword kinds, an inclusive range for numeric."""

    name: str
    any_of: tuple[str, ...] = ()
    min: float | None = None
    max: float | None = None

    @classmethod
    def from_message(cls, message: Any) -> AttributeFilter:
        """From the public or the retriever's AttributeFilter message (same fields)."""
        return cls(
            message.name,
            tuple(message.any_of),
            message.min if message.HasField("min") else None,
            message.max if message.HasField("max") else None,
        )

    def matches(self, value: object) -> bool:
        """Whether an item's stored value (``stored_value``'s form) passes."""
        if value is None:
            return False
        if self.any_of:
            values = value if isinstance(value, list | tuple) else [value]
            return any(v in self.any_of for v in values)
        number = float(value)  # type: ignore[arg-type]
        return (self.min is None or number >= self.min) and (self.max is None or number <= self.max)


@dataclass(frozen=True)
class EventKind:
    """An event type the dataset declares: what app backends may send."""

    role: str  # positive, negative, exposure, rating
    weight: float = 1.0
    has_value: bool = False  # the event carries a value (a rating's 1-5)
    min: float | None = None
    max: float | None = None

    def value_problem(self, value: float) -> str | None:
        if not self.has_value:
            return "this event type has no value: leave it 0" if value else None
        if not math.isfinite(value):
            return "must be a finite number"
        if (self.min is not None and value < self.min) or (
            self.max is not None and value > self.max
        ):
            return f"must be between {self.min:g} and {self.max:g}, got {value:g}"
        return None


@dataclass(frozen=True)
class CatalogueSchema:
    attributes: Mapping[str, str]  # name -> kind, one of KINDS
    event_types: Mapping[str, EventKind] = field(default_factory=dict)

    @classmethod
    def load(cls, artifact_dir: Path) -> CatalogueSchema:
        """The artifact's schema; an artifact built before it has none."""
        path = artifact_dir / FILE
        if not path.exists():
            return cls({})
        raw = json.loads(path.read_text())
        events = {n: EventKind(**e) for n, e in raw.get("event_types", {}).items()}
        return cls(dict(raw["filterable"]), events)

    def save(self, artifact_dir: Path) -> None:
        events = {n: dataclasses.asdict(e) for n, e in sorted(self.event_types.items())}
        text = json.dumps(
            {"filterable": dict(sorted(self.attributes.items())), "event_types": events}, indent=2
        )
        (artifact_dir / FILE).write_text(text)

    def describe(self) -> str:
        return ", ".join(f"{n} ({k})" for n, k in sorted(self.attributes.items())) or "none"

    def filters_problem(self, filters: Sequence[AttributeFilter]) -> tuple[str, str] | None:
        """(the field under ``filter.attributes``, what is wrong) for the
        first bad condition of a request, or None: one rule for every edge."""
        if len(filters) > MAX_FILTERS:
            return "", f"at most {MAX_FILTERS} conditions"
        for n, condition in enumerate(filters):
            problem = self.filter_problem(condition)
            if problem is not None:
                return f"[{n}].{problem[0]}", problem[1]
        return None

    def filter_problem(self, flt: AttributeFilter) -> tuple[str, str] | None:
        """(the field within the filter, what is wrong), or None when valid."""
        kind = self.attributes.get(flt.name)
        if kind is None:
            known = self.describe()
            return "name", f"{flt.name!r} is not a filterable attribute (filterable: {known})"
        bounded = flt.min is not None or flt.max is not None
        if kind == "numeric":
            if flt.any_of:
                return "any_of", f"{flt.name} is numeric: filter it with min and max"
            if not bounded:
                return "min", f"{flt.name} is numeric: give min, max or both"
            for field, bound in (("min", flt.min), ("max", flt.max)):
                if bound is not None and not math.isfinite(bound):
                    return field, "must be a finite number"
            if flt.min is not None and flt.max is not None and flt.min > flt.max:
                return "max", f"{flt.max:g} is below min {flt.min:g}"
            return None
        if bounded:
            return "min", f"{flt.name} is {kind}: filter it with any_of"
        if not flt.any_of:
            return "any_of", f"{flt.name} is {kind}: give at least one value"
        if len(flt.any_of) > MAX_VALUES:
            return "any_of", f"at most {MAX_VALUES} values"
        if any(not v for v in flt.any_of):
            return "any_of", "empty value"
        if kind == "boolean" and not set(flt.any_of) <= set(BOOLEAN_WORDS):
            return "any_of", f"{flt.name} is boolean: the values are 'true' and 'false'"
        return None

    def stored_value(self, name: str, value: object) -> object | None:
        """How the payload holds one attribute value; None for a missing one.
        ValueError when the value does not fit the attribute's kind."""
        kind = self.attributes[name]
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return None
        if kind == "numeric":
            if isinstance(value, bool | np.bool_ | str):
                raise ValueError(f"{name} is numeric, not {value!r}")
            number = float(value)  # type: ignore[arg-type]
            if not math.isfinite(number):
                raise ValueError(f"{name} must be finite")
            return number
        if kind == "boolean":
            if isinstance(value, str) and value in BOOLEAN_WORDS:
                return value
            if not isinstance(value, bool | np.bool_):
                raise ValueError(f"{name} is boolean, not {value!r}")
            return "true" if value else "false"
        if kind == "tags":
            if isinstance(value, str):
                raise ValueError(f"{name} is a list of tags, not one string")
            return [str(v) for v in value]  # type: ignore[attr-defined]
        if not isinstance(value, str):
            raise ValueError(f"{name} is categorical: a string, not {value!r}")
        return value

    def stored(self, values: Mapping[str, object]) -> dict[str, object]:
        """An item's payload attributes: the declared ones it has."""
        unknown = sorted(set(values) - set(self.attributes))
        if unknown:
            raise ValueError(f"{unknown[0]!r} is not a filterable attribute ({self.describe()})")
        out = {}
        for name, value in values.items():
            stored = self.stored_value(name, value)
            if stored is not None:
                out[name] = stored
        return out


NO_ATTRIBUTES = CatalogueSchema({})


def changes_dir(data_dir: Path) -> Path:
    """Where the retriever keeps the catalogue changes it acknowledged
    (services/retriever/catalogue_log.py) and ``pipelines snapshot`` reads
    them: one JSON Lines record per changed item."""
    return data_dir / "events" / "catalogue"
