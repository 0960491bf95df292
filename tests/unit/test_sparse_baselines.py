"""The build's steps for large catalogues (pipelines/sparse_baselines.py):
the same answers as the dense forms where both can run, and a working set
that grows linearly in items."""

import numpy as np
import pandas as pd
import pytest
from scipy import sparse

from pipelines import (
    baselines,
    dataset,
    evaluate,
    item_neighbours,
    sparse_baselines,
    sparse_neighbours,
)
from recserve_model.encoding import Encoder, EncodingSpec


@pytest.fixture
def matrix():
    rng = np.random.default_rng(3)
    dense = (rng.random((400, 150)) < 0.04).astype(np.float32)
    dense[:, 0] = 0  # row 0: the unknown item
    dense[:, 7] = 0  # an item nobody has
    dense[5, 9] = 1
    dense[[n for n in range(400) if n != 5], 9] = 0  # an item one user has
    return dense


def test_sparse_item_knn_scores_equal_the_dense_ones(matrix):
    dense = matrix @ baselines.item_knn(matrix)
    knn = sparse_baselines.ItemKnn(sparse.csr_matrix(matrix))
    got = knn.scores(sparse.csr_matrix(matrix[:64]))
    assert got.shape == (64, 150) and got.dtype == np.float32
    np.testing.assert_allclose(got, dense[:64], atol=1e-5)


def test_sparse_item_neighbours_are_the_dense_cosines_best_taken_from_co_occurrences(
    matrix, monkeypatch
):
    """The item-to-item source past the dense budget: each item's best
    positive cosines (not itself, not row 0), best first, equal values by
    column, none better left out, as the dense items x items row ranks
    them; fewer co-occurring items than kept: the rest 0 / 0.0. Blocks of
    rows as in a large catalogue."""
    monkeypatch.setattr(sparse_neighbours, "ROW_BLOCK", 32)
    columns, values = sparse_neighbours.knn_neighbours(sparse.csr_matrix(matrix), 20)
    cosine = baselines.item_knn(matrix).astype(np.float64)
    for item in range(150):
        row = cosine[item]
        candidates = [c for c in range(1, 150) if c != item and row[c] > 1e-7]
        kept = min(20, len(candidates))
        got, best = columns[item, :kept], values[item, :kept]
        assert (best > 0).all() and item not in got and 0 not in got, item
        np.testing.assert_allclose(best, row[got], atol=1e-5)
        assert (np.diff(best) <= 0).all()  # best first
        for a, b in zip(range(kept - 1), range(1, kept), strict=True):
            assert best[a] != best[b] or got[a] < got[b]  # equal values by column
        left_out = [c for c in candidates if c not in set(got.tolist())]
        assert all(row[c] <= best[-1] + 1e-5 for c in left_out), item
        assert (columns[item, kept:] == 0).all() and (values[item, kept:] == 0).all()
    assert (values[7] == 0).all() and (columns[7] == 0).all()  # an item nobody has: no neighbours


def test_low_rank_ease_is_the_ridge_map_on_the_top_singular_directions(matrix):
    history, item = sparse_baselines.low_rank_ease(sparse.csr_matrix(matrix), 16, 300.0)
    assert history.shape == item.shape == (150, 16)
    _, singular, right = np.linalg.svd(matrix.astype(np.float64), full_matrices=False)
    top = right[:16].T
    expected = top @ np.diag(singular[:16] ** 2 / (singular[:16] ** 2 + 300.0)) @ top.T
    np.testing.assert_allclose(history @ item.T, expected, atol=1e-4)
    # Its top items for a user agree with dense EASE's more often than chance.
    ease = matrix @ baselines.ease(matrix)
    low = (matrix @ history) @ item.T
    overlap = np.mean(
        [
            len(set(np.argsort(-ease[u])[:10]) & set(np.argsort(-low[u])[:10])) / 10
            for u in range(400)
        ]
    )
    assert overlap > 0.3


def test_top_matches_a_stable_argsort_on_a_large_catalogue_with_ties():
    rng = np.random.default_rng(5)
    scores = rng.integers(0, 50, sparse_baselines.DENSE_ITEMS * 2).astype(np.float32)
    scores[:100] = -np.inf
    for n in (1, 10, 200):
        expected = np.argsort(-scores, kind="stable")[:n]
        np.testing.assert_array_equal(sparse_baselines.top(scores, n), expected)


