"""The candidate sources beside the two-tower's nearest neighbours, as one
artifact file (``sources.npz``) that the retriever serves and the build's
evaluation, the ranker's training and the nightly scoring read the same way.

- Item-to-item: each item's top neighbours by the build's item-item model
  (EASE or item-kNN, whichever ranked the validation window better), with
  their weights. A user's neighbour score of an item is the sum of its
  weights over the user's items (the last ``HISTORY`` of them): EASE's or
  item-kNN's own score, truncated to each item's top neighbours. The best
  ``NEIGHBOUR_CANDIDATES`` unseen items are candidates, and every
  candidate's neighbour score is a ranking feature.
- Popular: the most-bought items of the training period.
- Repeat, where the dataset declares its items bought again (``repeat:
  true`` in the manifest): the user's own items. A user's repeat score of
  one is the item's repeat rate (the share of its buyers who bought it
  again, in training) times exp(-k / ``repeat_tau``) for the k-th most
  recent of the user's items: what the served history (unique items, most
  recent first) allows; how often the user bought it is not served.

Candidates are picked from a pool in a fixed order (best score first, ties
by row) and the first that pass the request's filter are kept, so the
retriever (whose filter runs in Qdrant) and the offline evaluation (a
boolean mask) pick the same items.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

FILE = "sources.npz"
HISTORY = 200  # a user's most recent items that seed the neighbour source
NEIGHBOUR_CANDIDATES = 100  # item-to-item candidates per request
POPULAR_CANDIDATES = 50  # popular candidates per request
POOL_FACTOR = 3  # the pool each source's filter picks its candidates from
POPULAR_KEPT = 2_000  # popular rows stored: more than any pool needs
DENSE_ROWS = 1 << 18  # catalogues up to this size sum a user's scores over every row

REPEAT_CANDIDATES = 100  # the user's own items, most recent first, per request

# A candidate's sources, one bit each (the retriever's `sources` column).
SOURCE_ANN, SOURCE_NEIGHBOURS, SOURCE_POPULAR, SOURCE_REPEAT = 1, 2, 4, 8
SOURCE_NAMES = {
    SOURCE_ANN: "ann",
    SOURCE_NEIGHBOURS: "neighbours",
    SOURCE_POPULAR: "popular",
    SOURCE_REPEAT: "repeat",
}
# The ranker's `source_features` input: the neighbour score, one flag a
# source, the repeat score. Graphs from before the repeat source take the
# first LEGACY_SOURCE_FEATURES (each graph is fed the width it declares).
SOURCE_FEATURES = 6
LEGACY_SOURCE_FEATURES = 4
REPEAT_SCORE = 5  # the column of the repeat score


def source_features(
    neighbour_scores: np.ndarray, bits: np.ndarray, repeat_scores: np.ndarray | None = None
) -> np.ndarray:
    """[n, SOURCE_FEATURES] float32 from each candidate's neighbour score,
    source bits and repeat score (0 without)."""
    out = np.empty((len(neighbour_scores), SOURCE_FEATURES), dtype=np.float32)
    out[:, 0] = neighbour_scores
    flags = (SOURCE_ANN, SOURCE_NEIGHBOURS, SOURCE_POPULAR, SOURCE_REPEAT)
    for column, bit in enumerate(flags, 1):
        out[:, column] = (bits & bit) > 0
    out[:, REPEAT_SCORE] = 0.0 if repeat_scores is None else repeat_scores
    return out


def is_in(rows: np.ndarray, blocked: np.ndarray) -> np.ndarray:
    """Which of ``rows`` (row numbers, >= 0) are in ``blocked``: one table
    as long as the largest row, where ``np.isin`` costs ten times as much
    for a request's few hundred rows (its checks and choice of method)."""
    if not len(rows) or not len(blocked):
        return np.zeros(len(rows), dtype=bool)
    table = np.zeros(max(int(rows.max()), int(blocked.max())) + 1, dtype=bool)
    table[blocked] = True
    return table[rows]


