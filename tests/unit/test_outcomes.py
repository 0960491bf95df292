"""The outcome report: impressions joined with app events per version, arm
and surface; what converts; two arms compared (interval and p-value)."""

import json
import math
import time

import pytest

from recserve_delivery.outcomes import ArmOutcomes, Cell, compare, outcomes
from recserve_model.catalogue import CatalogueSchema, EventKind

SCHEMA = CatalogueSchema(
    {},
    {
        "click": EventKind("positive"),
        "view": EventKind("exposure"),
        "rating": EventKind("rating", has_value=True, min=1, max=5),
    },
)


def write(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def impression(rid, arm, items, version="v1", surface="home"):
    return {"recommendation_id": rid, "model_version": version, "arm": arm,
            "surface": surface, "items": items}  # fmt: skip


def event(eid, rid, item, kind="click", value=0.0):
    return {"event_id": eid, "recommendation_id": rid, "item_id": item,
            "event_type": kind, "value": value}  # fmt: skip


def test_lists_convert_once_on_a_positive_event_for_an_item_they_showed(tmp_path):
    write(tmp_path / "events/impressions/d/00-a.jsonl", [
        impression("r1", "stable", ["1", "2"]),
        impression("r2", "stable", ["3"]),
        impression("r3", "candidate", ["4"], version="v2"),
    ])  # fmt: skip
    write(tmp_path / "events/app/d/00-a.jsonl", [
        event("e1", "r1", "1"), event("e2", "r1", "2"),  # one list, converted once
        event("e1", "r1", "1"),  # a retry kept twice: read once
        event("e3", "r2", "3", "view"),  # an exposure converts nothing
        event("e4", "r3", "4", "rating", 4.0),  # a good rating converts
        event("e5", "r3", "9"),  # an item the list did not show
        event("e6", "nope", "1"),  # a list no impression records
    ])  # fmt: skip
    report = outcomes(tmp_path, SCHEMA)
    stable = report.cells[("v1", "stable", "home")]
    assert (stable.lists, stable.items_shown, stable.converted) == (2, 3, 1)
    assert dict(stable.events) == {"click": 2, "view": 1}
    candidate = report.cells[("v2", "candidate", "home")]
    assert (candidate.lists, candidate.converted, candidate.rate) == (1, 1, 1.0)
    assert report.unattributed == 2


def test_two_arms_compared_with_an_interval_and_p_value():
    same = compare(Cell(lists=1000, converted=100), Cell(lists=1000, converted=100))
    assert same.difference == 0 and same.p_value == pytest.approx(1.0)
    assert same.low < 0 < same.high
    better = compare(Cell(lists=2000, converted=200), Cell(lists=2000, converted=280))
    assert better.difference == pytest.approx(0.04) and better.p_value < 0.001
    assert 0 < better.low < 0.04 < better.high
    # z = 0.04 / sqrt(p(1-p)(2/2000)) with p = 0.12
    z = 0.04 / math.sqrt(0.12 * 0.88 * (2 / 2000))
    assert better.p_value == pytest.approx(math.erfc(z / math.sqrt(2)), rel=1e-6)
    empty = compare(Cell(), Cell(lists=10, converted=1))
    assert empty.p_value == 1.0


def test_the_report_remembers_one_attribution_window_of_lists(tmp_path):
    """Hour by hour in time order: an event names a list shown within the
    window (attributed) or before it (unattributed, the list forgotten)."""
    hour = 3600.0
    day0 = 1_700_000_000 - 1_700_000_000 % 86_400  # a midnight, UTC
    shown_at = {"early": day0 + 1 * hour, "late": day0 + 20 * hour}

    def folder(at):
        return time.strftime("%Y-%m-%d/%H", time.gmtime(at))

    for rid, at in shown_at.items():
        write(tmp_path / f"events/impressions/{folder(at)}-a.jsonl",
              [{**impression(rid, "stable", ["1"]), "at": at}])  # fmt: skip
    clicks = {"e1": ("early", day0 + 3 * hour), "e2": ("late", day0 + 50 * hour),
              "e3": ("late", day0 + 22 * hour)}  # fmt: skip
    for eid, (rid, at) in clicks.items():
        write(tmp_path / f"events/app/{folder(at)}-a.jsonl",
              [{**event(eid, rid, "1"), "received_at": at}])  # fmt: skip
    report = outcomes(tmp_path, SCHEMA, window_s=24 * hour)
    stable = report.cells[("v1", "stable", "home")]
    # e1 (2 h after its list) and e3 (2 h after) convert; e2 came 30 h after.
    assert (stable.lists, stable.converted, report.unattributed) == (2, 2, 1)
    # The same logs with an unbounded window: e2 is attributed too.
    assert outcomes(tmp_path, SCHEMA, window_s=math.inf).unattributed == 0


def test_a_rollouts_arms_hold_the_lists_of_one_window_however_long_it_runs(tmp_path):
    hour = 3600.0
    start = 1_700_000_000.0
    arms = ArmOutcomes(tmp_path, SCHEMA, {"v1": "stable"}, start, window_s=3 * hour)
    held = []
    for h in range(48):
        at = start + h * hour
        folder = time.strftime("%Y-%m-%d/%H", time.gmtime(at))
        write(tmp_path / f"events/impressions/{folder}-a.jsonl", [
            {**impression(f"r{h}-{n}", "stable", ["1", "2"]), "at": at + n} for n in range(100)
        ])  # fmt: skip
        write(tmp_path / f"events/app/{folder}-a.jsonl",
              [{**event(f"e{h}", f"r{h}-0", "1"), "received_at": at + 60}])  # fmt: skip
        cells = arms.update()
        held.append(len(arms.join))
    assert cells["stable"].lists == 4800 and cells["stable"].converted == 48
    assert max(held) <= 4 * 100  # three hours' lists and the newest hour's
