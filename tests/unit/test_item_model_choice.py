"""How the build chooses its item-to-item model: category popularity and
its mixtures with EASE, and the window's users weighted to the served
histories' lengths."""

import numpy as np
import pandas as pd
import pytest
import torch

from pipelines import baselines, sparse_baselines
from pipelines.dataset import temporal_split
from pipelines.item_neighbours import (
    CATEGORY_MIXES,
    SHARP_MIXES,
    candidate_models,
    category_mix,
    choose_model,
    confirmed_mixtures,
    fit_sources,
    item_item,
)
from pipelines.ranker_examples import significant_best
from pipelines.selection_window import length_weights
from recserve_model.encoding import Encoder, EncodingSpec


def test_category_popularity_scores_a_historys_category_shares_times_popularity_within():
    # Items 1, 2 in category A (bought by 3 and 1 users), 3, 4 in B (2 and 2); 5 in both.
    membership = np.zeros((6, 2))
    membership[[1, 2], 0] = 1.0
    membership[[3, 4], 1] = 1.0
    membership[5] = [0.5, 0.5]
    matrix = np.zeros((4, 6), np.float32)
    for user, items in enumerate([[1, 3], [1, 4], [1, 2, 3], [4]]):
        matrix[user, items] = 1.0
    weights = baselines.category_popularity(matrix, membership)
    assert np.all(np.diag(weights) == 0)
    # A's interactions: item 1 three, item 2 one: shares 3/4 and 1/4.
    np.testing.assert_allclose(weights[2, [1, 3, 4]], [0.75, 0.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(weights[1, 2], 0.25, atol=1e-6)
    # An item in both categories speaks half for each.
    np.testing.assert_allclose(weights[5, [1, 3]], [0.375, 0.25], atol=1e-6)
    history = np.array([0, 0, 0, 1, 0, 0], np.float32)  # one B item
    assert np.argmax(history @ weights) == 4  # the other B item, never an A one
    assert (history @ weights)[[1, 2]].tolist() == [0.0, 0.0]


def test_an_item_in_two_categories_counts_where_its_buyers_shop():
    """Item 5 is listed in A and B; its three buyers shop A otherwise: it
    counts as A (nearly: a buyer's shares count item 5's own listing), and
    a B history is barely offered it."""
    membership = np.zeros((6, 2))
    membership[[1, 2], 0] = 1.0
    membership[[3, 4], 1] = 1.0
    membership[5] = [0.5, 0.5]
    matrix = np.zeros((5, 6), np.float32)
    for user, items in enumerate([[1, 5], [2, 5], [1, 2, 5], [3, 4], [4]]):
        matrix[user, items] = 1.0
    attributed = baselines.attributed_membership(matrix, membership)
    a = attributed[5, 0]
    assert 0.95 < a < 1.0 and attributed[5].sum() == pytest.approx(1.0)
    np.testing.assert_allclose(attributed[:5], membership[:5])  # one category: as listed
    weights = baselines.category_popularity(matrix, attributed)
    a_mass = 2 + 2 + 3 * a  # A's interactions: items 1 and 2 twice each, item 5 at its A share
    np.testing.assert_allclose(weights[1, [2, 5]], [2 / a_mass, 3 * a / a_mass], rtol=1e-5)
    b_mass = 1 + 2 + 3 * (1 - a)
    assert weights[3, 5] == pytest.approx(3 * (1 - a) / b_mass, abs=1e-6)
    assert weights[3, 5] < weights[1, 5]
    squared = baselines.category_popularity(matrix, attributed, 2.0)
    a_squared = 4 + 4 + 9 * a  # counts squared: 4, 4, 9
    np.testing.assert_allclose(squared[1, [2, 5]], [4 / a_squared, 9 * a / a_squared], rtol=1e-5)


def test_category_membership_normalises_the_multi_hot_columns():
    features = np.array([[9, 0, 0], [9, 1, 1], [9, 1, 0]], np.float32)
    membership = baselines.category_membership(features, 1, 3)
    np.testing.assert_allclose(membership, [[0, 0], [0.5, 0.5], [1, 0]])


def test_the_window_counts_its_users_as_the_served_users_of_their_length():
    served = np.array([20] * 50 + [200] * 50)  # half short, half long when served
    window = np.array([20] * 90 + [200] * 10)  # ten items shorter: mostly short in the window
    weights = length_weights(window, served)
    assert weights[90:].sum() > 0
    np.testing.assert_allclose(weights[:90].sum(), weights[90:].sum())  # each length half
    # A length no served user has counts nothing; nothing comparable: all alike.
    assert length_weights(np.array([3, 20]), np.array([20, 20]))[0] == 0
    assert length_weights(np.array([3, 4]), np.array([2000])).tolist() == [1.0, 1.0]


def test_mixtures_add_category_popularity_to_ease_at_its_norm():
    rng = np.random.default_rng(1)
    matrix = (rng.random((30, 9)) < 0.4).astype(np.float32)
    matrix[:, 0] = 0
    membership = np.zeros((9, 2))
    membership[1:5, 0] = 1.0
    membership[5:, 1] = 1.0
    ease = baselines.ease(matrix, 10.0)
    category = baselines.category_popularity(matrix, membership)
    mixed = item_item(matrix, "ease:10+category:2", membership)
    scale = np.linalg.norm(ease) / np.linalg.norm(category)
    np.testing.assert_allclose(mixed, ease + 2 * scale * category, rtol=1e-5, atol=1e-6)
    sharp = item_item(matrix, "ease:10+category:3^2", membership)
    squared = baselines.category_popularity(matrix, membership, 2.0)
    scale = np.linalg.norm(ease) / np.linalg.norm(squared)
    np.testing.assert_allclose(sharp, ease + 3 * scale * squared, rtol=1e-5, atol=1e-6)
    assert category_mix("ease:10+category:3^2") == (3.0, 2.0)
    assert category_mix("item_knn+category:0.3") == (0.3, 1.0)
    assert category_mix("ease:300") == (0.0, 1.0)
    assert candidate_models(None)[-1] == "item_knn"
    plain = [f"+category:{mix:g}" for mix in CATEGORY_MIXES]
    sharpened = [f"+category:{mix:g}^2" for mix in SHARP_MIXES]
    assert candidate_models(membership)[-len(plain) - len(sharpened) :] == plain + sharpened
    assert not any("+" in name for name in candidate_models(membership[:, :1]))  # one category


def keeping_to_categories() -> tuple[pd.DataFrame, Encoder, np.ndarray]:
    """200 shoppers, each buying 24 of the 40 items of one of two categories."""
    rng = np.random.default_rng(5)
    rows = []
    popularity = 1.0 / np.arange(1, 41) ** 1.1
    for u in range(200):
        category = u % 2
        picks = rng.choice(40, size=24, replace=False, p=popularity / popularity.sum())
        rows += [(f"u{u}", f"i{1 + p + 40 * category}", t) for t, p in enumerate(picks)]
    frame = pd.DataFrame(rows, columns=["user_id", "item_id", "timestamp"])
    encoder = Encoder(EncodingSpec([f"i{n}" for n in range(1, 81)], ["a", "b"], [], 8))
    membership = np.zeros((81, 2))
    membership[1:41, 0] = 1.0
    membership[41:, 1] = 1.0
    return frame, encoder, membership


def test_a_shop_whose_shoppers_keep_to_categories_is_served_the_mixture():
    """Few items per shopper, each in one of two categories: co-occurrences
    are too sparse for EASE alone, the category's popular items carry it."""
    frame, encoder, membership = keeping_to_categories()
    choice = choose_model(temporal_split(frame), encoder, membership)
    mixtures = {k for k in choice.validation_ndcg if "+category:" in k and " " not in k}
    assert len(mixtures) == len(CATEGORY_MIXES) + len(SHARP_MIXES)
    assert "+category:" in choice.model
    assert choice.validation_ndcg[f"{choice.model} confirm"] > max(
        v for k, v in choice.validation_ndcg.items() if k.endswith(" confirm") and "+" not in k
    )  # confirmed: it beat EASE alone on the second window too
    assert choice.ease_lambda in (100.0, 300.0, 1000.0)  # the gate's EASE stays plain EASE
    table = choice.tower_period
    kept = table.neighbours[3][table.weights[3] > 0]
    assert len(kept) and (kept <= 40).all()  # a category-A item's neighbours stay in A


def test_past_the_dense_budget_item_knn_is_mixed_with_category_popularity(monkeypatch):
    """The same shop with the dense forms ruled out (as at marketplace
    size): item-kNN and its mixtures are tried through the served form,
    a mixture wins beyond noise, and what the ranker trains on and what is
    served are that mixture, a category's items keeping to it."""
    monkeypatch.setattr(sparse_baselines, "dense_ok", lambda users, items: False)
    frame, encoder, membership = keeping_to_categories()
    choice = choose_model(temporal_split(frame), encoder, membership)
    tried = {k for k in choice.validation_ndcg if " " not in k}
    assert tried == {"item_knn", *(f"item_knn+category:{mix:g}" for mix in CATEGORY_MIXES)}
    assert choice.model.startswith("item_knn+category:")
    assert choice.validation_ndcg[choice.model] > choice.validation_ndcg["item_knn"]
    table = choice.tower_period
    assert table.model == choice.model
    kept = table.neighbours[3][table.weights[3] > 0]
    assert len(kept) and (kept <= 40).all()
    served = fit_sources(frame, encoder, choice.model, choice.recency_tau, membership)
    assert served.model == choice.model
    with pytest.raises(ValueError, match="needs the items' categories"):
        fit_sources(frame, encoder, choice.model)


def test_a_mixture_the_confirmation_window_does_not_support_is_not_kept():
    """Each shopper buys items that come in pairs, one of each pair first,
    its partner later; the categories are drawn at random. Whatever the
    first window said (here: the mixture far ahead), the confirmation window
    finds EASE alone better, and the mixture is not kept."""
    rng = np.random.default_rng(3)
    rows = []
    for u in range(200):
        pairs = rng.choice(40, size=12, replace=False)
        order = [1 + p for p in pairs] + [41 + p for p in pairs]  # firsts, then partners
        rows += [(f"u{u}", f"i{item}", t) for t, item in enumerate(order)]
    frame = pd.DataFrame(rows, columns=["user_id", "item_id", "timestamp"])
    encoder = Encoder(EncodingSpec([f"i{n}" for n in range(1, 81)], ["a", "b"], [], 8))
    membership = np.zeros((81, 2))
    membership[np.arange(1, 81), rng.integers(0, 2, 80)] = 1.0
    ndcg = {"ease:100": 0.1, "ease:100+category:3": 0.5, "ease:100+category:0.3": 0.05}
    confirmed = confirmed_mixtures(temporal_split(frame), encoder, "ease:100", membership, ndcg)
    assert confirmed == set()
    assert ndcg["ease:100+category:3 confirm"] < ndcg["ease:100 confirm"]
    assert "ease:100+category:0.3 confirm" not in ndcg  # it lost on the first window already


def test_a_blend_replaces_the_best_single_score_only_when_it_wins_beyond_noise():
    rng = np.random.default_rng(2)
    single = torch.from_numpy(rng.random(400))
    noise = torch.from_numpy(rng.normal(0, 0.2, 400))
    noise -= noise.mean()
    per_user = {
        (0.0, 0.0, 1.0): single,
        (1.0, 0.0, 0.0): single - 0.2,
        (1.0, 10.0, 1.0): single + 0.005 + noise,  # best mean, within noise
    }
    assert per_user[(1.0, 10.0, 1.0)].mean() > single.mean()
    assert significant_best(per_user) == (0.0, 0.0, 1.0)
    per_user[(1.0, 10.0, 1.0)] = single + 0.05 + noise  # beyond two standard errors
    assert significant_best(per_user) == (1.0, 10.0, 1.0)
    # Without a single score to fall back to, the best mean.
    assert significant_best({(1.0, 1.0, 0.0): single, (1.0, 3.0, 0.0): single + 0.001}) == (
        1.0,
        3.0,
        0.0,
    )
