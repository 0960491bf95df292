"""Cold start, measured: users held out of training entirely, served from
their attributes alone (an empty history), against popularity.

A tenth of the users (seeded) is removed from the data; the two-tower is
retrained on the rest as the build trains it; each held-out user's vector
comes from the user tower with an empty history. Two protocols: their last
10 ratings (the main split's), and their first 10 (what a new user rates
first). Lists are the top 100 over all items.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch
from rich.progress import Progress

from pipelines import dataset
from pipelines.evaluate import metrics_at
from pipelines.train import (
    TrainConfig,
    build_spec,
    encode_inputs,
    item_vectors,
    seen_rows,
    train_two_tower,
)

AGE_BUCKETS = [0, 18, 25, 35, 45, 56, 200]


def run(
    raw_dir: Path, share: float = 0.1, seed: int = 11
) -> dict[str, dict[str, dict[str, float]]]:
    data = dataset.load_movielens(raw_dir)
    users = sorted(data.interactions["user_id"].unique())
    rng = np.random.default_rng(seed)
    cold = set(rng.choice(users, size=int(len(users) * share), replace=False))
    warm = dataset.temporal_split(data.interactions[~data.interactions["user_id"].isin(cold)])
    spec = build_spec(data.items, data.users, TrainConfig().dim)
    inputs = encode_inputs(spec, dataset.feature_tables(data, warm.train))
    encoder = inputs.encoder
    with Progress(transient=True) as progress:
        tower = train_two_tower(warm, inputs, TrainConfig(), progress)
    vectors = item_vectors(tower, inputs)
    theirs = data.interactions[data.interactions["user_id"].isin(cold)]
    ordered = theirs.sort_values(["user_id", "timestamp", "item_id"], kind="stable")
    protocols = {
        "last 10 ratings": seen_rows(ordered.groupby("user_id").tail(10), encoder),
        "first 10 ratings": seen_rows(ordered.groupby("user_id").head(10), encoder),
    }
    cold_users = sorted(cold)
    features = torch.from_numpy(np.stack([inputs.user_features[u] for u in cold_users]))
    with torch.no_grad():
        empty = torch.zeros(len(cold_users), 20, dtype=torch.int64)
        user_vectors = tower.user(features, empty).numpy()
    popularity = inputs.popularity.copy()
    popularity[0] = -1
    log_pop = np.log1p(np.maximum(popularity, 0))
    log_pop /= log_pop.max()
    segments = _segment_counts(warm.train, data.users)
    profile = data.users.set_index("user_id")

    def top(scores: np.ndarray) -> np.ndarray:
        scores = scores.astype(np.float64).copy()
        scores[0] = -np.inf
        return np.argsort(-scores, kind="stable")[:100]

    def segment_scores(user: str) -> np.ndarray:
        row = profile.loc[user]
        key = (row["gender"], _bucket(int(row["age"])))
        scores = 1e-3 * popularity / popularity.max()  # backs off to popularity
        if key in segments:
            counts = segments[key]
            scores[encoder.item_rows(list(counts.index))] += counts.to_numpy() / counts.sum()
        return scores

    rankers = {
        "popularity": lambda i, u: top(popularity),
        "user tower from attributes": lambda i, u: top(vectors @ user_vectors[i]),
        "tower + log-popularity": lambda i, u: top(vectors @ user_vectors[i] + log_pop),
        "gender x age popularity": lambda i, u: top(segment_scores(u)),
    }
    out: dict[str, dict[str, dict[str, float]]] = {}
    for protocol, truth in protocols.items():
        for name, rank in rankers.items():
            totals: dict[str, float] = {}
            for i, user in enumerate(cold_users):
                for key, value in metrics_at(rank(i, user), truth[user]).items():
                    totals[key] = totals.get(key, 0.0) + value / len(cold_users)
            out.setdefault(protocol, {})[name] = totals
    return out


def _bucket(age: int) -> int:
    return int(np.searchsorted(AGE_BUCKETS, age, side="right"))


def _segment_counts(train: pd.DataFrame, users: pd.DataFrame) -> dict[tuple[str, int], pd.Series]:
    joined = train.merge(users, on="user_id")
    joined["bucket"] = joined["age"].map(_bucket)
    return {
        key: group.groupby("item_id").size() for key, group in joined.groupby(["gender", "bucket"])
    }
