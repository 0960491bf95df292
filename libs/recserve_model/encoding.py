"""Feature encoding shared by training and serving (pure numpy)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from recserve_model.attribute_features import AttributeBlock, AttributeFeature, Texts

HISTORY_LEN = 20  # recent items fed to the user tower
OOV_ROW = 0  # embedding row for ids the model has never seen
CATEGORY_OFFSET = 3  # an item's features: year, popularity, mean rating, then its categories
USER_FIXED = 5  # a user's: age, male, female, interaction count, mean rating, then occupation
_COUNT_SCALE = math.log1p(1000.0)


@dataclass(frozen=True)
class EncodingSpec:
    """Vocabularies fixed at training time; saved as encoding.json in the artifact.

    The declared attributes (``attribute_features``) follow the fixed
    columns: an item's after its categories, a user's after the occupation;
    an artifact built before them has none."""

    item_ids: list[str]  # row r + 1 holds item_ids[r]; row 0 is OOV
    genres: list[str]
    occupations: list[str]
    embedding_dim: int
    item_attributes: list[dict[str, Any]] = field(default_factory=list)
    user_attributes: list[dict[str, Any]] = field(default_factory=list)

    @cached_property
    def item_block(self) -> AttributeBlock:
        return AttributeBlock([AttributeFeature.from_dict(a) for a in self.item_attributes])

    @cached_property
    def user_block(self) -> AttributeBlock:
        return AttributeBlock([AttributeFeature.from_dict(a) for a in self.user_attributes])

    @property
    def category_end(self) -> int:
        """The end of an item's category columns (the declared attributes follow)."""
        return CATEGORY_OFFSET + len(self.genres)

    @property
    def user_dim(self) -> int:
        return USER_FIXED + len(self.occupations) + self.user_block.width

    @property
    def item_dim(self) -> int:
        return self.category_end + self.item_block.width

    @property
    def num_rows(self) -> int:
        return len(self.item_ids) + 1

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))

    @classmethod
    def load(cls, path: Path) -> EncodingSpec:
        return cls(**json.loads(path.read_text()))


class Encoder:
    """Turns feature records into model inputs. Unknown values encode as zeros."""

    def __init__(self, spec: EncodingSpec) -> None:
        self.spec = spec
        self.row_of = {item_id: row + 1 for row, item_id in enumerate(spec.item_ids)}
        self.genre_index = {g: i for i, g in enumerate(spec.genres)}
        self.occupation_index = {o: i for i, o in enumerate(spec.occupations)}

    def item_rows(self, item_ids: Sequence[str]) -> np.ndarray:
        """Embedding rows; ids outside the vocabulary get OOV_ROW (documented policy)."""
        return np.fromiter(
            (self.row_of.get(i, OOV_ROW) for i in item_ids), dtype=np.int64, count=len(item_ids)
        )

    def history(self, recent_item_ids: Sequence[str]) -> np.ndarray:
        """Most recent first, padded with OOV_ROW, which the tower masks out."""
        rows = self.item_rows(list(recent_item_ids)[:HISTORY_LEN])
        out = np.zeros(HISTORY_LEN, dtype=np.int64)
        out[: len(rows)] = rows
        return out

    def user(
        self,
        age: float,
        gender: str,
        occupation: str,
        rating_count: float,
        mean_rating: float,
        attributes: Texts | None = None,
    ) -> np.ndarray:
        vec = np.zeros(self.spec.user_dim, dtype=np.float32)
        vec[0] = age / 100.0
        vec[1] = gender == "M"
        vec[2] = gender == "F"
        vec[3] = math.log1p(max(rating_count, 0.0)) / _COUNT_SCALE
        vec[4] = mean_rating / 5.0
        index = self.occupation_index.get(occupation)
        if index is not None:
            vec[USER_FIXED + index] = 1.0
        if attributes:
            self.spec.user_block.encode(attributes, vec[USER_FIXED + len(self.spec.occupations) :])
        return vec

    def item(
        self,
        year: float,
        popularity: float,
        mean_rating: float,
        genres: Sequence[str],
        attributes: Texts | None = None,
    ) -> np.ndarray:
        vec = np.zeros(self.spec.item_dim, dtype=np.float32)
        vec[0] = (year - 1900.0) / 100.0 if year > 0 else 0.0
        vec[1] = math.log1p(max(popularity, 0.0)) / _COUNT_SCALE
        vec[2] = mean_rating / 5.0
        for genre in genres:
            index = self.genre_index.get(genre)
            if index is not None:
                vec[CATEGORY_OFFSET + index] = 1.0
        if attributes:
            self.spec.item_block.encode(attributes, vec[self.spec.category_end :])
        return vec
