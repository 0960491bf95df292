"""Cold start, measured: users held out of training entirely, served from
their attributes alone (an empty history), against popularity.

The users are split into ``folds`` groups (seeded); for each group the
two-tower is retrained on everyone else as the build trains it, and each
held-out user is scored from the user tower with an empty history. Every
user is held out exactly once, so the figures are over all users, not one
draw of a tenth (which moved the ratio by 0.1 between seeds). Two
protocols: their last 10 ratings (the main split's), and their first 10
(what a new user rates first). Lists are the top 100 over all items. The
served row is what the gateway answers: the build's segment lists
(pipelines/onboarding_model.py) made from this fold's training users.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from rich.progress import Progress

from pipelines import dataset, onboarding_model
from pipelines.evaluate import metrics_at
from pipelines.inputs import Inputs, build_spec, encode_inputs
from pipelines.models import TwoTower
from pipelines.ranker_examples import seen_rows
from pipelines.train import TrainConfig, item_vectors, train_two_tower
from recserve_model import segments as segment
from recserve_model.encoding import Encoder

AGE_BUCKETS = [0, 18, 25, 35, 45, 56, 200]
SERVED = "served: attributes -> first ratings, by segment"
BEFORE = "tower + popularity + 2 x first ratings"
Ranker = Callable[[int, str], np.ndarray]


def run(raw_dir: Path, folds: int = 5, seed: int = 7) -> dict[str, object]:
    data = dataset.load_movielens(raw_dir)
    users = np.array(sorted(data.interactions["user_id"].unique()))
    np.random.default_rng(seed).shuffle(users)
    totals: dict[str, dict[str, dict[str, float]]] = {}
    per_fold: list[dict[str, float]] = []
    for fold in range(folds):
        cold = set(users[fold::folds])
        fold_totals = _fold(data, cold)
        for protocol, rows in fold_totals.items():
            for name, sums in rows.items():
                target = totals.setdefault(protocol, {}).setdefault(name, {})
                for key, value in sums.items():
                    target[key] = target.get(key, 0.0) + value / len(users)
        first = fold_totals["first 10 ratings"]
        per_fold.append(
            {
                "users": len(cold),
                "served_recall@10_over_popularity": first[SERVED]["recall@10"]
                / first["popularity"]["recall@10"],
            }
        )
    return {"folds": folds, "users": len(users), "per_fold": per_fold, **totals}


def _fold(data: dataset.MovieLens, cold: set[str]) -> dict[str, dict[str, dict[str, float]]]:
    """Sums of each metric over this fold's held-out users."""
    warm = dataset.temporal_split(data.interactions[~data.interactions["user_id"].isin(cold)])
    spec = build_spec(data, TrainConfig().dim)
    inputs = encode_inputs(spec, dataset.feature_tables(data, warm.train))
    with Progress(transient=True) as progress:
        tower = train_two_tower(warm, inputs, TrainConfig(), progress)
    vectors = item_vectors(tower, inputs)
    protocols = _held_out_ratings(data.interactions, cold, inputs.encoder)
    cold_users = sorted(cold)
    rankers = _rankers(data, warm.train, inputs, tower, vectors, cold_users)
    out: dict[str, dict[str, dict[str, float]]] = {}
    for protocol, truth in protocols.items():
        for name, rank in rankers.items():
            sums: dict[str, float] = {}
            for i, user in enumerate(cold_users):
                for key, value in metrics_at(rank(i, user), truth[user]).items():
                    sums[key] = sums.get(key, 0.0) + value
            out.setdefault(protocol, {})[name] = sums
    return out


def _held_out_ratings(
    interactions: pd.DataFrame, cold: set[str], encoder: Encoder
) -> dict[str, dict[str, set[int]]]:
    """Each protocol's held-out rows per cold user: their last or first 10 ratings."""
    theirs = interactions[interactions["user_id"].isin(cold)]
    ordered = theirs.sort_values(["user_id", "timestamp", "item_id"], kind="stable")
    return {
        "last 10 ratings": seen_rows(ordered.groupby("user_id").tail(10), encoder),
        "first 10 ratings": seen_rows(ordered.groupby("user_id").head(10), encoder),
    }


