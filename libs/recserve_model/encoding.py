"""Feature encoding shared by training and serving (pure numpy)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

HISTORY_LEN = 20  # recent items fed to the user tower
OOV_ROW = 0  # embedding row for ids the model has never seen
CATEGORY_OFFSET = 3  # an item's features: year, popularity, mean rating, then its categories
_COUNT_SCALE = math.log1p(1000.0)


@dataclass(frozen=True)
class EncodingSpec:
    """Vocabularies fixed at training time; saved as encoding.json in the artifact."""

    item_ids: list[str]  # row r + 1 holds item_ids[r]; row 0 is OOV
    genres: list[str]
    occupations: list[str]
    embedding_dim: int

    @property
    def user_dim(self) -> int:
        return 5 + len(self.occupations)

    @property
    def item_dim(self) -> int:
        return CATEGORY_OFFSET + len(self.genres)

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
        self, age: float, gender: str, occupation: str, rating_count: float, mean_rating: float
    ) -> np.ndarray:
        vec = np.zeros(self.spec.user_dim, dtype=np.float32)
        vec[0] = age / 100.0
        vec[1] = gender == "M"
        vec[2] = gender == "F"
        vec[3] = math.log1p(max(rating_count, 0.0)) / _COUNT_SCALE
        vec[4] = mean_rating / 5.0
        index = self.occupation_index.get(occupation)
        if index is not None:
            vec[5 + index] = 1.0
        return vec

    def item(
        self, year: float, popularity: float, mean_rating: float, genres: Sequence[str]
    ) -> np.ndarray:
        vec = np.zeros(self.spec.item_dim, dtype=np.float32)
        vec[0] = (year - 1900.0) / 100.0 if year > 0 else 0.0
        vec[1] = math.log1p(max(popularity, 0.0)) / _COUNT_SCALE
        vec[2] = mean_rating / 5.0
        for genre in genres:
            index = self.genre_index.get(genre)
            if index is not None:
                vec[CATEGORY_OFFSET + index] = 1.0
        return vec
