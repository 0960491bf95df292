"""The item-to-item and popular candidates beside the nearest neighbours
(``recserve_model.sources``): the union a Search answers with.

The sources' pools are picked in memory from the user's own items; which of
them pass the request's filter (categories, attributes, soft deletes,
exclusions) is one more query to the same store, restricted to each pool's
head (its picks), which also gives each its two-tower score; the rest of a
pool is asked for only where the filter left it short. The picks are the
first of each pool that pass, in pool order, as the offline evaluation
picks them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from recserve_kit.errors import InvalidArgument
from recserve_kit.validation import check_ids
from recserve_model.sources import (
    NEIGHBOUR_CANDIDATES,
    POPULAR_CANDIDATES,
    REPEAT_CANDIDATES,
    SOURCE_ANN,
    SOURCE_NEIGHBOURS,
    SOURCE_POPULAR,
    SOURCE_REPEAT,
    Sources,
)
from services.retriever.checks import MAX_FILTER_VALUES, check_vector
from services.retriever.domain import Retriever
from services.retriever.store import SearchFilter, VectorStore


@dataclass(frozen=True)
class Candidates:
    hits: list[tuple[str, float]]  # (item id, two-tower score), sources in order
    neighbour_scores: np.ndarray | None = None  # float32 per hit; None: no sources
    sources: np.ndarray | None = None  # uint8 bits per hit
    repeat_scores: np.ndarray | None = None  # float32 per hit; None: items not bought again


def search_candidates(
    retriever: Retriever,
    vector: Sequence[float] | bytes,
    k: int,
    flt: SearchFilter,
    history: Sequence[str],
    ef: int = 0,
    field: str = "vector",
    model_version: str = "",
) -> tuple[Candidates, str]:
    """A user's candidates: the ``k`` nearest neighbours of the vector that
    pass ``flt`` and are not in ``history`` (the user's own items, most
    recent first), with the item-to-item and popular candidates of the
    artifact that searches, when it has them."""
    if len(history) + len(flt.exclude_item_ids) > MAX_FILTER_VALUES:
        raise InvalidArgument(
            "history_item_ids",
            f"at most {MAX_FILTER_VALUES} ids together with filter.exclude_item_ids",
        )
    check_ids(history, "history_item_ids", indexed=False)
    blocked = dataclasses.replace(flt, exclude_item_ids=(*flt.exclude_item_ids, *history))
    hits, generation = retriever.search(vector, k, blocked, ef, field, model_version)
    if not retriever.settings.candidate_sources:
        return Candidates(hits), generation
    tables, store = retriever.sources_for(model_version)
    if tables is None:
        return Candidates(hits), generation
    query = check_vector(vector, store.dimension, field)
    ef = max(ef or retriever.settings.search_ef, k)
    return with_sources(tables, store, query, hits, flt, history, ef), generation


def with_sources(
    sources: Sources,
    store: VectorStore,
    query: np.ndarray,
    ann: list[tuple[str, float]],
    flt: SearchFilter,
    history: Sequence[str],
    ef: int,
) -> Candidates:
    """``ann`` (the nearest neighbours, ``flt`` already excluding the
    history) and the sources' picks that pass ``flt``, each once: the
    user's own items among them where the artifact's are bought again."""
    history_rows = sources.rows(history)
    user = sources.user_scores(history_rows)
    blocked = np.concatenate([history_rows, sources.rows(flt.exclude_item_ids)])
    neighbour_pool, popular_pool = sources.pools(user, blocked)
    repeat_pool = sources.repeat_pool(history_rows)
    wanted = (
        (neighbour_pool, NEIGHBOUR_CANDIDATES),
        (popular_pool, POPULAR_CANDIDATES),
        (repeat_pool, REPEAT_CANDIDATES),
    )
    passing = passing_picks(sources, store, query, flt, wanted, ef)
    ids = sources.item_ids

    def picks(pool: np.ndarray, n: int) -> list[str]:
        return [i for i in ids[pool].tolist() if i in passing][:n]

    scores = dict(ann)
    bits = dict.fromkeys(scores, SOURCE_ANN)
    bits_of = (SOURCE_NEIGHBOURS, SOURCE_POPULAR, SOURCE_REPEAT)
    for (pool, n), bit in zip(wanted, bits_of, strict=True):
        for item_id in picks(pool, n):
            bits[item_id] = bits.get(item_id, 0) | bit
            scores.setdefault(item_id, passing[item_id])
    hits = list(scores.items())
    rows = sources.row_or_zero([item_id for item_id, _ in hits])
    again = None if sources.repeat_rate is None else sources.repeat_scores(history_rows, rows)
    sourced = np.fromiter(bits.values(), np.uint8, len(bits))
    return Candidates(hits, user.of(rows), sourced, again)


def passing_picks(
    sources: Sources,
    store: VectorStore,
    query: np.ndarray,
    flt: SearchFilter,
    wanted: tuple[tuple[np.ndarray, int], ...],
    ef: int,
) -> dict[str, float]:
    """Which pooled items pass ``flt``, with their two-tower scores: enough
    to pick the first ``n`` of each pool that pass, in pool order. First the
    head of each pool (its first ``n``); only a pool the filter left short
    is asked again, for the rest of it. Without a narrow filter the heads
    all pass: one query that answers with the picks, not with every pooled
    item (near three times as many on ML-100K; reading answers back is
    most of the query's cost)."""

    def among(rows: np.ndarray) -> dict[str, float]:
        if not len(rows):
            return {}
        only = dataclasses.replace(flt, only_item_ids=tuple(sources.item_ids[rows].tolist()))
        return dict(store.search(query, len(rows), only, ef, exact=True))

    heads = np.unique(np.concatenate([pool[:n] for pool, n in wanted]))
    passing = among(heads)
    ids = sources.item_ids
    short = [
        pool[n:]
        for pool, n in wanted
        if len(pool) > n and sum(i in passing for i in ids[pool[:n]].tolist()) < n
    ]
    if short:
        passing.update(among(np.setdiff1d(np.concatenate(short), heads)))
    return passing
