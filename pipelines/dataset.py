"""The build's data: a dataset directory in the contract (recserve_data),
validated and loaded as the frames the models train on, then split in time,
and the feature tables Feast serves.

MovieLens-100K is the demo dataset: imported once into the raw directory
(pipelines.movielens) and loaded through the same contract as any other.
The models learn, for now, from the events with a positive or rating role,
items' categories and year, and users' age, gender and occupation; other
declared columns are kept and filter, and are not learned from yet
(``shape_problems`` says what the build does not take).

The split is temporal per user: each user's last ``holdout`` interactions are
the test set; the ``ranker_window`` interactions before them train the
ranking model; everything earlier trains the two-tower model. Features are
computed from the training period only, so nothing from the future leaks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from pipelines import movielens
from pipelines.learned import LEARNED_ROLES, learned_interactions
from pipelines.sparse_baselines import SCORED_USERS, dense_cost, dense_ok
from recserve_data import Column, ColumnType, Dataset, InvalidDataset, Needs, Report, inspect
from recserve_feast.activity import RECENT_ITEMS, SEEN_ITEMS
from recserve_model import attribute_features
from recserve_model.catalogue import CatalogueSchema, EventKind
from recserve_model.sources import NEIGHBOUR_CANDIDATES, POPULAR_CANDIDATES, REPEAT_CANDIDATES

HOLDOUT = 10
RANKER_WINDOW = 5
# Each window user's candidates (the towers' 100 and the other sources',
# the repeat source's included) at 40 bytes each (row, label, retrieval
# score, six source features), and the ranker's scoring in chunks.
RANKER_CANDIDATES = 100 + NEIGHBOUR_CANDIDATES + POPULAR_CANDIDATES + REPEAT_CANDIDATES
RANKER_BYTES_PER_USER = RANKER_CANDIDATES * 40 + 4_096
SCORED_ROWS = 100_000  # candidate rows through the ranker at once, without gradients
RANKER_SCORING_BYTES = SCORED_ROWS * 4_096  # their activations, about


def working_set(users: int, items: int, interactions: int) -> int:
    """Bytes the build holds at its peak, about. Where the dense item-item
    models are affordable (``sparse_baselines.dense_ok``): the users x items
    training matrix (float32), the dense items x items matrices of EASE,
    item-kNN and the affinity's SVD (float64, about five at once,
    ``sparse_baselines.dense_cost``). Else: sparse matrices and chunks
    instead (sparse_baselines.py):
    the candidates' and the baselines' score blocks (200 MB and 256 users x
    items x 3 float32), a few items x 64 tables. Both: some 200 bytes per
    interaction for the split's and the features' copies of the frames, and
    a few kilobytes per user (histories, vectors, seen sets), and the
    ranker's examples (``RANKER_BYTES_PER_USER``) with the rows it scores at
    once (``SCORED_ROWS`` of a few KB of activations each)."""
    ranker = users * RANKER_BYTES_PER_USER + RANKER_SCORING_BYTES
    if dense_ok(users, items):
        return dense_cost(users, items)[0] + interactions * 200 + ranker
    blocks = 200_000_000 + SCORED_USERS * items * 4 * 3
    return blocks + items * 64 * 4 * 8 + interactions * 200 + users * 4_096 + ranker


# One tower-period interaction at least, before the ranker's window and the holdout.
NEEDS = Needs(
    min_user_interactions=HOLDOUT + RANKER_WINDOW + 1,
    working_set=working_set,
    learned_roles=frozenset(r.value for r in LEARNED_ROLES),
)
USER_COLUMNS = {"age": ColumnType.NUMERIC, "gender": ColumnType.CATEGORICAL}
USER_COLUMNS |= {"occupation": ColumnType.CATEGORICAL}


class UnsupportedDataset(ValueError):
    """A valid dataset the build cannot take yet."""


@dataclass
class MovieLens:
    interactions: pd.DataFrame  # user_id, item_id, rating, timestamp (int seconds)
    # item_id, title, year, genres (list[str]), attributes (the learned
    # declared ones, attribute_features' JSON of texts)
    items: pd.DataFrame
    # user_id, age, gender, occupation (0 and "" where not known), attributes
    users: pd.DataFrame
    fingerprint: str
    name: str = "ml100k"  # the dataset's short name: artifact versions start with it
    title: str = "MovieLens-100K (GroupLens)"
    # The declared filterable item attributes, and each item's (payload form).
    catalogue: CatalogueSchema = field(default_factory=lambda: CatalogueSchema({}))
    item_attributes: dict[str, dict[str, object]] = field(default_factory=dict)
    inactive: frozenset[str] = frozenset()  # items never recommended (indexed inactive)
    dropped_users: int = 0  # with too few learned interactions for the split
    source_dir: str = ""  # the dataset directory, recorded in the artifact's manifest
    # The declared user columns' kinds and the kept users' values of them,
    # as the dataset gives them (new users' segments are made of these).
    user_kinds: dict[str, str] = field(default_factory=dict)
    user_attributes: pd.DataFrame | None = None
    # The declared columns the models learn from beside the fixed ones, by
    # kind (the ``attributes`` columns of items and users hold their values).
    item_learned: dict[str, str] = field(default_factory=dict)
    user_learned: dict[str, str] = field(default_factory=dict)
    # Items are bought again (the manifest's ``repeat``): the interactions
    # hold each consumption, a user's own items are candidates, and the
    # evaluation counts a held-out repeat as a hit (``pipelines.evaluate``).
    repeat: bool = False


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


# The columns the encoder always had places for, beside items' categories;
# every other declared categorical, tags, boolean or numeric column is
# learned as a declared attribute (recserve_model.attribute_features).
LEARNED_ITEM_COLUMNS = {"year": ColumnType.NUMERIC}
LEARNED_USER_COLUMNS = USER_COLUMNS


def declared_attributes(columns: dict[str, Column], fixed: dict[str, ColumnType]) -> dict[str, str]:
    """The declared columns learned as attributes, by kind: text, vector and
    timestamp columns are kept, not learned."""
    return {
        name: column.type.value
        for name, column in columns.items()
        if column.type.value in attribute_features.KINDS and name not in fixed
    }


def attribute_json(frame: pd.DataFrame, kinds: dict[str, str]) -> list[str]:
    """Each row's learned attributes in the form Feast stores (JSON of texts)."""
    names = list(kinds)
    if not names:
        return ["{}"] * len(frame)
    out = []
    for row in frame[names].astype(object).itertuples(index=False, name=None):
        texts = {}
        for name, value in zip(names, row, strict=True):
            text = attribute_features.as_text(kinds[name], present(value))
            if text is not None:
                texts[name] = text
        out.append(attribute_features.texts_json(texts))
    return out


