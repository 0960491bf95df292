"""The candidate sources' library (recserve_model.sources) and the build's
item-item fits: what the retriever, the evaluation and training share."""

import numpy as np
import pandas as pd

from pipelines import baselines
from pipelines.dataset import HOLDOUT, Split, temporal_split
from pipelines.item_neighbours import (
    EASE_LAMBDAS,
    RECENCY_TAUS,
    choose_model,
    top_neighbours,
    truncate,
)
from pipelines.selection_window import selection_window
from recserve_model.encoding import Encoder, EncodingSpec
from recserve_model.sources import (
    HISTORY,
    SOURCE_ANN,
    SOURCE_NEIGHBOURS,
    SOURCE_POPULAR,
    Sources,
    is_in,
    seed_horizon,
    source_features,
    union,
)


def table(tau: float = 0.0) -> Sources:
    # Rows 1..5; row 1's neighbours are 2 (0.5) and 3 (0.25); row 2's are 3 (1.0) and 4 (0.1).
    neighbours = np.array([[0, 0], [2, 3], [3, 4], [0, 0], [0, 0], [0, 0]], np.int32)
    weights = np.array([[0, 0], [0.5, 0.25], [1.0, 0.1], [0, 0], [0, 0], [0, 0]], np.float32)
    ids = np.array(["", "a", "b", "c", "d", "e"])
    return Sources(neighbours, weights, np.array([5, 4, 3, 2, 1]), ids, "test", tau)


def test_a_users_scores_sum_each_seeds_weights_most_recent_first():
    user = table().user_scores(np.array([1, 2, 0]))
    assert user.rows.tolist() == [2, 3, 4]
    np.testing.assert_allclose(user.scores, [0.5, 1.25, 0.1])
    np.testing.assert_allclose(user.of(np.array([4, 5, 3])), [0.1, 0.0, 1.25])
    recent = table(tau=1.0).user_scores(np.array([1, 2]))  # row 2 weighs exp(-1)
    np.testing.assert_allclose(recent.scores, [0.5, 0.25 + np.exp(-1), 0.1 * np.exp(-1)], rtol=1e-6)


def test_a_large_catalogue_sums_by_sorting_and_gets_the_same_scores(monkeypatch):
    """The dense sum (every row at once) and the sorted one (a catalogue too
    large for it) give the same rows and scores, negative weights included."""
    rng = np.random.default_rng(0)
    rows = 5_000
    neighbours = rng.integers(0, rows, (rows, 8)).astype(np.int32)
    weights = rng.normal(size=(rows, 8)).astype(np.float32)
    ids = np.array(["", *map(str, range(1, rows))])
    sources = Sources(neighbours, weights, np.arange(1, 50), ids, "test", 3.0)
    history = rng.integers(1, rows, 40)
    dense = sources.user_scores(history)
    monkeypatch.setattr("recserve_model.sources.DENSE_ROWS", 0)
    assert rows > 8 * 40 * 8  # the sorted path, now
    sorted_ = sources.user_scores(history)
    np.testing.assert_array_equal(dense.rows, sorted_.rows)
    np.testing.assert_array_equal(dense.scores, sorted_.scores)


