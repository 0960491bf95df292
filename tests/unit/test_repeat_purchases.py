"""Repeat purchases (a dataset's ``repeat: true``): each consumption is an
interaction, the user's own items are the repeat source's candidates with a
repeat score, the evaluation's "buy again by frequency" baseline, graphs
from before the repeat source fed the columns they declare, and the
generated shop whose shoppers restock their staples. The build and the
live stack on such a shop: tests/integration/test_shop_build.py and
tests/e2e/test_shop_stack.py."""

from types import SimpleNamespace

import numpy as np
import pandas as pd

from pipelines.dataset import NEEDS, MovieLens, recent_items
from pipelines.evaluate import buy_again
from pipelines.item_neighbours import repeat_rates
from pipelines.learned import REPEAT_GAP_S, learned_interactions
from pipelines.logged_events import LoggedEvents, with_logged
from pipelines.shop import ShopSize, write_shop
from recserve_data import inspect
from recserve_model.encoding import Encoder, EncodingSpec
from recserve_model.graphs import graph_feed
from recserve_model.sources import (
    LEGACY_SOURCE_FEATURES,
    REPEAT_SCORE,
    SOURCE_FEATURES,
    SOURCE_REPEAT,
    Sources,
    source_features,
)
from tests.unit.dataset_fixtures import NOW, START, Data, manifest_edit, tiny, write


def table(repeat_rate=None, repeat_tau: float = 0.0) -> Sources:
    neighbours = np.array([[0, 0], [2, 3], [3, 4], [0, 0], [0, 0], [0, 0]], np.int32)
    weights = np.array([[0, 0], [0.5, 0.25], [1.0, 0.1], [0, 0], [0, 0], [0, 0]], np.float32)
    ids = np.array(["", "a", "b", "c", "d", "e"])
    return Sources(
        neighbours, weights, np.array([5, 4, 3, 2, 1]), ids, "test", 0.0, repeat_rate, repeat_tau
    )


RATES = np.array([0, 0.5, 0.2, 0.0, 0.9, 0.1], np.float32)


def test_the_users_own_items_are_candidates_only_where_items_are_bought_again():
    history = np.array([1, 4, 2, 0])  # most recent first
    assert table().repeat_pool(history).tolist() == []
    sources = table(RATES, repeat_tau=1.0)
    assert sources.repeat_pool(history).tolist() == [1, 4, 2]
    user = sources.user_scores(history)
    passes = lambda rows: rows != 2  # noqa: E731  (the request's filter: row 2 excluded)
    rows, bits = sources.candidates(
        user, np.array([5]), np.array([1, 4, 2]), passes, sources.repeat_pool(history)
    )
    own = rows[(bits & SOURCE_REPEAT) > 0]
    assert own.tolist() == [1, 4]  # the user's, in recency order, filtered
    assert not np.isin(rows[(bits & SOURCE_REPEAT) == 0], [1, 4, 2]).any()
    # The repeat score: the item's rate times the recency of its place.
    scores = sources.repeat_scores(history, np.array([1, 4, 2, 5]))
    np.testing.assert_allclose(scores, [0.5, 0.9 * np.exp(-1), 0.2 * np.exp(-2), 0.0], rtol=1e-6)
    features = source_features(np.zeros(4, np.float32), bits[:4], scores)
    assert features.shape == (4, SOURCE_FEATURES)
    assert features[:, REPEAT_SCORE].tolist() == scores.tolist()


def test_the_repeat_rates_survive_the_artifact_file_and_old_files_have_none(tmp_path):
    table(RATES, 30.0).save(tmp_path)
    loaded = Sources.load(tmp_path)
    assert loaded is not None and loaded.repeat_tau == 30.0
    np.testing.assert_array_equal(loaded.repeat_rate, RATES)
    (tmp_path / "plain").mkdir()
    table().save(tmp_path / "plain")
    plain = Sources.load(tmp_path / "plain")
    assert plain is not None and plain.repeat_rate is None


def test_an_item_is_a_staple_when_its_buyers_come_back():
    spec = EncodingSpec(item_ids=["a", "b", "c"], genres=[], occupations=[], embedding_dim=4)
    train = pd.DataFrame(
        {
            "user_id": ["u1", "u1", "u2", "u2", "u3", "u1"],
            "item_id": ["a", "a", "a", "a", "a", "b"],
        }
    )
    rates = repeat_rates(train, Encoder(spec))
    # a: u1 and u2 twice, u3 once: 2 of 3 buyers came back, and one more
    # buyer who did not is counted: 2 / 4. b: once, by one: 0. c: never bought.
    np.testing.assert_allclose(rates[1:], [0.5, 0.0, 0.0])