def shape_problems(data: Dataset) -> list[str]:
    """What the build does not take yet in a valid dataset: a learned
    column (items' year; users' age, gender, occupation) of another type,
    or no event type it can learn from (positive or rating)."""
    problems = []
    spec = data.manifest
    tables = [("item", spec.items.columns, LEARNED_ITEM_COLUMNS)]
    if spec.users is not None:
        tables.append(("user", spec.users.columns, LEARNED_USER_COLUMNS))
    for table, columns, learned in tables:
        for name, expected in learned.items():
            column = columns.get(name)
            if column is not None and column.type is not expected:
                problems.append(
                    f"{table} column {name!r} is {column.type.value}: the build learns it as "
                    f"{expected.value}"
                )
    roles = {e.role for e in spec.interactions.event_types.values()}
    if not roles & set(LEARNED_ROLES):
        problems.append(
            f"event types with roles {sorted(r.value for r in roles)}: none positive or rating, "
            "nothing to learn from"
        )
    return problems


def movielens_frames(data: Dataset) -> MovieLens:
    """The frames the build trains on, from any dataset it takes: the learned
    interactions of users with enough of them for the split; items with
    their categories and year (0 where none); users with age, gender and
    occupation (0 and "" where not declared, or without a users table)."""
    interactions = learned_interactions(data)
    counts = interactions["user_id"].value_counts()
    enough = counts.index[counts >= NEEDS.min_user_interactions]
    dropped = int(data.interactions["user_id"].nunique() - len(enough))
    interactions = interactions[interactions["user_id"].isin(enough)].reset_index(drop=True)
    declared = data.items.columns
    manifest = data.manifest
    item_learned = declared_attributes(manifest.items.columns, LEARNED_ITEM_COLUMNS)
    user_learned: dict[str, str] = {}
    if manifest.users is not None:
        user_learned = declared_attributes(manifest.users.columns, LEARNED_USER_COLUMNS)
    items = pd.DataFrame(
        {
            "item_id": data.items["item_id"],
            "title": data.items["title"],
            "year": data.items["year"].fillna(0).astype(np.int32) if "year" in declared else 0,
            "genres": data.items["categories"],
            "attributes": attribute_json(data.items, item_learned),
        }
    ).astype({"year": np.int32})
    users = user_frame(data, set(enough), user_learned)
    inactive = frozenset(data.items.loc[~data.items["active"].astype(bool), "item_id"])
    schema, values = catalogue_of(data)
    kinds = {}
    if manifest.users is not None:
        kinds = {name: c.type.value for name, c in manifest.users.columns.items()}
    attributes = users[["user_id"]].merge(
        data.users[["user_id", *kinds]] if data.users is not None else users[["user_id"]],
        on="user_id",
        how="left",
    )
    return MovieLens(
        interactions,
        items,
        users,
        data.fingerprint,
        manifest.name,
        manifest.title,
        schema,
        values,
        inactive,
        dropped,
        user_kinds=kinds,
        user_attributes=attributes,
        item_learned=item_learned,
        user_learned=user_learned,
        repeat=manifest.interactions.repeat,
    )


