"""The Feast feature repository: entities, feature views over the pipeline's
parquet tables, the push source for real-time activity, and the feature
services that name exactly what the ranker and the gateway read.

``apply_and_publish`` is the pipeline's publish step for features (`feast
apply` plus materialization into the online store), run by
``python -m pipelines publish`` and, for a fresh data dir, by the features
service at start. SQLite is the default online store; Redis when
RECSERVE_FEATURES_REDIS_URL is set.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from feast import Entity, FeatureService, FeatureStore, FeatureView, Field, FileSource, PushSource
from feast.repo_config import RepoConfig
from feast.types import Array, Float32, Int64, String
from feast.value_type import ValueType

from recserve_feast.stores import redis_connection
from recserve_model import published

PROJECT = "recserve"
USER_PUSH_SOURCE = "user_activity_push"
ITEM_PUSH_SOURCE = "item_stats_push"
VECTOR_PUSH_SOURCE = "user_vectors_push"
USER_VECTORS = "user_vectors"
TTL = timedelta(days=365 * 50)  # MovieLens timestamps are from 1997-98

user = Entity(name="user", join_keys=["user_id"], value_type=ValueType.STRING)
item = Entity(name="item", join_keys=["item_id"], value_type=ValueType.STRING)


def _source(features_dir: Path, table: str) -> FileSource:
    return FileSource(
        name=f"{table}_source",
        path=str(features_dir / f"{table}.parquet"),
        timestamp_field="event_timestamp",
    )


def _view(name: str, entity: Entity, schema: list[Field], source: Any) -> FeatureView:
    return FeatureView(
        name=name, entities=[entity], ttl=TTL, online=True, schema=schema, source=source
    )


def definitions(features_dir: Path) -> list[Any]:
    activity_push = PushSource(
        name=USER_PUSH_SOURCE, batch_source=_source(features_dir, "user_activity")
    )
    users = user_views(features_dir, activity_push)
    items = item_views(features_dir)
    return [
        user,
        item,
        activity_push,
        *users,
        *items,
        # What the ranker's user tower and ranking model read about a user
        # (and the user's vector, computed for that profile)...
        FeatureService(name="user_features", features=list[Any](users)),
        # ...and about each candidate (also the gateway's titles and genres).
        FeatureService(name="item_features", features=list[Any](items)),
    ]


def attributes_field(features_dir: Path, table: str) -> list[Field]:
    """The declared attributes the models read (JSON of texts,
    recserve_model.attribute_features), any dataset's in one field; none in
    an artifact built before them (the features service serves it as before)."""
    path = features_dir / f"{table}.parquet"
    if path.exists() and "attributes" not in pq.read_schema(path).names:
        return []
    return [Field(name="attributes", dtype=String)]


def user_views(features_dir: Path, activity_push: PushSource) -> list[FeatureView]:
    """A user's profile, activity and (artifacts since) stored vector."""
    profile = _view(
        "user_profile",
        user,
        [
            Field(name="age", dtype=Int64),
            Field(name="gender", dtype=String),
            Field(name="occupation", dtype=String),
            *attributes_field(features_dir, "user_profile"),
        ],
        _source(features_dir, "user_profile"),
    )
    activity = _view(
        "user_activity",
        user,
        [
            Field(name="rating_count", dtype=Int64),
            Field(name="mean_rating", dtype=Float32),
            Field(name="recent_item_ids", dtype=Array(String)),
            Field(name="seen_item_ids", dtype=Array(String)),
        ],
        activity_push,
    )
    vectors = user_vector_view(features_dir)
    return [profile, activity, *([vectors] if vectors is not None else [])]


