"""Segments of new users (no history, known attributes), shared by the build
that writes their lists (pipelines/onboarding_model.py) and the gateway that serves
them: ``<artifact>/cold_start.json``.

A segment is one value (or "not given") of each of the user attributes the
dataset declares that segments can use: categorical and boolean ones by
value, numeric ones by band. Its key joins one token per attribute with
``|``, in the file's attribute order; the empty token is "not given".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

# The age bands MovieLens-1M uses; a segment is served at its middle age.
AGE_BANDS = (0, 18, 25, 35, 45, 50, 56, 120)
GENDERS = ("F", "M")
FILE = "cold_start.json"
OTHER = "other"  # where a dataset has it, the token of a value the build never saw
BOOLEAN = ("false", "true")


def band(value: float, edges: tuple[float, ...] = AGE_BANDS) -> int:
    """The index of the band holding ``value`` (the outer bands take the rest)."""
    index = int(np.searchsorted(edges, value, side="right")) - 1
    return max(0, min(len(edges) - 2, index))


def band_age(index: int) -> float:
    return (AGE_BANDS[index] + AGE_BANDS[index + 1]) / 2


def key(gender: str, age: float, occupation: str) -> str:
    """A MovieLens segment's key (gender, age, occupation, every one given)."""
    return f"{gender}|{band(age)}|{occupation}"


@dataclass(frozen=True)
class Attribute:
    """One user attribute segments use: categorical (``values``, booleans as
    "false"/"true") or numeric (band ``edges``, lowest first)."""

    name: str
    values: tuple[str, ...] = ()
    edges: tuple[float, ...] = ()

    @property
    def numeric(self) -> bool:
        return bool(self.edges)

    @property
    def tokens(self) -> tuple[str, ...]:
        """Every token of a given value, in one-hot column order."""
        if self.numeric:
            return tuple(str(i) for i in range(len(self.edges) - 1))
        return self.values

    def token(self, value: str | float | None) -> str:
        """A value's token; "" for a value not given (None, "", NaN, pandas' NA)."""
        try:
            missing = value is None or value != value or value == ""  # NaN != NaN
        except TypeError:  # pandas' NA is neither equal nor unequal to anything
            missing = True
        if missing:
            return ""
        if self.numeric and value is not None:  # not missing: never None here
            return str(band(float(value), self.edges))
        text = str(value).lower() if isinstance(value, bool | np.bool_) else str(value)
        if text in self.values:
            return text
        return OTHER if OTHER in self.values else ""

    def problem(self, text: str) -> str | None:
        """Why ``text`` is no value of this attribute, as a request gives it."""
        if self.numeric:
            try:
                number = float(text)
            except ValueError:
                return f"must be a number, got {text[:64]!r}"
            return None if math.isfinite(number) else f"must be finite, got {text[:64]!r}"
        if self.values == BOOLEAN and text not in BOOLEAN:
            return f"must be true or false, got {text[:64]!r}"
        return None if 1 <= len(text) <= 64 else "must be 1 to 64 characters"

    def to_json(self) -> dict[str, Any]:
        if self.numeric:
            return {"name": self.name, "edges": list(self.edges)}
        return {"name": self.name, "values": list(self.values)}

    @classmethod
    def from_json(cls, entry: Mapping[str, Any]) -> Attribute:
        edges = tuple(float(e) for e in entry.get("edges", ()))
        return cls(entry["name"], tuple(entry.get("values", ())), edges)


def segment_key(attributes: tuple[Attribute, ...], values: Mapping[str, str | float]) -> str:
    """The key of the segment these values fall in ("" tokens for the rest)."""
    return "|".join(a.token(values.get(a.name)) for a in attributes)


def read(document: Mapping[str, Any]) -> tuple[tuple[Attribute, ...], tuple[str, ...]]:
    """The attributes of a cold_start.json, and the declared user attributes
    the segments leave out. A file from before declared attributes holds
    MovieLens's three: its occupations are read off its keys."""
    if "attributes" in document:
        attributes = tuple(Attribute.from_json(a) for a in document["attributes"])
        return attributes, tuple(document.get("unused", ()))
    occupations = sorted({k.rsplit("|", 1)[1] for k in document.get("lists", {})})
    edges = tuple(float(e) for e in document.get("age_bands", AGE_BANDS))
    legacy = (
        Attribute("gender", GENDERS),
        Attribute("age", edges=edges),
        Attribute("occupation", tuple(occupations)),
    )
    return legacy, ()