def user_frame(data: Dataset, users: set[str], learned: dict[str, str]) -> pd.DataFrame:
    """user_id, age, gender, occupation and the learned attributes of the given users."""
    if data.users is None:
        frame = pd.DataFrame({"user_id": sorted(users)})
    else:
        frame = data.users[data.users["user_id"].isin(users)].reset_index(drop=True)
    defaults = {"age": 0, "gender": "", "occupation": ""}
    out = pd.DataFrame({"user_id": frame["user_id"]})
    for name, default in defaults.items():
        column = frame[name] if name in frame else pd.Series(default, index=frame.index)
        out[name] = column.fillna(default)
    out["attributes"] = attribute_json(frame, learned)
    return out.astype({"age": np.int32, "gender": str, "occupation": str})


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
    frames = replace(movielens_frames(data), source_dir=str(directory.resolve()))
    if frames.interactions.empty:
        raise UnsupportedDataset(
            f"{directory} is a valid dataset, but no user has {NEEDS.min_user_interactions} "
            "items with a positive or rating event (the split's minimum): nothing to train on"
        )
    return report, frames


def artifact_dataset(artifact_dir: Path) -> Path | None:
    """The dataset directory an artifact was built from, if its manifest
    says and it is still there (None: the demo's, as before the record)."""
    manifest = json.loads((artifact_dir / "manifest.json").read_text())
    recorded = Path(str(manifest.get("dataset_dir", "")))
    return recorded if manifest.get("dataset_dir") and recorded.is_dir() else None


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
    """Each user's last n distinct training items, most recent first (an
    item bought again counts at its latest), as the features service keeps them."""
    ordered = train.sort_values(["user_id", "timestamp", "item_id"], kind="stable")
    return ordered.groupby("user_id")["item_id"].agg(lambda s: list(dict.fromkeys(s[::-1]))[:n])


def feature_tables(data: MovieLens, train: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The four tables Feast serves, computed from ``train`` alone.

    Serving uses the whole training period; the ranker trains on tables as of
    the end of the two-tower period, so its features never count the very
    interactions it learns to predict.
    """
    ts = pd.Timestamp(int(train["timestamp"].max()), unit="s", tz="UTC")
    user_profile = data.users.assign(event_timestamp=ts)
    # Means over ratings only (0: an implicit interaction), as the features
    # service keeps them online (recserve_feast.activity).
    rated = train.assign(rating=train["rating"].where(train["rating"] > 0))
    stats = rated.groupby("user_id").agg(
        rating_count=("rating", "size"), mean_rating=("rating", "mean")
    )
    stats["mean_rating"] = stats["mean_rating"].fillna(0.0)
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
        rated.groupby("item_id")
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
