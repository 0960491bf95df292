"""Lists for new users: no history yet, but known attributes.

For each (gender, age band, occupation) the user tower scores every item for
those attributes and an empty history; the score is blended with
log-popularity and with what new users rate first (log-popularity among each
training user's first ratings), both scaled to [0, 1]. The weights (1 and 2)
were chosen on two random draws of held-out users (seeds 12 and 13 of
`python -m bench cold-start`); the tower's scores span about -0.3 to 0.3.
The build writes the lists into the artifact (``cold_start.json``); the
gateway serves them to a user the features service
does not know when the request carries the user's attributes; `python -m bench
cold-start` measures the same function on users held out of training.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import torch
from recserve_model.cold_start import AGE_BANDS, GENDERS, band_age

from pipelines.models import TwoTower
from pipelines.train import Inputs

FIRST_RATINGS = 10  # a user's first ratings: what new users rate
LIST_LENGTH = 200
POPULARITY_WEIGHT = 1.0
FIRST_RATINGS_WEIGHT = 2.0


def _log_scaled(counts: np.ndarray) -> np.ndarray:
    logged = np.log1p(np.maximum(counts, 0).astype(np.float64))
    return logged / logged.max() if logged.max() > 0 else logged


def onboarding_popularity(train: pd.DataFrame, inputs: Inputs) -> np.ndarray:
    """log(1 + how often an item is among users' first ratings), in [0, 1]
    per item row (row 0, out of vocabulary, is 0)."""
    ordered = train.sort_values(["user_id", "timestamp", "item_id"], kind="stable")
    counts = ordered.groupby("user_id").head(FIRST_RATINGS).groupby("item_id").size()
    values = np.zeros(inputs.encoder.spec.num_rows, dtype=np.float64)
    values[inputs.encoder.item_rows(list(counts.index))] = counts.to_numpy()
    return _log_scaled(values)


def prior(train: pd.DataFrame, inputs: Inputs) -> np.ndarray:
    """What every new user's scores start from: popularity and first ratings."""
    return POPULARITY_WEIGHT * _log_scaled(
        inputs.popularity
    ) + FIRST_RATINGS_WEIGHT * onboarding_popularity(train, inputs)


@torch.no_grad()
def attribute_scores(
    tower: TwoTower, user_features: np.ndarray, vectors: np.ndarray, item_prior: np.ndarray
) -> np.ndarray:
    """[users, items] scores for users with these features and no history."""
    features = torch.from_numpy(np.asarray(user_features, dtype=np.float32))
    empty = torch.zeros(len(features), 20, dtype=torch.int64)
    users = tower.user(features, empty).numpy()
    scores = users.astype(np.float64) @ vectors.T.astype(np.float64) + item_prior[None, :]
    scores[:, 0] = -np.inf  # the out-of-vocabulary row
    return scores


def segment_lists(
    tower: TwoTower,
    inputs: Inputs,
    vectors: np.ndarray,
    train: pd.DataFrame,
    occupations: list[str],
) -> dict[str, Any]:
    """Every segment's top LIST_LENGTH item ids, best first."""
    item_prior = prior(train, inputs)
    segments = [
        (gender, b, occupation)
        for gender in GENDERS
        for b in range(len(AGE_BANDS) - 1)
        for occupation in occupations
    ]
    features = np.stack([inputs.encoder.user(band_age(b), g, o, 0.0, 0.0) for g, b, o in segments])
    scores = attribute_scores(tower, features, vectors, item_prior)
    top = np.argsort(-scores, axis=1, kind="stable")[:, :LIST_LENGTH]
    item_of = {row: item for item, row in inputs.encoder.row_of.items()}
    return {
        "age_bands": list(AGE_BANDS),
        "lists": {
            f"{g}|{b}|{o}": [item_of[int(r)] for r in rows]
            for (g, b, o), rows in zip(segments, top, strict=True)
        },
    }