def test_seeds_past_the_recency_horizon_are_left_out_and_move_no_score(monkeypatch):
    """With tau 3 only the 50 most recent of a heavy user's items seed the
    scores; the 150 older ones together weigh under (tau + 1) * 2**-24 of
    the most recent, so every score is the full sum's to that, relatively.
    Without recency (tau 0) every one of the last HISTORY seeds counts."""
    assert seed_horizon(3.0) == 50 and seed_horizon(0.0) == HISTORY
    assert seed_horizon(100.0) == HISTORY
    rng = np.random.default_rng(1)
    rows = 3_000
    neighbours = np.array([rng.choice(np.arange(1, rows), 16, replace=False) for _ in range(rows)])
    weights = rng.uniform(0.1, 1.0, (rows, 16)).astype(np.float32)
    ids = np.array(["", *map(str, range(1, rows))])
    sources = Sources(neighbours.astype(np.int32), weights, np.arange(1, 50), ids, "test", 3.0)
    history = rng.permutation(np.arange(1, rows))[:HISTORY]
    near = sources.user_scores(history)
    monkeypatch.setattr("recserve_model.sources.seed_horizon", lambda tau: HISTORY)
    full = sources.user_scores(history)
    assert set(near.rows) < set(full.rows)  # rows only the old seeds reach: gone
    bound = (3.0 + 1) * 2.0**-24 * weights.max()
    rounding = 2 * np.spacing(full.scores.max())  # each side rounded to float32 once
    assert np.abs(near.of(full.rows) - full.scores).max() <= bound + rounding
    top = full.pool(history, 300)
    assert set(near.pool(history, 300)) == set(top)


def test_pools_leave_out_the_blocked_rows_and_keep_their_order():
    sources = table()
    user = sources.user_scores(np.array([1, 2]))
    neighbour_pool, popular_pool = sources.pools(user, np.array([1, 2]))
    assert neighbour_pool.tolist() == [3, 4]  # 2 is the user's own
    assert popular_pool.tolist() == [5, 4, 3]


def test_candidates_are_the_union_with_each_ones_sources():
    sources = table()
    user = sources.user_scores(np.array([1]))
    passes = lambda rows: rows != 4  # noqa: E731  (the request's filter)
    rows, bits = sources.candidates(user, np.array([5, 3]), np.array([1]), passes)
    assert rows.tolist() == [5, 3, 2]
    assert bits.tolist() == [
        SOURCE_ANN | SOURCE_POPULAR,
        SOURCE_ANN | SOURCE_NEIGHBOURS | SOURCE_POPULAR,
        SOURCE_NEIGHBOURS | SOURCE_POPULAR,
    ]
    features = source_features(user.of(rows), bits)
    assert features[:, 1:4].tolist() == [[1, 0, 1], [1, 1, 1], [0, 1, 1]]
    assert features[:, 4:].tolist() == [[0, 0]] * 3  # not the user's own: no repeat
    assert union((np.array([2]), 1), (np.array([2, 3]), 2))[1].tolist() == [3, 2]


def test_a_table_survives_the_artifact_file(tmp_path):
    table(tau=3.0).save(tmp_path)
    loaded = Sources.load(tmp_path)
    assert loaded is not None and loaded.model == "test" and loaded.recency_tau == 3.0
    assert loaded.rows(["b", "unknown", "a"]).tolist() == [2, 1]
    assert Sources.load(tmp_path / "missing") is None


def test_ease_on_the_smaller_side_equals_the_items_inverse():
    x = (np.random.default_rng(3).random((40, 90)) < 0.1).astype(np.float32)
    gram = (x.T @ x).astype(np.float64) + 50 * np.eye(90)
    inverse = np.linalg.inv(gram)
    direct = -inverse / np.diag(inverse)
    np.fill_diagonal(direct, 0.0)
    np.testing.assert_allclose(baselines.ease(x, 50.0), direct, atol=1e-6)


def test_truncation_keeps_each_rows_best_positive_weights_never_itself():
    weights = np.array([[0, 3, 1, -1], [2, 0, 2, 1], [0, 0, 0, 0], [4, 1, 1, 0]], np.float32)
    columns, values = truncate(weights, 2)
    assert columns[1].tolist() == [2, 3]  # row 0 (out of vocabulary) and itself excluded
    assert columns[2].tolist() == [0, 0] and values[2].tolist() == [0, 0]
    top, _ = top_neighbours(np.array([[1.0, 5.0, 5.0]]), 2)
    assert top.tolist() == [[1, 2]]  # ties by column


