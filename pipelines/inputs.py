"""The models' inputs: the encoding's vocabularies and declared attributes
fitted on the build's data (``build_spec``), and every user and item
encoded through the one encoder training and serving share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from pipelines.dataset import MovieLens
from recserve_model import attribute_features
from recserve_model.encoding import Encoder, EncodingSpec


@dataclass
class Inputs:
    """Encoded users and items, indexed by embedding row / user id."""

    encoder: Encoder
    item_features: np.ndarray  # [num_rows, I], row 0 (OOV) all zeros
    user_features: dict[str, np.ndarray]  # user_id -> [U]
    popularity: np.ndarray  # [num_rows] training interaction counts


def build_spec(data: MovieLens, dim: int) -> EncodingSpec:
    """The vocabularies, and each learned declared attribute's encoding fitted
    on the catalogue's items and the kept users."""
    items, users = data.items, data.users
    genres = sorted({g for gs in items["genres"] for g in gs})
    return EncodingSpec(
        item_ids=list(items["item_id"]),
        genres=genres,
        occupations=sorted(users["occupation"].unique()),
        embedding_dim=dim,
        item_attributes=fit_attributes(items["attributes"], data.item_learned),
        user_attributes=fit_attributes(users["attributes"], data.user_learned),
    )


def fit_attributes(stored: pd.Series, kinds: dict[str, str]) -> list[dict[str, Any]]:
    if not kinds:
        return []
    texts = [attribute_features.texts_from_json(raw) for raw in stored]
    return [
        attribute_features.fit(name, kind, (t.get(name) for t in texts)).as_dict()
        for name, kind in kinds.items()
    ]


def encode_inputs(spec: EncodingSpec, tables: dict[str, pd.DataFrame]) -> Inputs:
    encoder = Encoder(spec)
    items = tables["item_profile"].merge(tables["item_stats"], on="item_id")
    item_features = np.zeros((spec.num_rows, spec.item_dim), dtype=np.float32)
    popularity = np.zeros(spec.num_rows, dtype=np.float64)
    texts = attribute_features.texts_from_json
    for row in items.itertuples():
        r = encoder.row_of.get(row.item_id)
        if r is None:  # not in this encoding (another build's data): out of vocabulary
            continue
        item_features[r] = encoder.item(
            row.year, row.popularity, row.mean_rating, row.genres, texts(row.attributes)
        )
        popularity[r] = row.popularity
    users = tables["user_profile"].merge(tables["user_activity"], on="user_id", how="left")
    user_features = {
        row.user_id: encoder.user(
            row.age,
            row.gender,
            row.occupation,
            row.rating_count,
            row.mean_rating,
            texts(row.attributes),
        )
        for row in users.fillna({"rating_count": 0, "mean_rating": 0.0}).itertuples()
    }
    return Inputs(encoder, item_features, user_features, popularity)
