"""App events past their keep folded into a base (pipelines/compact.py): the
days' folders go, the base validates, and every later snapshot learns exactly
what it would have learned from the whole log, through a second compaction
that supersedes the first base too."""

import json
import time

import pandas as pd
import pytest
from typer.testing import CliRunner

from pipelines.__main__ import app
from pipelines.compact import CompactionRefused, compact
from pipelines.shop import ShopSize, write_shop
from pipelines.snapshot import snapshot
from recserve_data import load
from tests.integration.test_living_dataset import event

DAY_S = 86_400


def write_day(data_dir, day_start: float, n: int, shoppers: list[str], items: list[str]) -> None:
    """Clicks of one UTC day in that day's folder, as the gateways keep them."""
    folder = data_dir / "events" / "app" / time.strftime("%Y-%m-%d", time.gmtime(day_start))
    folder.mkdir(parents=True, exist_ok=True)
    records = [
        event(n * 1000 + k, shoppers[(n + k) % len(shoppers)], items[k % len(items)], "click",
              int(day_start) + 60 * k)
        for k in range(20)
    ]  # fmt: skip
    records.append(event(n * 1000, f"signup-{n}", items[0], "click", int(day_start) + 5))
    (folder / "10-gateway.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def rows(dataset_dir) -> pd.DataFrame:
    frame = load(dataset_dir).interactions[["user_id", "item_id", "event_type", "timestamp"]]
    return frame.sort_values(list(frame.columns)).reset_index(drop=True)


def users(dataset_dir) -> list[str]:
    return sorted(load(dataset_dir).users["user_id"])


@pytest.fixture
def shop(tmp_path):
    export = write_shop(tmp_path / "export", ShopSize(items=120, users=60, events=3000), seed=3)
    data = load(export)
    return export, sorted(data.users["user_id"]), sorted(data.items["item_id"])


def test_folded_days_go_and_every_later_snapshot_learns_the_same(tmp_path, shop):
    export, shoppers, items = shop
    data_dir = tmp_path / "data"
    now = time.time()
    today = now - now % DAY_S
    for n, days_ago in enumerate((9, 8, 5, 1, 0)):
        write_day(data_dir, today - days_ago * DAY_S, n, shoppers, items)
    whole = snapshot(data_dir, export, tmp_path / "whole")
    assert whole.events_used == 5 * 21 and whole.new_users == 5

    first = compact(data_dir, export, keep_days=7, now=now)
    assert first.events_folded == 2 * 21 and len(first.removed_days) == 2
    left = sorted(p.name for p in (data_dir / "events" / "app").iterdir())
    assert len(left) == 3 and first.through < left[0]
    after = snapshot(data_dir, export, tmp_path / "after")
    assert after.base == first.base and after.events_used == 3 * 21
    assert after.events_total == whole.events_total
    pd.testing.assert_frame_equal(rows(tmp_path / "after"), rows(tmp_path / "whole"))
    assert users(tmp_path / "after") == users(tmp_path / "whole")

    # A week later: the next base holds the first's days and the new ones;
    # the first base goes, and a snapshot made from it starts over right.
    second = compact(data_dir, tmp_path / "after", keep_days=1, now=now + DAY_S)
    assert second.removed_bases == [first.through] and second.events_folded == 2 * 21
    assert sorted(p.name for p in (data_dir / "events" / "app").iterdir()) == left[2:]
    again = snapshot(data_dir, tmp_path / "after", tmp_path / "again")
    assert again.base == second.base and again.events_used == 21
    pd.testing.assert_frame_equal(rows(tmp_path / "again"), rows(tmp_path / "whole"))
    assert users(tmp_path / "again") == users(tmp_path / "whole")
    # Nothing old enough: no base, nothing removed.
    assert compact(data_dir, export, keep_days=7, now=now + DAY_S).base == ""


def test_todays_events_are_never_folded_and_the_command_says_what_it_did(tmp_path, shop):
    export, shoppers, items = shop
    data_dir = tmp_path / "data"
    with pytest.raises(CompactionRefused, match="keep_days"):
        compact(data_dir, export, keep_days=0)
    now = time.time()
    write_day(data_dir, now - 3 * DAY_S, 1, shoppers, items)
    command = ["compact", "--data-dir", str(data_dir), "--dataset", str(export), "--keep-days", "2"]
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 0, result.output
    assert "21 events" in result.output and "removed days" in result.output
    assert not any((data_dir / "events" / "app").iterdir())
