"""The user's side of the ranker's affinity feature, computed once per user.

The ranker scores a candidate's affinity to the user's recent items as
``user_side . item_side[candidate]``, where ``user_side`` is the sum over the
recent items of ``recency[k] * history_side[item_k]``. The item side lives in
the ranker's graph; the user side is the same for every candidate of a
request, so it is computed here, once, by whoever calls the ranker (the
ranker service, the offline evaluation, the nightly scoring) from
``affinity.npz`` in the artifact, instead of once per candidate row in the
graph (that cost 0.4 ms of Triton CPU per Recommend, docs/benchmarks.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

FILE = "affinity.npz"
RANK = 32  # the factorisation's rank; the ranker's `user_affinity` input width


@dataclass(frozen=True)
class UserAffinity:
    history_side: np.ndarray  # [num_rows, RANK] float32; row 0 (padding) is never read
    recency: np.ndarray  # [HISTORY_LEN] float32, weight of the k-th most recent item
    # [num_rows, RANK]: the candidates' side, in the graph; kept here only to
    # explain a score (debug answers). None in artifacts from before it.
    item_side: np.ndarray | None = None

    @classmethod
    def load(cls, artifact: Path) -> UserAffinity | None:
        """None for an artifact from before the affinity (its ranker ignores it)."""
        path = artifact / FILE
        if not path.exists():
            return None
        with np.load(path) as stored:
            item_side = stored["item_side"] if "item_side" in stored.files else None
            return cls(stored["history_side"], stored["recency"], item_side)

    def save(self, artifact: Path) -> None:
        arrays = {"history_side": self.history_side, "recency": self.recency}
        if self.item_side is not None:
            arrays["item_side"] = self.item_side
        np.savez(artifact / FILE, **arrays)  # type: ignore[arg-type]

    def scores(self, user_side: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Each candidate row's affinity to the user (``user_side``: [RANK]),
        as the graph computes it; zeros without the item side."""
        if self.item_side is None:
            return np.zeros(len(rows), dtype=np.float32)
        return (self.item_side[rows] @ user_side).astype(np.float32)

    def vectors(self, histories: np.ndarray) -> np.ndarray:
        """[N, HISTORY_LEN] item rows (0 pads) -> [N, RANK] float32."""
        weights = (histories > 0) * self.recency[: histories.shape[1]]
        return np.einsum("nk,nkr->nr", weights, self.history_side[histories]).astype(np.float32)


def vectors_or_zeros(affinity: UserAffinity | None, histories: np.ndarray) -> np.ndarray:
    if affinity is None:
        return np.zeros((len(histories), RANK), dtype=np.float32)
    return affinity.vectors(histories)