def item_views(features_dir: Path) -> list[FeatureView]:
    stats_push = PushSource(name=ITEM_PUSH_SOURCE, batch_source=_source(features_dir, "item_stats"))
    profile = _view(
        "item_profile",
        item,
        [
            Field(name="title", dtype=String),
            Field(name="year", dtype=Int64),
            Field(name="genres", dtype=Array(String)),
            *attributes_field(features_dir, "item_profile"),
        ],
        _source(features_dir, "item_profile"),
    )
    stats = _view(
        "item_stats",
        item,
        [Field(name="popularity", dtype=Int64), Field(name="mean_rating", dtype=Float32)],
        stats_push,
    )
    return [profile, stats]


def user_vector_view(features_dir: Path) -> FeatureView | None:
    """Each user's vector, the model version that computed it and the
    profile key it was computed for (pipelines/user_vectors.py); pushed
    again by the features service when an event changes the profile. None
    for an artifact built before them."""
    if not (features_dir / f"{USER_VECTORS}.parquet").exists():
        return None
    push = PushSource(name=VECTOR_PUSH_SOURCE, batch_source=_source(features_dir, USER_VECTORS))
    return _view(
        USER_VECTORS,
        user,
        [
            Field(name="vector", dtype=Array(Float32)),
            Field(name="model_version", dtype=String),
            Field(name="profile_key", dtype=String),
        ],
        push,
    )


RECOMMENDATION_SLOTS = ("a", "b")
FEATURE_TABLE_VIEWS = ["user_profile", "user_activity", "item_profile", "item_stats"]


def recommendation_view(slot: str, slots_dir: Path) -> FeatureView:
    """Precomputed top-N lists from the nightly re-scoring, one view per slot.

    Two slots so a publish writes the idle one in full and then flips a
    pointer: readers see the old run or the new one, never a mix.
    """
    return FeatureView(
        name=published.slot_view(slot),
        entities=[user],
        ttl=TTL,
        online=True,
        schema=[
            Field(name="item_ids", dtype=Array(String)),
            Field(name="scores", dtype=Array(Float32)),
            Field(name="run_id", dtype=String),
        ],
        source=FileSource(
            name=f"user_recommendations_{slot}_source",
            path=str(slots_dir / f"{slot}.parquet"),
            timestamp_field="event_timestamp",
        ),
    )


def repo_config(feast_dir: Path, redis_url: str = "") -> RepoConfig:
    online: dict[str, object]
    if redis_url:
        online = {"type": "redis", "connection_string": redis_connection(redis_url)}
    else:
        online = {"type": "sqlite", "path": str(feast_dir / "online.db")}
    return RepoConfig(
        project=PROJECT,
        provider="local",
        registry=str(feast_dir / "registry.db"),
        online_store=online,
        offline_store={"type": "file"},
        entity_key_serialization_version=3,
        repo_path=str(feast_dir),
    )


def published_marker(feast_dir: Path, redis_url: str) -> Path:
    store = "redis" if redis_url else "sqlite"
    return feast_dir / f"published-{store}.json"


def published_version(feast_dir: Path, redis_url: str = "") -> str:
    marker = published_marker(feast_dir, redis_url)
    return str(json.loads(marker.read_text())["version"]) if marker.exists() else ""


def apply_and_publish(
    feast_dir: Path, artifact_dir: Path, version: str, redis_url: str = ""
) -> FeatureStore:
    """`feast apply` and materialization of one artifact's feature tables."""
    feast_dir.mkdir(parents=True, exist_ok=True)
    store = FeatureStore(config=repo_config(feast_dir, redis_url))
    store.apply(definitions(artifact_dir.resolve() / "features"))
    views = list(FEATURE_TABLE_VIEWS)
    if user_vector_view(artifact_dir.resolve() / "features") is not None:
        views.append(USER_VECTORS)
    store.materialize(
        datetime(1990, 1, 1, tzinfo=UTC),
        datetime.now(UTC) + timedelta(days=1),
        feature_views=views,  # the re-scoring publish writes its own views
    )
    marker = published_marker(feast_dir, redis_url)
    tmp = marker.with_suffix(".tmp")
    tmp.write_text(json.dumps({"version": version, "at": datetime.now(UTC).isoformat()}))
    os.replace(tmp, marker)
    return store
