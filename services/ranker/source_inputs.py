"""The ranking model's ``source_features`` input from what the retriever
sent with the candidates (``recserve_model.sources``)."""

from __future__ import annotations

import numpy as np

from recserve_kit.errors import InvalidArgument
from recserve_model.sources import SOURCE_ANN, source_features

# The retriever's neighbour scores, source bits and repeat scores for each
# candidate (None: not sent).
SourceColumns = tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]


def candidate_sources(
    n: int,
    neighbour_scores: np.ndarray | None,
    sources: np.ndarray | None,
    repeat_scores: np.ndarray | None = None,
) -> np.ndarray | None:
    """[n, SOURCE_FEATURES] from the retriever's columns (None when none came)."""
    columns = (
        ("neighbour_scores_f32", neighbour_scores),
        ("sources", sources),
        ("repeat_scores_f32", repeat_scores),
    )
    for name, column in columns:
        if column is not None and len(column) != n:
            raise InvalidArgument(name, f"has {len(column)} values for {n} candidates")
    if neighbour_scores is None and sources is None and repeat_scores is None:
        return None
    return source_features(
        np.zeros(n, np.float32) if neighbour_scores is None else neighbour_scores,
        np.full(n, SOURCE_ANN, np.uint8) if sources is None else sources,
        repeat_scores,
    )


def ann_only(n: int) -> np.ndarray:
    """The source features of candidates from the nearest neighbours alone."""
    return source_features(np.zeros(n, np.float32), np.full(n, SOURCE_ANN, np.uint8))
