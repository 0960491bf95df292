"""The nightly job's user tables caught up with the logged events: the
artifact's snapshot of each user's activity, with every rating event the
gateways kept since it was built folded in by the features service's own
rule (recserve_feast.activity), so tonight's lists count what users did
today (exclude what they rated, start from their latest history).

An artifact built with the events (``pipelines build --with-events``)
already has the ones received before it was made: only later ones are
folded. An event received while that build read the log is counted by
neither (a build takes seconds, the nightly runs daily)."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

from pipelines.logged_events import LoggedEvents, learned_values, logged_ratings
from recserve_feast.activity import Activity
from recserve_model.catalogue import CatalogueSchema


def new_since(artifact: Path) -> float:
    """Events received after this (unix seconds) are new to the artifact."""
    manifest = json.loads((artifact / "manifest.json").read_text())
    if not manifest.get("logged_events"):
        return 0.0  # built from the base dataset alone: every logged event is new
    made = datetime.strptime(manifest["created_at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return made.timestamp()


def fold(activity: pd.DataFrame, logged: LoggedEvents) -> pd.DataFrame:
    """``activity`` (user_activity rows) with ``logged``'s events applied in
    time order; users with no row before get one."""
    if logged.rows.empty:
        return activity
    before = activity.set_index("user_id")
    rows = []
    events = logged.rows.sort_values("timestamp", kind="stable")
    for user_id, mine in events.groupby("user_id", sort=True):
        if user_id in before.index:
            r = before.loc[user_id]
            state = Activity.of(r.rating_count, r.mean_rating, r.recent_item_ids, r.seen_item_ids)
        else:
            state = Activity.of(0, 0.0, [], [])
        state.extend(zip(mine["item_id"], mine["rating"].astype(float), strict=True))
        rows.append({"user_id": user_id, **state.columns()})
    updated = pd.DataFrame(rows)
    updated["rating_count"] = updated["rating_count"].astype(np.int64)
    updated["mean_rating"] = updated["mean_rating"].astype(np.float32)
    latest = pd.Timestamp(int(events["timestamp"].max()), unit="s", tz="UTC")
    updated["event_timestamp"] = pd.Series(latest, index=updated.index).astype(
        activity["event_timestamp"].dtype
    )
    kept = activity[~activity["user_id"].isin(updated["user_id"])]
    return pd.concat([kept, updated[activity.columns]], ignore_index=True)


def features_with_events(data_dir: Path, artifact: Path, out: Path) -> LoggedEvents:
    """Writes user_profile and user_activity with the new events to ``out``."""
    features = artifact / "features"
    profile = pd.read_parquet(features / "user_profile.parquet", columns=["user_id"])
    items = pd.read_parquet(features / "item_profile.parquet", columns=["item_id"])
    schema = CatalogueSchema.load(artifact)
    logged = logged_ratings(
        data_dir / "events" / "app",
        learned_values(schema.event_types),
        set(profile["user_id"]),
        set(items["item_id"]),
        received_after=new_since(artifact),
    )
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy2(features / "user_profile.parquet", out / "user_profile.parquet")
    activity = pd.read_parquet(features / "user_activity.parquet")
    fold(activity, logged).to_parquet(out / "user_activity.parquet", index=False)
    return logged