def test_the_evaluation_scores_large_catalogues_with_the_sparse_forms(matrix, monkeypatch):
    """Past the dense forms' budget: sparse item-kNN (the same scores as the
    dense, when every user is evaluated) and low-rank EASE in its place."""
    users = [f"u{n}" for n in range(400)]
    items = [f"i{n}" for n in range(1, 150)]
    rows, columns = np.nonzero(matrix)
    train = pd.DataFrame(
        {"user_id": [users[r] for r in rows], "item_id": [items[c - 1] for c in columns]}
    )
    encoder = Encoder(EncodingSpec(items, [], [], 8))
    assert encoder.spec.num_rows == 150
    dense = evaluate.BaselineScores(train, encoder, users)
    monkeypatch.setattr(sparse_baselines, "DENSE_BYTES", 0)
    large = evaluate.BaselineScores(train, encoder, users)
    for i in (0, 5, 255, 256, 399):
        small, big = dense.of(i), large.of(i)
        assert set(small) == {"item_knn", "ease"} and set(big) == {"item_knn", "ease_low_rank"}
        np.testing.assert_allclose(big["item_knn"], small["item_knn"], atol=1e-5)
        assert big["ease_low_rank"].shape == (150,)


def test_the_evaluated_users_are_sampled_above_the_limit():
    few = [f"u{n}" for n in range(100)]
    assert evaluate.sampled(few) == few
    many = [f"u{n:06d}" for n in range(evaluate.EVAL_USERS * 3)]
    drawn = evaluate.sampled(many)
    assert len(drawn) == evaluate.EVAL_USERS and drawn == sorted(drawn)
    assert drawn == evaluate.sampled(many)  # seeded


def test_the_dense_forms_are_chosen_by_their_cost_not_by_the_catalogue_alone():
    """Users count as well as items: a young shop's 15,000 products are
    dense, a 2,000-film catalogue with a marketplace's users too, while
    10,000 products with 100,000 shoppers (a 4 GB users x items matrix
    and 1e13 multiply-adds per fit) take the sparse forms, as does a
    catalogue whose items x items matrices alone pass the memory budget."""
    assert sparse_baselines.dense_ok(943, 1_683) and sparse_baselines.dense_ok(6_040, 3_707)
    assert sparse_baselines.dense_ok(600, 15_000) and sparse_baselines.dense_ok(200_000, 2_000)
    assert not sparse_baselines.dense_ok(100_000, 10_000)
    assert not sparse_baselines.dense_ok(300, 50_000)
    memory, work = sparse_baselines.dense_cost(600, 15_000)
    assert memory == 600 * 15_000 * 4 + 15_000**2 * 40 and work == 600 * 15_000**2 + 600**3
    # The build's memory estimate follows the same choice.
    assert sparse_baselines.dense_ok(100_000, 4_000)
    dense = dataset.working_set(100_000, 4_000, 5_000_000)
    assert dense > sparse_baselines.dense_cost(100_000, 4_000)[0]
    assert dataset.working_set(100_000, 10_000, 5_000_000) < dense


def test_the_working_set_grows_linearly_above_the_dense_limit():
    marketplace = dataset.working_set(200_000, 1_000_000, 28_250_706)
    assert marketplace < 24 * 2**30  # a 24 GiB machine builds it
    assert dataset.working_set(200_000, 2_000_000, 28_250_706) < 2 * marketplace
    small = dataset.working_set(943, 1_682, 100_000)
    ranker = 943 * dataset.RANKER_BYTES_PER_USER + dataset.RANKER_SCORING_BYTES
    assert small == 943 * 1_682 * 4 + 1_682**2 * 40 + 100_000 * 200 + ranker