def shop_split() -> tuple[Split, Encoder]:
    """60 users with 36 timed rows each over 80 items: users of one half
    keep to items 1..40, the other half to 41..80 (so neighbours stay in halves)."""
    rng = np.random.default_rng(3)
    rows = []
    for u in range(60):
        half = 0 if u % 2 else 40
        items = rng.choice(np.arange(1, 41) + half, size=36, replace=False)
        rows += [(f"u{u}", f"i{item}", t) for t, item in enumerate(items)]
    frame = pd.DataFrame(rows, columns=["user_id", "item_id", "timestamp"])
    encoder = Encoder(EncodingSpec([f"i{n}" for n in range(1, 81)], [], [], 8))
    return temporal_split(frame), encoder


def test_the_item_item_model_is_chosen_on_a_window_shaped_like_the_holdout():
    split, encoder = shop_split()
    history, truth = selection_window(split)
    sizes = truth.groupby("user_id").size()
    assert (sizes[sizes.index.isin(history["user_id"])] == HOLDOUT).all()
    assert (
        history["timestamp"]
        .groupby(history["user_id"])
        .max()
        .lt(truth["timestamp"].groupby(truth["user_id"]).min())
        .all()
    )
    assert len(history) + len(truth) == len(split.train)  # never the test split

    choice = choose_model(split, encoder)
    tried = {f"ease:{lam:g}" for lam in EASE_LAMBDAS} | {"item_knn"}
    assert choice.model in tried and tried <= set(choice.validation_ndcg)
    assert choice.recency_tau in RECENCY_TAUS
    assert choice.validation_ndcg[choice.model] == max(
        choice.validation_ndcg[name] for name in tried
    )
    # The ranker's table is the tower period's: every neighbour in its own half.
    table = choice.tower_period
    assert table.recency_tau == choice.recency_tau
    for row in (1, 45):
        kept = table.neighbours[row][table.weights[row] > 0]
        assert len(kept) and ((kept > 40) == (row > 40)).all()


def clustered_split(drift: bool, seed: int) -> tuple[Split, Encoder]:
    """300 users over 8 clusters of 40 items: 20 rows from one cluster, then
    24 from another; with ``drift`` in that order (what comes next is like
    the last items), else shuffled (the order says nothing)."""
    rng = np.random.default_rng(seed)
    rows = []
    for u in range(300):
        clusters = rng.choice(8, 2, replace=False)
        first = rng.choice(np.arange(40) + 40 * clusters[0] + 1, 20, replace=False)
        then = rng.choice(np.arange(40) + 40 * clusters[1] + 1, 24, replace=False)
        sequence = np.concatenate([first, then])
        if not drift:
            rng.shuffle(sequence)
        rows += [(f"u{u}", f"i{item}", t) for t, item in enumerate(sequence)]
    frame = pd.DataFrame(rows, columns=["user_id", "item_id", "timestamp"])
    return temporal_split(frame), Encoder(EncodingSpec([f"i{n}" for n in range(1, 321)], [], [], 8))


def test_recency_is_kept_where_it_wins_beyond_noise_and_only_there():
    choice = choose_model(*clustered_split(drift=True, seed=0))
    assert choice.recency_tau == 3.0
    at = {float(k.rsplit(":", 1)[1]): v for k, v in choice.validation_ndcg.items() if "tau:" in k}
    assert at[3.0] > at[0.0] + 0.1
    # Shuffled: some recency still ranks the window a little better, by chance.
    choice = choose_model(*clustered_split(drift=False, seed=3))
    at = {float(k.rsplit(":", 1)[1]): v for k, v in choice.validation_ndcg.items() if "tau:" in k}
    assert max(at, key=lambda tau: (at[tau], -tau)) != 0.0
    assert choice.recency_tau == 0.0


def test_is_in_answers_as_numpys_isin():
    rng = np.random.default_rng(3)
    for rows_n, blocked_n in ((0, 5), (5, 0), (1, 1), (300, 100), (900, 1000)):
        rows = rng.integers(0, 2_000, rows_n)
        blocked = rng.integers(0, 2_500, blocked_n)
        assert np.array_equal(is_in(rows, blocked), np.isin(rows, blocked))
