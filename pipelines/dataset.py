"""The build's data: a dataset directory in the contract (recserve_data),
validated and loaded as the frames the models train on, then split in time,
and the feature tables Feast serves.

MovieLens-100K is the demo dataset: imported once into the raw directory
(pipelines.movielens) and loaded through the same contract as any other. The
build takes, for now, datasets of MovieLens's shape only (``shape_problems``
says what else it does not support yet).

The split is temporal per user: each user's last ``holdout`` interactions are
the test set; the ``ranker_window`` interactions before them train the
ranking model; everything earlier trains the two-tower model. Features are
computed from the training period only, so nothing from the future leaks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from pipelines import movielens
from recserve_data import Column, ColumnType, Dataset, InvalidDataset, Needs, Report, Role, inspect
from recserve_feast.activity import RECENT_ITEMS, SEEN_ITEMS
from recserve_model.catalogue import CatalogueSchema, EventKind

HOLDOUT = 10
RANKER_WINDOW = 5


def working_set(users: int, items: int, interactions: int) -> int:
    """Bytes the build holds at its peak, about: the users x items training
    matrix (float32), the dense items x items matrices of EASE, item-kNN and
    the affinity's SVD (float64, about five at once), and some 200 bytes per
    interaction for the split's and the features' copies of the frames."""
    return users * items * 4 + items * items * 8 * 5 + interactions * 200


# One tower-period interaction at least, before the ranker's window and the holdout.
NEEDS = Needs(min_user_interactions=HOLDOUT + RANKER_WINDOW + 1, working_set=working_set)
USER_COLUMNS = {"age": ColumnType.NUMERIC, "gender": ColumnType.CATEGORICAL}
USER_COLUMNS |= {"occupation": ColumnType.CATEGORICAL}


class UnsupportedDataset(ValueError):
    """A valid dataset the build cannot take yet."""


@dataclass
class MovieLens:
    interactions: pd.DataFrame  # user_id, item_id, rating, timestamp (int seconds)
    items: pd.DataFrame  # item_id, title, year, genres (list[str])
    users: pd.DataFrame  # user_id, age, gender, occupation
    fingerprint: str
    name: str = "ml100k"  # the dataset's short name: artifact versions start with it
    title: str = "MovieLens-100K (GroupLens)"
    # The declared filterable item attributes, and each item's (payload form).
    catalogue: CatalogueSchema = field(default_factory=lambda: CatalogueSchema({}))
    item_attributes: dict[str, dict[str, object]] = field(default_factory=dict)


def catalogue_of(data: Dataset) -> tuple[CatalogueSchema, dict[str, dict[str, object]]]:
    """The filterable attributes the manifest declares for items, and every
    item's values of them, as the retriever's payload holds them."""
    declared = data.manifest.items.columns
    events = {
        name: EventKind(e.role.value, e.weight, e.value_column is not None, e.min, e.max)
        for name, e in data.manifest.interactions.event_types.items()
    }
    schema = CatalogueSchema(
        {name: column.type.value for name, column in declared.items() if column.filterable},
        events,
    )
    names = sorted(schema.attributes)
    rows = data.items[["item_id", *names]].astype(object).itertuples(index=False, name=None)
    values = {
        str(row[0]): schema.stored({n: present(v) for n, v in zip(names, row[1:], strict=True)})
        for row in rows
    }
    return schema, values


def present(value: object) -> object:
    """The value, or None for any of pandas' missing values."""
    if isinstance(value, list | tuple | np.ndarray):
        return list(value)
    return None if pd.isna(value) else value  # type: ignore[call-overload]


def learned(columns: Mapping[str, Column]) -> dict[str, ColumnType]:
    """The declared columns a model could learn from: every one but text."""
    return {n: c.type for n, c in columns.items() if c.type is not ColumnType.TEXT}


def shape_problems(data: Dataset) -> list[str]:
    """What the build does not support yet in a valid dataset: anything
    beyond MovieLens's shape (one rating event type; items with a numeric
    year; users with age, gender and occupation; every item active)."""
    problems = []
    spec = data.manifest
    events = spec.interactions.event_types
    if len(events) != 1 or next(iter(events.values())).role is not Role.RATING:
        problems.append(f"event types {sorted(events)}: only one event type, a rating")
    extra = sorted(set(spec.interactions.columns) - {e.value_column for e in events.values()})
    if extra:
        problems.append(f"interaction columns {extra}: none beyond the rating's value")
    # Text columns (a source's own ids, descriptions) are kept, not learned from.
    item_columns = learned(spec.items.columns)
    if item_columns != {"year": ColumnType.NUMERIC}:
        problems.append(
            f"item columns {sorted(item_columns)}: exactly one beside text, year (numeric)"
        )
    users = learned(spec.users.columns) if spec.users else None
    if users != USER_COLUMNS:
        problems.append(
            f"user columns {users}: a users table with exactly age (numeric), gender and "
            "occupation (categorical) beside text"
        )
    inactive = int((~data.items["active"]).sum())
    if inactive:
        problems.append(f"{inactive} inactive items: every item active")
    return problems


def movielens_frames(data: Dataset) -> MovieLens:
    """The frames the build trains on, from a dataset of MovieLens's shape."""
    value = next(iter(data.manifest.interactions.event_types.values())).value_column or ""
    events = data.interactions
    interactions = pd.DataFrame(
        {
            "user_id": events["user_id"],
            "item_id": events["item_id"],
            "rating": events[value].astype(np.float32),
            "timestamp": events["timestamp"].astype(np.int64),
        }
    )
    items = pd.DataFrame(
        {
            "item_id": data.items["item_id"],
            "title": data.items["title"],
            "year": data.items["year"].fillna(0).astype(np.int32),
            "genres": data.items["categories"],
        }
    )
    assert data.users is not None  # shape_problems requires a users table
    users = data.users[["user_id", "age", "gender", "occupation"]].copy()
    users["age"] = users["age"].astype(np.int32)
    manifest = data.manifest
    schema, values = catalogue_of(data)
    return MovieLens(
        interactions, items, users, data.fingerprint, manifest.name, manifest.title, schema, values
    )


def read_dataset(directory: Path) -> tuple[Report, MovieLens]:
    """Validate (``InvalidDataset`` on any FAIL), then check the shape
    (``UnsupportedDataset``), then the frames."""
    report, data = inspect(directory, NEEDS)
    if data is None:
        raise InvalidDataset(report)
    problems = shape_problems(data)
    if problems:
        raise UnsupportedDataset(
            f"{directory} is a valid dataset, but the build does not support yet: "
            + "; ".join(problems)
        )
    return report, movielens_frames(data)


def load_movielens(raw_dir: Path, dataset_dir: Path | None = None) -> MovieLens:
    """The demo dataset, MovieLens-100K, through the contract; or the
    dataset directory an artifact was built from."""
    return read_dataset(dataset_dir or movielens.demo_dataset(raw_dir))[1]


@dataclass
class Split:
    tower_train: pd.DataFrame  # trains the two-tower model
    ranker_train: pd.DataFrame  # trains the ranking model (later in time)
    test: pd.DataFrame  # held out for evaluation (latest)
    snapshot_ts: int  # last training timestamp: the features' event time

    @property
    def train(self) -> pd.DataFrame:
        return pd.concat([self.tower_train, self.ranker_train], ignore_index=True)


def temporal_split(
    interactions: pd.DataFrame, holdout: int = HOLDOUT, ranker_window: int = RANKER_WINDOW
) -> Split:
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