def test_large_catalogues_train_with_sparse_id_tables():
    """Above DENSE_ITEMS rows the towers' and the ranker's id tables take
    sparse gradients and SparseAdam: a step changes only its batch's rows."""
    import torch

    from pipelines.models import Ranker, TwoTower
    from pipelines.train import optimizers

    rows = 50_000
    tower = TwoTower(rows, 8, 4, 16, sparse=True)
    before = tower.item.id_embedding.weight.detach().clone()
    step = optimizers(tower, lambda p: torch.optim.Adam(p, lr=1e-2), 1e-2)
    assert len(step.optimizers) == 2
    items = torch.tensor([3, 7, 11])
    u = tower.user(torch.randn(3, 8), torch.randint(1, rows, (3, 20)))
    v = tower.item(items, torch.randn(3, 4))
    step.zero_grad()
    (u * v).sum().backward()
    step.step()
    changed = (tower.item.id_embedding.weight.detach() != before).any(dim=1)
    assert set(torch.nonzero(changed).ravel().tolist()) == {3, 7, 11}
    ranker = Ranker(rows, 8, 4, 16, sparse=True)
    assert ranker.sparse_parameters() == [ranker.table]
    dense = Ranker(rows, 8, 4, 16)
    only = optimizers(dense, lambda p: torch.optim.AdamW(p, lr=1e-3), 1e-3)
    assert len(only.optimizers) == 1  # small catalogues: the one optimizer, as before


def test_the_nightly_gates_ease_lists_take_the_low_rank_form_on_large_catalogues(
    matrix, monkeypatch
):
    """The nightly job's EASE reference: dense EASE within the dense forms'
    budget, low-rank EASE past it (nothing items x items); either way each list leaves
    out what the user has seen and inactive items."""
    from pipelines.rescore import gates

    users = [f"u{n}" for n in range(400)]
    rows, columns = np.nonzero(matrix)
    interactions = pd.DataFrame(
        {"user_id": [users[r] for r in rows], "item_id": [f"i{c}" for c in columns]}
    )
    seen = interactions.groupby("user_id")["item_id"].agg(list)
    frame = pd.DataFrame({"user_id": seen.index, "seen_item_ids": list(seen)})
    holdout = {u: set() for u in users[:50]}
    inactive = {"i1", "i2"}
    dense = gates.ease_lists(interactions, frame, holdout, 10, inactive)
    monkeypatch.setattr(sparse_baselines, "DENSE_BYTES", 0)
    low = gates.ease_lists(interactions, frame, holdout, 10, inactive)
    for user in holdout:
        for lists in (dense, low):
            assert len(lists[user]) == 10
            assert not (set(lists[user]) & (set(seen[user]) | inactive))
    overlap = np.mean([len(set(dense[u]) & set(low[u])) / 10 for u in holdout])
    assert overlap > 0.2  # the low-rank form ranks much as dense EASE does


def test_sparse_category_mixture_keeps_the_dense_mixtures_best(matrix, monkeypatch):
    """Item-kNN mixed with category popularity past the dense budget: with
    every neighbour kept, each item's kept neighbours are the dense
    ``item_knn+category:1`` model's best (its scale, its weights); with
    fewer kept, they stay positive, best first, never above the dense
    weights, and mostly the dense model's own best."""
    monkeypatch.setattr(sparse_neighbours, "ROW_BLOCK", 32)
    rng = np.random.default_rng(5)
    membership = np.zeros((150, 4))
    membership[np.arange(150), rng.integers(0, 4, 150)] = 1.0
    membership[0] = 0.0  # the out-of-vocabulary row has no category
    counts = matrix.sum(axis=0)
    dense = item_neighbours.item_item(matrix, "item_knn+category:1", membership)
    for kept in (149, 20):
        columns, values = sparse_neighbours.knn_neighbours(sparse.csr_matrix(matrix), 149)
        columns, values = sparse_neighbours.with_category(columns, values, counts, membership, 1.0)
        want_columns, want_values = item_neighbours.truncate(dense, 149)
        if kept == 149:
            np.testing.assert_allclose(values, want_values, atol=1e-5)
            carried = np.take_along_axis(dense, columns.astype(np.int64), axis=1)
            np.testing.assert_allclose(np.where(values > 0, carried, 0), values, atol=1e-5)
            continue
        small, small_values = sparse_neighbours.knn_neighbours(sparse.csr_matrix(matrix), kept)
        small, small_values = sparse_neighbours.with_category(
            small, small_values, counts, membership, 1.0
        )
        assert (small_values[1:] > 0).all() and (np.diff(small_values, axis=1) <= 0).all()
        # Truncation only leaves parts out: never more than the dense weight.
        carried = np.take_along_axis(dense, small.astype(np.int64), axis=1)
        assert (small_values <= carried + 1e-5).all()
        shared = [len(set(small[i]) & set(want_columns[i, :kept])) for i in range(1, 150)]
        assert np.mean(shared) > 0.5 * kept  # 0.66 here, of 20 kept among 149