def test_buy_again_orders_the_users_items_by_how_often_then_how_recently():
    never = np.zeros(8, bool)
    never[6] = True  # inactive now
    seeds = np.array([3, 6, 5, 2, 0, 0])
    assert buy_again(seeds, {2: 4, 5: 4, 3: 1, 6: 9}, never).tolist() == [5, 2, 3]


def test_each_consumption_is_an_interaction_where_items_are_bought_again(tmp_path):
    """A click, a cart and a purchase minutes apart are one consumption; the
    same item bought again days later is another, and the latest counts for
    the recent items."""
    data = Data()
    manifest_edit("interactions.repeat", True)(data)
    later = START + 30 * 86_400
    for k, event in enumerate(("click", "purchase")):
        row = {"user_id": "u1", "item_id": "i1", "event_type": event, "value": ""}
        data.interactions.append({**row, "timestamp": str(later + k * 60)})
    _, loaded = inspect(write(tmp_path / "repeat", data), NEEDS, now=NOW)
    assert loaded is not None and loaded.manifest.interactions.repeat
    learned = learned_interactions(loaded)
    mine = learned[(learned["user_id"] == "u1") & (learned["item_id"] == "i1")]
    assert mine["timestamp"].tolist() == [mine["timestamp"].min(), later]
    assert (mine["timestamp"].diff().dropna() >= REPEAT_GAP_S).all()
    assert recent_items(learned)["u1"][0] == "i1"
    assert len(set(recent_items(learned)["u1"])) == len(recent_items(learned)["u1"])
    _, once = inspect(tiny(tmp_path / "once"), NEEDS, now=NOW)
    assert (
        once is not None and not learned_interactions(once).duplicated(["user_id", "item_id"]).any()
    )


def test_a_graph_from_before_the_repeat_source_is_fed_the_columns_it_declares():
    feed = {
        "source_features": np.arange(12, dtype=np.float32).reshape(2, SOURCE_FEATURES),
        "user_affinity": np.zeros((2, 3), np.float32),
        "item_id": np.zeros((2, 1), np.int64),
    }
    legacy = [
        SimpleNamespace(name="item_id", shape=["batch", 1]),
        SimpleNamespace(name="source_features", shape=["batch", LEGACY_SOURCE_FEATURES]),
    ]
    fed = graph_feed(legacy, feed)
    assert sorted(fed) == ["item_id", "source_features"]  # no affinity in that graph
    assert fed["source_features"].tolist() == [[0, 1, 2, 3], [6, 7, 8, 9]]
    dynamic = [SimpleNamespace(name="source_features", shape=["batch", "width"])]
    assert graph_feed(dynamic, feed)["source_features"].shape == (2, SOURCE_FEATURES)


def test_the_generated_shop_with_staples_declares_and_has_repeats(tmp_path):
    size = ShopSize(items=300, users=60, events=20_000, repeat=True)
    report, data = inspect(write_shop(tmp_path / "shop", size, seed=1), NEEDS)
    assert not report.failed and data is not None
    assert data.manifest.interactions.repeat
    learned = learned_interactions(data)
    again = learned.groupby(["user_id", "item_id"]).size()
    assert (again > 1).groupby(level="user_id").any().mean() > 0.9  # most shoppers restock
    plain_report, plain = inspect(write_shop(tmp_path / "plain", ShopSize(300, 60, 20_000)), NEEDS)
    assert not plain_report.failed and plain is not None
    assert not plain.manifest.interactions.repeat


def test_logged_events_join_as_consumptions_where_items_are_bought_again():
    """`build --with-events`: a logged purchase a week after the export's is
    another consumption of the item (not merged into the first, as a
    re-rating is where items are not bought again); one minutes later is the same."""
    week = 7 * 86_400
    export = pd.DataFrame(
        {"user_id": ["u1"], "item_id": ["i1"], "rating": [0.0], "timestamp": [START]}
    ).astype({"rating": np.float32, "timestamp": np.int64})
    logged = pd.DataFrame(
        {
            "user_id": ["u1", "u1"],
            "item_id": ["i1", "i1"],
            "rating": [0.0, 0.0],
            "timestamp": [START + 120, START + week],
        }
    ).astype({"rating": np.float32, "timestamp": np.int64})
    empty = pd.DataFrame()
    for repeat, expected in ((True, [START, START + week]), (False, [START + week])):
        data = MovieLens(export, empty, empty, "f", repeat=repeat)
        merged = with_logged(data, LoggedEvents(logged, 0)).interactions
        assert merged["timestamp"].tolist() == expected
