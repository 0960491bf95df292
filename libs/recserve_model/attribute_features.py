"""Declared attributes as model inputs.

Every categorical, tags, boolean and numeric column a dataset declares for
items or users, beside the ones the encoder has always read (items' year;
users' age, gender and occupation), becomes a few columns of the towers'
and the ranker's feature vectors. The build fits each attribute's encoding
on the catalogue or the users (``fit``) and saves it in ``encoding.json``;
training and serving both encode from the attribute's text form
(``as_text``), the form the features service stores and carries, so the
two can never read a value differently.

- categorical: a column for each of its ``MAX_VALUES`` most frequent
  values, 1 on the value's (an unlisted value sets none);
- tags: the same over the tags, 1 on each listed tag's column;
- boolean: one column, "true" 1, "false" -1, missing 0;
- numeric: two columns, the value standardised (after log1p where no
  value is negative) and clipped to +-5, and 1 when it is present.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

KINDS = ("categorical", "tags", "boolean", "numeric")
MAX_VALUES = 32  # one-hot columns per categorical or tags attribute
TAG_SEPARATOR = "|"  # between a tags value's tags in the text form
CLIP = 5.0

Texts = Mapping[str, str]  # attribute name -> its value as text


@dataclass(frozen=True)
class AttributeFeature:
    """How one declared attribute is encoded (fitted at build time)."""

    name: str
    kind: str  # one of KINDS
    values: tuple[str, ...] = ()  # categorical, tags: the values with a column
    log: bool = False  # numeric: log1p before standardising (no negative value)
    center: float = 0.0
    scale: float = 1.0
    index: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self.index.update({v: i for i, v in enumerate(self.values)})

    @property
    def width(self) -> int:
        if self.kind == "numeric":
            return 2
        if self.kind == "boolean":
            return 1
        return len(self.values)

    def encode(self, text: str | None, out: np.ndarray) -> None:
        """Writes the attribute's columns into ``out`` (zeros: missing)."""
        if not text:
            return
        if self.kind == "numeric":
            number = _number(text)
            if number is None or (self.log and number < 0):
                return
            x = math.log1p(number) if self.log else number
            out[0] = max(-CLIP, min(CLIP, (x - self.center) / self.scale))
            out[1] = 1.0
        elif self.kind == "boolean":
            out[0] = 1.0 if text == "true" else -1.0 if text == "false" else 0.0
        elif self.kind == "tags":
            for tag in text.split(TAG_SEPARATOR):
                column = self.index.get(tag)
                if column is not None:
                    out[column] = 1.0
        else:
            column = self.index.get(text)
            if column is not None:
                out[column] = 1.0

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("index")
        out["values"] = list(self.values)
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> AttributeFeature:
        return cls(**{**raw, "values": tuple(raw.get("values", ()))})


def _number(text: str) -> float | None:
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def as_text(kind: str, value: object) -> str | None:
    """A typed value (as the dataset loader gives it) in the text form the
    features service stores and the encoder reads; None when missing."""
    if value is None:
        return None
    if kind == "tags":
        if isinstance(value, str):
            return value
        tags = [str(v) for v in value if v is not None]  # type: ignore[attr-defined]
        return TAG_SEPARATOR.join(tags) if tags else None
    if isinstance(value, float) and math.isnan(value):
        return None
    if kind == "boolean":
        if isinstance(value, str):
            return value
        return "true" if value else "false"
    if kind == "numeric":
        number = float(value)  # type: ignore[arg-type]
        return repr(int(number)) if number.is_integer() else repr(number)
    return str(value)


def stored_as_text(values: Mapping[str, object]) -> dict[str, str]:
    """The retriever's payload form (``catalogue.CatalogueSchema.stored``:
    keywords, floats, tag lists) as texts; the forms are unambiguous."""
    out = {}
    for name, value in values.items():
        if isinstance(value, str):
            text: str | None = value
        elif isinstance(value, list | tuple):
            text = as_text("tags", value)
        else:
            text = as_text("numeric", value)
        if text is not None:
            out[name] = text
    return out


def texts_json(texts: Texts) -> str:
    """The form Feast stores (one string field): JSON, keys sorted."""
    return json.dumps(dict(sorted(texts.items())), separators=(",", ":"))


def texts_from_json(raw: object) -> dict[str, str]:
    """Feast's stored form back; {} for none or anything not a JSON object."""
    if not raw or raw == "{}":
        return {}
    try:
        value = json.loads(str(raw))
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def fit(name: str, kind: str, texts: Iterable[str | None]) -> AttributeFeature:
    """The attribute's encoding, from every row's text (None: missing)."""
    present = [t for t in texts if t]
    if kind in ("categorical", "tags"):
        counts: dict[str, int] = {}
        for text in present:
            for value in text.split(TAG_SEPARATOR) if kind == "tags" else (text,):
                counts[value] = counts.get(value, 0) + 1
        ranked = sorted(counts, key=lambda v: (-counts[v], v))
        return AttributeFeature(name, kind, tuple(ranked[:MAX_VALUES]))
    if kind == "boolean":
        return AttributeFeature(name, kind)
    numbers = np.asarray([n for n in map(_number, present) if n is not None], dtype=np.float64)
    if not len(numbers):
        return AttributeFeature(name, kind)
    log = bool(numbers.min() >= 0)
    x = np.log1p(numbers) if log else numbers
    scale = float(x.std())
    return AttributeFeature(name, kind, (), log, float(x.mean()), scale if scale > 0 else 1.0)


@dataclass(frozen=True)
class AttributeBlock:
    """The declared attributes of one side (items or users), in order."""

    features: Sequence[AttributeFeature]

    @property
    def width(self) -> int:
        return sum(f.width for f in self.features)

    def encode(self, texts: Texts, out: np.ndarray) -> None:
        """Writes every attribute's columns into ``out`` (``width`` long)."""
        if not texts:
            return
        start = 0
        for feature in self.features:
            end = start + feature.width
            feature.encode(texts.get(feature.name), out[start:end])
            start = end
