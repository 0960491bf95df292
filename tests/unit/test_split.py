"""The temporal split and feature tables leak nothing from the future."""

from pathlib import Path

import pytest

from pipelines.dataset import feature_tables, load_movielens, temporal_split

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def movielens():
    return load_movielens(ROOT / "data" / "raw")


@pytest.fixture(scope="module")
def split(movielens):
    return temporal_split(movielens.interactions, holdout=10, ranker_window=5)


def test_dataset_is_movielens_100k(movielens):
    assert len(movielens.interactions) == 100_000
    assert movielens.interactions["user_id"].nunique() == 943
    assert len(movielens.items) == 1682


def test_each_users_test_items_come_after_all_their_training_items(split):
    last_train = split.train.groupby("user_id")["timestamp"].max()
    first_test = split.test.groupby("user_id")["timestamp"].min()
    assert (last_train <= first_test.reindex(last_train.index)).all()
    last_tower = split.tower_train.groupby("user_id")["timestamp"].max()
    first_ranker = split.ranker_train.groupby("user_id")["timestamp"].min()
    assert (last_tower.reindex(first_ranker.index) <= first_ranker).all()


def test_split_is_a_partition_with_ten_held_out_per_user(movielens, split):
    assert (split.test.groupby("user_id").size() == 10).all()
    total = len(split.tower_train) + len(split.ranker_train) + len(split.test)
    assert total == len(movielens.interactions)


def test_feature_tables_see_only_training_interactions(movielens, split):
    tables = feature_tables(movielens, split.train)
    train_pairs = set(zip(split.train["user_id"], split.train["item_id"], strict=True))
    for row in tables["user_activity"].itertuples():
        assert all((row.user_id, item) in train_pairs for item in row.recent_item_ids)
    counts = split.train.groupby("item_id").size()
    stats = tables["item_stats"].set_index("item_id")["popularity"]
    assert (stats.reindex(counts.index) == counts).all()
    test_only = set(split.test["item_id"]) - set(split.train["item_id"])
    assert all(stats.get(item, 0) == 0 for item in test_only)
    per_user = split.train.groupby("user_id").size()
    activity = tables["user_activity"].set_index("user_id")["rating_count"]
    assert (activity.reindex(per_user.index) == per_user).all()
