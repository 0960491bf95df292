"""The validation windows the item-to-item model is chosen on
(``pipelines.item_neighbours``): the training period split as the test
split is, each user's last items held out, never the test split; each
window user weighted as the served users of their history's length are."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from pipelines.dataset import HOLDOUT, Split
from recserve_model.encoding import Encoder

VALIDATION_USERS = 5_000  # the most users scored to choose the model


def validation_ndcg(
    score: Callable[[np.ndarray], np.ndarray],
    history: np.ndarray,
    truth: list[np.ndarray],
    weights: np.ndarray | None = None,
) -> float:
    """Mean NDCG@10 of ``score`` (a batch of history rows -> scores) on the
    window, each user counted by ``weights`` (all alike without)."""
    weights = np.ones(len(history)) if weights is None else weights
    total = 0.0
    discounts = 1 / np.log2(np.arange(2, 12))
    for start in range(0, len(history), 256):
        rows = history[start : start + 256]
        scores = score(rows)
        scores[rows > 0] = -np.inf
        scores[:, 0] = -np.inf
        top = np.argpartition(-scores, 10, axis=1)[:, :10]
        top = np.take_along_axis(top, np.argsort(-np.take_along_axis(scores, top, 1), 1), 1)
        for j, wanted in enumerate(truth[start : start + 256]):
            hits = np.isin(top[j], wanted)
            gain = (hits * discounts).sum() / discounts[: min(10, len(wanted))].sum()
            total += weights[start + j] * gain
    return total / max(float(weights.sum()), 1e-12)


LENGTH_BINS = np.unique(np.round(np.geomspace(1, 1 << 20, 41)).astype(np.int64))


def length_weights(window_lengths: np.ndarray, served_lengths: np.ndarray) -> np.ndarray:
    """Each window user's weight so that the window's history lengths are
    distributed as the served ones (importance weights over log-spaced
    length bins): a window user of a length no served user has counts 0.
    All 1 when nothing would count."""
    bins = LENGTH_BINS
    window = np.histogram(window_lengths, bins)[0] / max(len(window_lengths), 1)
    served = np.histogram(served_lengths, bins)[0] / max(len(served_lengths), 1)
    where = np.clip(np.searchsorted(bins, window_lengths, side="right") - 1, 0, len(window) - 1)
    weights = np.where(window[where] > 0, served[where] / np.maximum(window[where], 1e-12), 0.0)
    return weights if weights.sum() > 0 else np.ones(len(window_lengths))


def selection_window(split: Split, holdout: int = HOLDOUT) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(history, truth): the training period split as the test split is,
    each user's last ``holdout`` items held out (users with more than that)."""
    train = split.train.sort_values(["user_id", "timestamp", "item_id"], kind="stable")
    from_end = train.groupby("user_id").cumcount(ascending=False)
    return train[from_end >= holdout], train[from_end < holdout]


@dataclass(frozen=True)
class Window:
    """The selection window's users: their history rows, truth and weights."""

    users: list[str]
    truth: list[np.ndarray]
    weights: np.ndarray


def window_users(
    split: Split, encoder: Encoder, history_frame: pd.DataFrame, truth_frame: pd.DataFrame
) -> Window:
    users = sorted(set(history_frame["user_id"]) & set(truth_frame["user_id"]))
    if len(users) > VALIDATION_USERS:
        drawn = np.random.default_rng(7).choice(len(users), VALIDATION_USERS, replace=False)
        users = [users[i] for i in sorted(drawn)]
    truth_rows = truth_frame.groupby("user_id")["item_id"].agg(list)
    lengths = history_frame.groupby("user_id").size()
    weights = length_weights(
        lengths.loc[users].to_numpy(), split.train.groupby("user_id").size().to_numpy()
    )
    return Window(users, [encoder.item_rows(truth_rows[u]) for u in users], weights)


SIGNIFICANCE = 2.0  # standard errors a choice must win by to replace the plainer one


def weighted_better(per_user: np.ndarray, than: np.ndarray, share: np.ndarray) -> bool:
    """Whether ``per_user`` beats ``than`` (the same users' figures, each
    counted by ``share``, summing to one) by SIGNIFICANCE standard errors of
    their weighted paired difference."""
    diff = per_user - than
    mean = float(share @ diff)
    error = float(np.sqrt(share**2 @ (diff - mean) ** 2))
    return mean > SIGNIFICANCE * error
