"""Retraining from what was served: the kept app events a build may learn
from, merged into the dataset's interactions."""

import json

import pandas as pd

from pipelines.dataset import MovieLens
from pipelines.logged_events import read_logged, with_logged
from recserve_model.catalogue import CatalogueSchema, EventKind


def dataset():
    return MovieLens(
        interactions=pd.DataFrame(
            {
                "user_id": ["1", "1", "2"],
                "item_id": ["10", "11", "10"],
                "rating": [3.0, 4.0, 5.0],
                "timestamp": [100, 200, 300],
            }
        ),
        items=pd.DataFrame({"item_id": ["10", "11", "12"]}),
        users=pd.DataFrame({"user_id": ["1", "2"]}),
        fingerprint="base",
        catalogue=CatalogueSchema(
            {}, {"rating": EventKind("rating", has_value=True, min=1, max=5)}
        ),
    )


def test_known_rating_events_join_the_interactions_and_make_a_new_version(tmp_path):
    day = tmp_path / "events" / "app" / "2026-12-01"
    day.mkdir(parents=True)
    events = [
        {"event_id": "a", "user_id": "1", "item_id": "12", "event_type": "rating",
         "value": 5.0, "timestamp": 1000},
        {"event_id": "a", "user_id": "1", "item_id": "12", "event_type": "rating",
         "value": 1.0, "timestamp": 1001},  # the same id again (a retry): the first counts
        {"event_id": "b", "user_id": "1", "item_id": "10", "event_type": "rating",
         "value": 1.0, "timestamp": 1002},  # replaces the base dataset's 3 on item 10
        {"event_id": "c", "user_id": "9", "item_id": "10", "event_type": "rating",
         "value": 4.0, "timestamp": 1003},  # an unknown user
        {"event_id": "d", "user_id": "2", "item_id": "99", "event_type": "rating",
         "value": 4.0, "timestamp": 1004},  # an unknown item
        {"event_id": "e", "user_id": "2", "item_id": "11", "event_type": "click",
         "value": 0.0, "timestamp": 1005},  # not a rating
    ]  # fmt: skip
    (day / "10-g.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    data = dataset()
    logged = read_logged(tmp_path, data)
    assert len(logged.rows) == 2 and logged.skipped == 3
    merged = with_logged(data, logged)
    rows = {(r.user_id, r.item_id): r.rating for r in merged.interactions.itertuples()}
    assert rows == {("1", "10"): 1.0, ("1", "11"): 4.0, ("2", "10"): 5.0, ("1", "12"): 5.0}
    assert merged.fingerprint != data.fingerprint and merged.fingerprint.startswith("base+events:")
    assert with_logged(data, read_logged(tmp_path / "none", data)) is data  # no events: same


def test_a_logged_click_never_replaces_a_rating(tmp_path):
    day = tmp_path / "events" / "app" / "2026-12-01"
    day.mkdir(parents=True)
    events = [
        {"event_id": "a", "user_id": "1", "item_id": "11", "event_type": "click",
         "value": 0.0, "timestamp": 1000},  # after the base dataset's rating of 4
        {"event_id": "b", "user_id": "2", "item_id": "11", "event_type": "click",
         "value": 0.0, "timestamp": 1001},  # a new implicit interaction
    ]  # fmt: skip
    (day / "10-g.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    data = dataset()
    data.catalogue.event_types["click"] = EventKind("positive")
    merged = with_logged(data, read_logged(tmp_path, data))
    rows = {
        (r.user_id, r.item_id): (r.rating, r.timestamp) for r in merged.interactions.itertuples()
    }
    assert rows[("1", "11")] == (4.0, 200) and rows[("2", "11")] == (0.0, 1001)
    assert list(merged.interactions["timestamp"]) == sorted(merged.interactions["timestamp"])
