"""The nightly job's user tables with the logged events folded in: by the
features service's own rule, ratings and positive events (a click counts,
as an implicit interaction outside the mean rating) of known users and
items, only those the artifact does not have already."""

import json

import numpy as np
import pandas as pd
import pytest

from pipelines.rescore.with_events import features_with_events
from recserve_model.catalogue import CatalogueSchema, EventKind

BUILT_AT = 1_700_000_000.0  # 2023-11-14T22:13:20Z


def artifact(tmp_path, logged_events: int):
    directory = tmp_path / "artifact"
    features = directory / "features"
    features.mkdir(parents=True)
    ts = pd.Timestamp("1998-04-22", tz="UTC")
    pd.DataFrame({"user_id": ["1", "2", "3"], "age": [20, 30, 40]}).to_parquet(
        features / "user_profile.parquet"
    )
    activity = pd.DataFrame(
        {
            "user_id": ["1", "2"],
            "rating_count": np.array([2, 1], dtype=np.int64),
            "mean_rating": np.array([4.0, 3.0], dtype=np.float32),
            "recent_item_ids": [["a", "b"], ["b"]],
            "seen_item_ids": [["a", "b"], ["b"]],
            "event_timestamp": [ts, ts],
        }
    )
    activity.to_parquet(features / "user_activity.parquet")
    pd.DataFrame({"item_id": list("abcde")}).to_parquet(features / "item_profile.parquet")
    rating = EventKind("rating", has_value=True, min=1.0, max=5.0)
    CatalogueSchema({}, {"rating": rating, "click": EventKind("positive")}).save(directory)
    manifest = {"created_at": "2023-11-14T22:13:20Z", "logged_events": logged_events}
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return directory


def log_events(data_dir, events):
    path = data_dir / "events" / "app" / "2023-11-14" / "00-gateway.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as out:
        for n, (user, item, kind, value, received) in enumerate(events):
            record = {"event_id": f"e{n}", "user_id": user, "item_id": item, "event_type": kind,
                      "value": value, "timestamp": int(received), "recommendation_id": "",
                      "received_at": received}  # fmt: skip
            out.write(json.dumps(record) + "\n")


EVENTS = [
    ("1", "c", "rating", 5.0, BUILT_AT + 10),
    ("1", "a", "rating", 3.0, BUILT_AT + 20),  # again: to the front, counted once more
    ("3", "d", "rating", 2.0, BUILT_AT + 30),  # a user with no activity yet
    ("2", "zz", "rating", 4.0, BUILT_AT + 40),  # an unknown item
    ("2", "c", "click", 0.0, BUILT_AT + 50),  # positive: counted, not in the mean
    ("2", "e", "rating", 1.0, BUILT_AT - 50),  # before the build
]


@pytest.mark.parametrize("built_with_events", [False, True])
def test_new_rating_events_update_the_users_activity(tmp_path, built_with_events):
    data_dir = tmp_path / "data"
    log_events(data_dir, EVENTS)
    out = tmp_path / "out"
    logged = features_with_events(data_dir, artifact(tmp_path, int(built_with_events)), out)
    activity = pd.read_parquet(out / "user_activity.parquet").set_index("user_id")
    one = activity.loc["1"]
    assert list(one.recent_item_ids) == ["a", "c", "b"] and list(one.seen_item_ids) == [
        "a",
        "c",
        "b",
    ]
    assert one.rating_count == 4 and one.mean_rating == pytest.approx((4.0 * 2 + 5 + 3) / 4)
    assert list(activity.loc["3"].recent_item_ids) == ["d"] and activity.loc["3"].rating_count == 1
    assert logged.skipped == 1  # the unknown item
    two = activity.loc["2"]
    if built_with_events:  # the event before the build is in the artifact already
        assert list(two.recent_item_ids) == ["c", "b"] and two.rating_count == 2
        assert two.mean_rating == pytest.approx(3.0)
    else:
        assert list(two.recent_item_ids) == ["c", "e", "b"] and two.rating_count == 3
        assert two.mean_rating == pytest.approx((3.0 + 1.0) / 2)
    assert (
        activity["event_timestamp"].dtype
        == pd.read_parquet(tmp_path / "artifact" / "features" / "user_activity.parquet")[
            "event_timestamp"
        ].dtype
    )
    profile = pd.read_parquet(out / "user_profile.parquet")
    assert list(profile["user_id"]) == ["1", "2", "3"]


def test_no_events_leaves_the_tables_as_they_were(tmp_path):
    out = tmp_path / "out"
    logged = features_with_events(tmp_path / "data", artifact(tmp_path, 0), out)
    assert logged.rows.empty
    before = pd.read_parquet(tmp_path / "artifact" / "features" / "user_activity.parquet")
    pd.testing.assert_frame_equal(pd.read_parquet(out / "user_activity.parquet"), before)
