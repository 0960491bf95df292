"""Every known user's vector, computed at build time by the exported user
tower (the graph Triton serves, run by ONNX Runtime as Triton's backend
runs it) from the features the artifact publishes, and written beside them
(``features/user_vectors.parquet``) with the model version and the profile
key it was computed for (recserve_model.profile_key). Published into the
online store like the other tables, so a Recommend of a known user takes
its vector with its features and skips the embed stage; an event changes
the profile, the key stops matching, and the features service computes it
again off the request path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pandas as pd

from recserve_model.attribute_features import texts_from_json
from recserve_model.encoding import Encoder, EncodingSpec
from recserve_model.profile_key import profile_key

FILE = "user_vectors.parquet"
BATCH = 4096


def users_of(features_dir: Path) -> pd.DataFrame:
    """Profiles joined with activity, as the features service reads them."""
    profile = pd.read_parquet(features_dir / "user_profile.parquet")
    activity = pd.read_parquet(features_dir / "user_activity.parquet")
    users = profile.drop(columns="event_timestamp").merge(
        activity.drop(columns="event_timestamp"), on="user_id", how="left"
    )
    users["recent_item_ids"] = [
        list(r) if isinstance(r, list | np.ndarray) else [] for r in users["recent_item_ids"]
    ]
    if "attributes" not in users:
        users["attributes"] = "{}"
    return users.fillna({"rating_count": 0, "mean_rating": 0.0})


def write_user_vectors(artifact_dir: Path, version: str) -> Path:
    """``features/user_vectors.parquet`` of the artifact (staged or built)."""
    features_dir = artifact_dir / "features"
    encoder = Encoder(EncodingSpec.load(artifact_dir / "encoding.json"))
    users = users_of(features_dir)
    session = ort.InferenceSession(
        str(artifact_dir / "user_tower" / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    keys, rows, histories = [], [], []
    for user in users.itertuples(index=False):
        attributes = texts_from_json(user.attributes)
        mean = float(np.float32(user.mean_rating))  # as the online store holds it
        rows.append(
            encoder.user(
                user.age, user.gender, user.occupation, user.rating_count, mean, attributes
            )
        )
        histories.append(encoder.history(user.recent_item_ids))
        keys.append(
            profile_key(
                user.age,
                user.gender,
                user.occupation,
                int(user.rating_count),
                mean,
                user.recent_item_ids,
                attributes,
            )
        )
    features, history = np.stack(rows).astype(np.float32), np.stack(histories)
    vectors = np.concatenate(
        [
            session.run(
                ["user_vector"],
                {"user_features": features[s : s + BATCH], "history": history[s : s + BATCH]},
            )[0]
            for s in range(0, len(users), BATCH)
        ]
    )
    stamp = pd.read_parquet(features_dir / "user_profile.parquet", columns=["event_timestamp"])
    table = pd.DataFrame(
        {
            "user_id": users["user_id"],
            "vector": list(vectors.astype(np.float32)),
            "model_version": version,
            "profile_key": keys,
            "event_timestamp": stamp["event_timestamp"].iloc[0],
        }
    )
    path = features_dir / FILE
    table.to_parquet(path, index=False)
    return path
