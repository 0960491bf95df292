"""The sources' picks over real Qdrant Edge are the first of each pool that
pass the request's filter, in pool order, with their two-tower scores,
whether the filter is wide or narrow; without a narrow filter the store is
asked only for the pools' heads (the picks), not for every pooled item."""

import dataclasses

import numpy as np
import pytest

from bench.commands.components.candidates import retriever_of, users_of
from services.retriever import candidate_sources
from services.retriever.candidate_sources import search_candidates
from services.retriever.store import SearchFilter

USERS = 40


def every_pooled(sources, store, query, flt, wanted, ef):
    """The definition: each pooled item's pass, all asked at once."""
    pooled = np.unique(np.concatenate([pool for pool, _ in wanted]))
    only = dataclasses.replace(flt, only_item_ids=tuple(sources.item_ids[pooled].tolist()))
    return dict(store.search(query, len(pooled), only, ef, exact=True))


@pytest.fixture(scope="module")
def served(built):
    with retriever_of(built.directory) as retriever:
        yield retriever, users_of(built.directory, USERS)


def answered(retriever) -> list[int]:
    """Counts the exact queries' answers as the store reads them back."""
    store = retriever._store()
    search, counts = store.search, []

    def counted(*args, **kwargs):
        hits = search(*args, **kwargs)
        if kwargs.get("exact"):
            counts.append(len(hits))
        return hits

    store.search = counted
    return counts


def candidates_of(retriever, users, flt):
    return [search_candidates(retriever, vector, 200, flt, history)[0] for vector, history in users]


def same(first, second) -> None:
    for a, b in zip(first, second, strict=True):
        assert a.hits == b.hits
        for column in ("neighbour_scores", "sources", "repeat_scores"):
            left, right = getattr(a, column), getattr(b, column)
            assert (left is None) == (right is None)
            if left is not None:
                np.testing.assert_array_equal(left, right)


@pytest.mark.parametrize("categories", [(), ("Drama",), ("Documentary",), ("Film-Noir", "War")])
def test_the_picks_are_the_first_of_each_pool_that_pass(served, monkeypatch, categories):
    retriever, users = served
    flt = SearchFilter(categories=categories)
    picked = candidates_of(retriever, users, flt)
    with monkeypatch.context() as patched:
        patched.setattr(candidate_sources, "passing_picks", every_pooled)
        defined = candidates_of(retriever, users, flt)
    same(picked, defined)
    assert sum(len(c.hits) for c in picked) > USERS * 10  # sources' picks, not only HNSW's


def test_without_a_narrow_filter_only_the_picks_are_read_back(served, monkeypatch):
    retriever, users = served
    store = retriever._store()
    monkeypatch.setattr(store, "search", store.search)  # answered() wraps it; undone after
    counts = answered(retriever)
    candidates_of(retriever, users, SearchFilter())
    heads = list(counts)
    counts.clear()
    monkeypatch.setattr(candidate_sources, "passing_picks", every_pooled)
    candidates_of(retriever, users, SearchFilter())
    assert len(heads) == len(counts) == USERS  # one exact query a search, either way
    assert sum(heads) < 0.7 * sum(counts), (sum(heads), sum(counts))