@dataclass(frozen=True)
class UserNeighbourScores:
    """One user's neighbour scores: the rows that have one, ascending, and
    each row's score."""

    rows: np.ndarray  # int64, ascending
    scores: np.ndarray  # float32

    def of(self, rows: np.ndarray) -> np.ndarray:
        """The score of each of ``rows`` (0 where a row has none)."""
        out = np.zeros(len(rows), dtype=np.float32)
        if not len(self.rows):
            return out
        at = np.minimum(np.searchsorted(self.rows, rows), len(self.rows) - 1)
        hit = self.rows[at] == rows
        out[hit] = self.scores[at[hit]]
        return out

    def pool(self, blocked: np.ndarray, size: int) -> np.ndarray:
        """The best ``size`` rows not blocked, best first, ties by row."""
        keep = ~is_in(self.rows, blocked)
        rows, scores = self.rows[keep], self.scores[keep]
        order = np.lexsort((rows, -scores))[:size]
        return rows[order]


@dataclass(frozen=True)
class Sources:
    neighbours: np.ndarray  # [num_rows, M] int32 rows; 0: none
    weights: np.ndarray  # [num_rows, M] float32
    popular: np.ndarray  # [<= POPULAR_KEPT] int64 rows, most popular first
    item_ids: np.ndarray  # [num_rows] str; row 0 (out of vocabulary) is ""
    model: str = ""  # which item-item model the neighbours are of
    # The k-th most recent seed weighs exp(-k / tau); 0: all alike.
    recency_tau: float = 0.0
    # [num_rows] float32, each item's repeat rate; None: items are not bought again.
    repeat_rate: np.ndarray | None = None
    repeat_tau: float = 0.0  # the repeat score's recency, as recency_tau

    @classmethod
    def load(cls, artifact: Path) -> Sources | None:
        """None for an artifact from before the sources (served as before)."""
        path = artifact / FILE
        if not path.exists():
            return None
        with np.load(path, allow_pickle=False) as stored:
            repeat = stored["repeat_rate"] if "repeat_rate" in stored.files else None
            return cls(
                stored["neighbours"],
                stored["weights"],
                stored["popular"].astype(np.int64),
                stored["item_ids"],
                str(stored["model"]),
                float(stored["recency_tau"]),
                None if repeat is None or not len(repeat) else repeat.astype(np.float32),
                float(stored["repeat_tau"]) if "repeat_tau" in stored.files else 0.0,
            )

    def save(self, artifact: Path) -> None:
        np.savez(
            artifact / FILE,
            neighbours=self.neighbours.astype(np.int32),
            weights=self.weights.astype(np.float32),
            popular=self.popular.astype(np.int64),
            item_ids=self.item_ids.astype(str),
            model=np.asarray(self.model),
            recency_tau=np.asarray(self.recency_tau),
            repeat_rate=np.zeros(0, np.float32) if self.repeat_rate is None else self.repeat_rate,
            repeat_tau=np.asarray(self.repeat_tau),
        )

    @cached_property
    def row_of(self) -> dict[str, int]:
        return {str(item_id): row for row, item_id in enumerate(self.item_ids) if row}

    def rows(self, item_ids: Sequence[str]) -> np.ndarray:
        """Rows of the known ids, in order; unknown ids (upserted since the build) left out."""
        found = self.row_or_zero(item_ids)
        return found[found > 0]

    def row_or_zero(self, item_ids: Sequence[str]) -> np.ndarray:
        """Each id's row, 0 for an unknown one (looked up in C: no Python
        frame for each id)."""
        found = map(self.row_of.get, item_ids, itertools.repeat(0))
        return np.fromiter(found, dtype=np.int64, count=len(item_ids))

    def user_scores(self, history_rows: np.ndarray) -> UserNeighbourScores:
        """Neighbour scores from the user's rows, most recent first (0s pad)."""
        seeds = history_rows[history_rows > 0][: seed_horizon(self.recency_tau)]
        found = self.neighbours[seeds].ravel().astype(np.int64)
        weights = (self.weights[seeds] * recency(len(seeds), self.recency_tau)[:, None]).ravel()
        keep = found > 0
        found, weights = found[keep], weights[keep]
        size = len(self.neighbours)
        if size <= DENSE_ROWS or size <= 8 * len(found):
            # Summed over every row at once: no sort of the user's up to
            # HISTORY x M entries (2 of the 4.5 ms a search took on ML-100K).
            counts = np.bincount(found, minlength=size)
            sums = np.bincount(found, weights=weights, minlength=size)
            rows = np.flatnonzero(counts)
            return UserNeighbourScores(rows, sums[rows].astype(np.float32))
        rows, inverse = np.unique(found, return_inverse=True)
        sums = np.bincount(inverse, weights=weights, minlength=len(rows))
        return UserNeighbourScores(rows, sums.astype(np.float32))

    def popular_pool(self, blocked: np.ndarray, size: int) -> np.ndarray:
        return self.popular[~is_in(self.popular, blocked)][:size]

    def pools(
        self, user: UserNeighbourScores, blocked: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The neighbour and popular pools, ``blocked`` rows (the user's own,
        the request's exclusions) left out: what the filter picks from."""
        return (
            user.pool(blocked, NEIGHBOUR_CANDIDATES * POOL_FACTOR),
            self.popular_pool(blocked, POPULAR_CANDIDATES * POOL_FACTOR),
        )

    def repeat_pool(self, history_rows: np.ndarray) -> np.ndarray:
        """The user's own rows, most recent first (of the last HISTORY), that
        may come again: what the filter picks the repeat candidates from
        (none where items are not bought again)."""
        if self.repeat_rate is None:
            return np.zeros(0, np.int64)
        own = history_rows[history_rows > 0][:HISTORY]
        return own[: REPEAT_CANDIDATES * POOL_FACTOR].astype(np.int64)

    def repeat_scores(self, history_rows: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Each of ``rows``' repeat score for a user of ``history_rows``
        (most recent first): its repeat rate times the recency of the user's
        last time with it; 0 for the rows the user never had."""
        out = np.zeros(len(rows), np.float32)
        if self.repeat_rate is None:
            return out
        own = history_rows[history_rows > 0][:HISTORY]  # each row once, most recent first
        if not len(own) or not len(rows):
            return out
        order = np.argsort(own)
        at = np.minimum(np.searchsorted(own[order], rows), len(own) - 1)
        hit = own[order][at] == rows
        weights = recency(len(own), self.repeat_tau)[order[at[hit]]]
        out[hit] = self.repeat_rate[rows[hit]] * weights
        return out

    def candidates(
        self,
        user: UserNeighbourScores,
        ann: np.ndarray,
        blocked: np.ndarray,
        passes: Callable[[np.ndarray], np.ndarray],
        repeat: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The union of ``ann`` (the two-tower's hits, best first), both
        sources' picks that pass the filter and the ``repeat`` pool's
        (``repeat_pool``): rows and source bits."""
        neighbour_pool, popular_pool = self.pools(user, blocked)
        repeat = np.zeros(0, np.int64) if repeat is None else repeat
        return union(
            (ann, SOURCE_ANN),
            (pick(neighbour_pool, passes, NEIGHBOUR_CANDIDATES), SOURCE_NEIGHBOURS),
            (pick(popular_pool, passes, POPULAR_CANDIDATES), SOURCE_POPULAR),
            (pick(repeat, passes, REPEAT_CANDIDATES), SOURCE_REPEAT),
        )


def seed_horizon(tau: float) -> int:
    """How many of a user's most recent items can move a neighbour score:
    HISTORY, or fewer where the older ones weigh exp(-k / tau) < 2**-24,
    below float32's resolution of the most recent one's weight (all of them
    together under (tau + 1) * 2**-24 of it). With tau 3 a heavy user's 200
    seeds are 50: a quarter of the gathering and summing."""
    if tau <= 0:
        return HISTORY
    return min(HISTORY, math.ceil(tau * math.log(2.0**24)))


def recency(length: int, tau: float) -> np.ndarray:
    """The seeds' weights, most recent first: exp(-k / tau), or 1 with tau 0."""
    if tau <= 0:
        return np.ones(length, dtype=np.float32)
    return np.exp(-np.arange(length, dtype=np.float64) / tau).astype(np.float32)


def pick(pool: np.ndarray, passes: Callable[[np.ndarray], np.ndarray], n: int) -> np.ndarray:
    """The first ``n`` rows of ``pool`` that pass the filter, in pool order."""
    return pool[passes(pool)][:n] if len(pool) else pool


def union(*parts: tuple[np.ndarray, int]) -> tuple[np.ndarray, np.ndarray]:
    """Rows of every source in order, each once (first place kept), and
    each row's source bits."""
    bits: dict[int, int] = {}
    for rows, bit in parts:
        for row in rows.tolist():
            bits[row] = bits.get(row, 0) | bit
    rows_out = np.fromiter(bits.keys(), dtype=np.int64, count=len(bits))
    return rows_out, np.fromiter(bits.values(), dtype=np.uint8, count=len(bits))
