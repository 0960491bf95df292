"""App events on their way to the users' live features: which roles change
them, and a rating on another scale mapped onto the features' 0.5-5; the
kept events' ids a restarted gateway remembers."""

import asyncio

from recserve_kit.jsonl_log import JsonlLog
from recserve_model.catalogue import CatalogueSchema, EventKind
from services.gateway.events import EventLog, online_events


def test_events_reach_the_live_features_on_their_scale():
    schema = CatalogueSchema(
        {},
        {
            "rating": EventKind("rating", has_value=True, min=1, max=5),
            "stars10": EventKind("rating", has_value=True, min=1, max=10),
            "click": EventKind("positive"),
            "view": EventKind("exposure"),
            "hide": EventKind("negative"),
        },
    )
    records = [
        {"user_id": "u", "item_id": str(n), "event_type": t, "value": v, "timestamp": 1700000000}
        for n, (t, v) in enumerate(
            [
                ("rating", 4.0),
                ("stars10", 10.0),
                ("stars10", 1.0),
                ("click", 0),
                ("view", 0),
                ("hide", 0),
            ]
        )
    ]
    sent = online_events(records, schema)
    assert [(e.item_id, e.rating) for e in sent] == [("0", 4.0), ("1", 5.0), ("2", 0.5), ("3", 0.0)]
    assert sent[0].event_time.seconds == 1700000000


def test_a_restarted_gateway_remembers_the_newest_kept_ids_and_refuses_them_again(tmp_path):
    """It reads back only as many ids as it remembers, the newest: one of
    them retried is a duplicate; an older one, past what it remembers, is
    kept again (as before a restart, where the oldest are forgotten)."""
    earlier = JsonlLog(tmp_path, background=False)
    earlier.write([{"event_id": f"e{n}", "user_id": "u"} for n in range(10)])
    earlier.close()
    restarted = EventLog(tmp_path, remember=4)
    assert list(restarted.kept) == ["e6", "e7", "e8", "e9"]
    again = [{"event_id": "e9", "user_id": "u"}, {"event_id": "e1", "user_id": "u"}]
    assert [r["event_id"] for r in asyncio.run(restarted.keep(again))] == ["e1"]
    restarted.close()