def _rankers(
    data: dataset.MovieLens,
    train: pd.DataFrame,
    inputs: Inputs,
    tower: TwoTower,
    vectors: np.ndarray,
    cold_users: list[str],
) -> dict[str, Ranker]:
    """Each way of serving a cold user, as (index in cold_users, user) -> top 100 rows."""
    encoder = inputs.encoder
    features = np.stack([inputs.user_features[u] for u in cold_users])
    tower_scores = _attribute_scores(tower, features, vectors)
    popularity = inputs.popularity.copy()
    popularity[0] = -1
    log_pop = _log_scaled(popularity)
    first_ratings = _first_ratings_popularity(train, inputs)
    served = onboarding_model.segment_lists(
        train,
        data.users,
        encoder,
        *onboarding_model.attributes_of(onboarding_model.MOVIELENS_KINDS, data.users),
    )["lists"]
    segments = _segment_counts(train, data.users)
    profile = data.users.set_index("user_id")

    def top(scores: np.ndarray) -> np.ndarray:
        scores = scores.astype(np.float64).copy()
        scores[0] = -np.inf
        return np.argsort(-scores, kind="stable")[:100]

    def segment_key(user: str) -> str:
        row = profile.loc[user]
        return segment.key(row["gender"], float(row["age"]), row["occupation"])

    def segment_scores(user: str) -> np.ndarray:
        row = profile.loc[user]
        key = (row["gender"], _bucket(int(row["age"])))
        scores = 1e-3 * popularity / popularity.max()  # backs off to popularity
        if key in segments:
            counts = segments[key]
            scores[encoder.item_rows(list(counts.index))] += counts.to_numpy() / counts.sum()
        return scores

    return {
        "popularity": lambda i, u: top(popularity),
        "user tower from attributes": lambda i, u: top(tower_scores[i]),
        "tower + log-popularity": lambda i, u: top(tower_scores[i] + log_pop),
        "gender x age popularity": lambda i, u: top(segment_scores(u)),
        "first-ratings popularity": lambda i, u: top(first_ratings + 1e-3 * log_pop),
        BEFORE: lambda i, u: top(tower_scores[i] + log_pop + 2 * first_ratings),
        SERVED: lambda i, u: encoder.item_rows(served[segment_key(u)][:100]),
    }


def _bucket(age: int) -> int:
    return int(np.searchsorted(AGE_BUCKETS, age, side="right"))


def _segment_counts(train: pd.DataFrame, users: pd.DataFrame) -> dict[tuple[str, int], pd.Series]:
    joined = train.merge(users, on="user_id")
    joined["bucket"] = joined["age"].map(_bucket)
    return {
        key: group.groupby("item_id").size() for key, group in joined.groupby(["gender", "bucket"])
    }


def _log_scaled(counts: np.ndarray) -> np.ndarray:
    logged = np.log1p(np.maximum(counts, 0).astype(np.float64))
    return logged / logged.max()


def _first_ratings_popularity(train: pd.DataFrame, inputs: Inputs) -> np.ndarray:
    """log(1 + how often an item is among users' first ratings), in [0, 1]."""
    counts = onboarding_model.first_ratings(train).groupby("item_id").size()
    values = np.zeros(inputs.encoder.spec.num_rows, dtype=np.float64)
    values[inputs.encoder.item_rows(list(counts.index))] = counts.to_numpy()
    return _log_scaled(values)


@torch.no_grad()
def _attribute_scores(tower: TwoTower, features: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """[users, items]: the user tower's scores for these features and no history."""
    empty = torch.zeros(len(features), 20, dtype=torch.int64)
    users = tower.user(torch.from_numpy(features.astype(np.float32)), empty).numpy()
    return users.astype(np.float64) @ vectors.T.astype(np.float64)
