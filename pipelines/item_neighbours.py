"""The item-to-item and popular candidate sources, fit at build
(``recserve_model.sources``: what is stored and how it is served).

The item-item model is chosen on a validation window shaped like the
holdout (each user's last ``HOLDOUT`` training items as truth, the rest as
history), never on the test split: EASE at each of ``EASE_LAMBDAS`` and
cosine item-kNN where the dense items x items matrices are affordable,
and the best EASE mixed with category popularity where the items have
categories (``baselines.category_popularity``); past the dense budget,
item-kNN and its category mixtures through sparse products
(``sparse_neighbours``). The shape matters: the ranker's window (the five items
right after the tower period, often the rest of a session) rewards recency
that ten held-out items do not. So do the histories' lengths: the window's
are ten items shorter than the ones served, which favours models that need
little history (a young shop's light users have few left), so each window
user counts as the served users of their history's length do
(``length_weights``). The winner is fit on the tower period (the ranker
trains on it) and refit on the whole training period; each item keeps its
best neighbours with a positive weight.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from pipelines import baselines, sparse_baselines, sparse_neighbours
from pipelines.dataset import Split, recent_items
from pipelines.selection_window import (
    Window,
    selection_window,
    validation_ndcg,
    weighted_better,
    window_users,
)
from recserve_model.encoding import Encoder
from recserve_model.sources import HISTORY, POPULAR_KEPT, Sources

NEIGHBOURS = 400  # kept per item, at most; fewer where the table would pass TABLE_BYTES
TABLE_BYTES = 256 << 20  # the neighbours table's size (8 bytes a kept neighbour)
MIN_NEIGHBOURS = 50


def kept_neighbours(num_rows: int) -> int:
    """Neighbours kept per item: as many as fit TABLE_BYTES, between
    MIN_NEIGHBOURS and NEIGHBOURS (a user's score is EASE's own, truncated to
    these; the truncation costs less the more are kept)."""
    return int(np.clip(TABLE_BYTES // (8 * max(num_rows, 1)), MIN_NEIGHBOURS, NEIGHBOURS))


EASE_LAMBDAS = (100.0, 300.0, 1000.0)
CATEGORY_MIXES = (0.3, 1.0, 3.0)  # category popularity's weight beside EASE's, scaled to its norm
# Dense only: counts squared, heavier too (2,000 products: 10 squared +5.2%, plain +2.9%)
SHARP_MIXES = (1.0, 3.0, 10.0)
SHARP_POWER = 2.0
RECENCY_TAUS = (0.0, 100.0, 30.0, 10.0, 3.0)  # 0: every seed alike
ROW_BLOCK = 2048  # rows of a weight matrix truncated at once


@dataclass(frozen=True)
class Choice:
    model: str  # "ease:<lambda>" or "item_knn"
    recency_tau: float
    validation_ndcg: dict[str, float]  # every model tried (whole histories alike)
    tower_period: Sources  # the winner fit on the tower period: the ranker trains on it

    def report(self) -> dict[str, object]:
        return {
            "model": self.model,
            "recency_tau": self.recency_tau,
            "validation": self.validation_ndcg,
        }

    @property
    def ease_lambda(self) -> float:
        """EASE's lambda that ranked the window best (the gate's EASE baseline)."""
        eases = {
            k: v
            for k, v in self.validation_ndcg.items()
            if k.startswith("ease:") and " " not in k and "+" not in k
        }
        if not eases:
            return baselines.EASE_LAMBDA
        return float(max(eases, key=lambda k: (eases[k], k))[5:])


def top_neighbours(block: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's ``m`` largest positive entries: (columns, weights), best
    first, ties by column; 0 / 0.0 past the positives."""
    m = min(m, block.shape[1] - 1)
    part = np.argpartition(-block, m, axis=1)[:, :m]
    values = np.take_along_axis(block, part, axis=1)
    order = np.lexsort((part, -values), axis=1)
    columns = np.take_along_axis(part, order, axis=1)
    values = np.take_along_axis(values, order, axis=1)
    positive = values > 0
    return np.where(positive, columns, 0).astype(np.int32), np.where(positive, values, 0.0)


def truncate(weights: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """A dense item-item matrix's top ``m`` per row (the diagonal left out)."""
    n = weights.shape[0]
    columns = np.zeros((n, min(m, n - 1)), dtype=np.int32)
    values = np.zeros(columns.shape, dtype=np.float32)
    for start in range(0, n, ROW_BLOCK):
        block = weights[start : start + ROW_BLOCK].astype(np.float32, copy=True)
        block[np.arange(len(block)), np.arange(start, start + len(block))] = -np.inf
        block[:, 0] = -np.inf  # the out-of-vocabulary row is nobody's neighbour
        columns[start : start + len(block)], values[start : start + len(block)] = top_neighbours(
            block, columns.shape[1]
        )
    return columns, values


def choose_model(split: Split, encoder: Encoder, membership: np.ndarray | None = None) -> Choice:
    """The item-item model that ranks the holdout-shaped window best;
    ``membership`` (``baselines.category_membership``) adds the category
    mixtures."""
    history_frame, truth_frame = selection_window(split)
    window = window_users(split, encoder, history_frame, truth_frame)
    users = history_frame["user_id"].nunique()
    if not sparse_baselines.dense_ok(users, encoder.spec.num_rows):
        return choose_sparse(split, encoder, history_frame, window, membership)
    everyone = sorted(history_frame["user_id"].unique())
    fit = baselines.interactions(history_frame, encoder, everyone)
    index = {u: i for i, u in enumerate(everyone)}
    history = fit[[index[u] for u in window.users]]
    shopped = baselines.attributed_membership(fit, membership)  # once per fit
    ndcg: dict[str, float] = {}
    best: tuple[float, str, np.ndarray] | None = None
    best_ease: tuple[float, str, np.ndarray] | None = None  # the mixtures' base, solved once
    for name in candidate_models(membership):
        if name.startswith("+"):  # a mixture with the best EASE
            assert best_ease is not None
            _, base, ease_weights = best_ease
            name = base + name
            weights = with_category(ease_weights.copy(), fit, name, shopped)
        else:
            weights = item_item(fit, name, membership)
        score = validation_ndcg(
            lambda rows, w=weights: rows @ w, history, window.truth, window.weights
        )
        ndcg[name] = float(round(score, 4))
        if best is None or ndcg[name] > best[0]:
            best = (ndcg[name], name, weights)
        is_ease = name.startswith("ease:") and "+" not in name
        if is_ease and (best_ease is None or ndcg[name] > best_ease[0]):
            best_ease = (ndcg[name], name, weights)
        del weights
    assert best is not None and best_ease is not None
    _, model, weights = best
    if "+category:" in model:
        tried = [m for m in ndcg if " " not in m]  # before the confirmation's figures join
        confirmed = confirmed_mixtures(split, encoder, best_ease[1], membership, ndcg)
        eligible = [m for m in tried if "+category:" not in m or m in confirmed]
        model = max(eligible, key=lambda m: (ndcg[m], m))
        if model == best_ease[1]:
            weights = best_ease[2]
        elif model != best[1] and "+category:" in model:  # its base: the best EASE
            weights = with_category(best_ease[2].copy(), fit, model, shopped)
        elif model != best[1]:
            weights = item_item(fit, model, membership)
    del best_ease, best
    sources = from_weights(weights, history_frame, encoder, model)
    del weights
    tau, by_tau = choose_recency(sources, history_frame, encoder, window)
    tower = fit_sources(split.tower_train, encoder, model, tau, membership)
    return Choice(model, tau, ndcg | by_tau, tower)


CONFIRMATION_HOLDOUT = 3  # the confirmation window's truth: each user's last 3 training items


def confirmed_mixtures(
    split: Split,
    encoder: Encoder,
    base: str,
    membership: np.ndarray | None,
    ndcg: dict[str, float],
) -> set[str]:
    """The category mixtures that beat ``base`` (their EASE alone) on the
    selection window and again on a confirmation window (the last
    CONFIRMATION_HOLDOUT training items as truth); records the latter's
    figures in ``ndcg`` (" confirm" names). On the first window histories
    are ten items shorter than served ones, which flatters a category
    prior: on a 2,000-shopper shop it put weight 3 4% above EASE there and
    2.6% below it on the test split; three items short, it ranked the
    mixtures as the test split did."""
    history_frame, truth_frame = selection_window(split, CONFIRMATION_HOLDOUT)
    window = window_users(split, encoder, history_frame, truth_frame)
    everyone = sorted(history_frame["user_id"].unique())
    fit = baselines.interactions(history_frame, encoder, everyone)
    index = {u: i for i, u in enumerate(everyone)}
    history = fit[[index[u] for u in window.users]]
    ease_weights = item_item(fit, base)
    mixtures = [m for m in ndcg if m.startswith(base + "+category:") and ndcg[m] > ndcg[base]]
    shopped = baselines.attributed_membership(fit, membership) if mixtures else None
    confirm: dict[str, float] = {}
    for name in [base, *mixtures]:
        weights = ease_weights
        if name != base:
            weights = with_category(ease_weights.copy(), fit, name, shopped)

        def score(rows: np.ndarray, w: np.ndarray = weights) -> np.ndarray:
            return rows @ w

        confirm[name] = round(validation_ndcg(score, history, window.truth, window.weights), 4)
    ndcg.update({f"{name} confirm": value for name, value in confirm.items()})
    return {name for name in mixtures if confirm[name] > confirm[base]}


def candidate_models(membership: np.ndarray | None) -> list[str]:
    """The dense models tried, in order: EASE at each lambda, item-kNN, then
    ("+category:<weight>") the best EASE mixed with category popularity,
    where at least two categories have items."""
    names = [*(f"ease:{lam:g}" for lam in EASE_LAMBDAS), "item_knn"]
    if membership is not None and int((membership.sum(axis=0) > 0).sum()) >= 2:
        names += [f"+category:{mix:g}" for mix in CATEGORY_MIXES]
        names += [f"+category:{mix:g}^{SHARP_POWER:g}" for mix in SHARP_MIXES]
    return names


def category_mix(model: str) -> tuple[float, float]:
    """``+category:<weight>[^<power>]`` as (weight, power); (0, 1) for none."""
    mix = model.partition("+category:")[2]
    if not mix:
        return 0.0, 1.0
    weight, _, power = mix.partition("^")
    return float(weight), float(power or 1.0)


def choose_sparse(
    split: Split,
    encoder: Encoder,
    history_frame: pd.DataFrame,
    window: Window,
    membership: np.ndarray | None,
) -> Choice:
    """Past the dense budget: item-kNN, or item-kNN mixed with category
    popularity where that ranks the window better by SIGNIFICANCE standard
    errors (through the served form, every seed alike); then the recency."""
    seeds = history_rows(history_frame, encoder, window.users)
    share = window.weights / max(float(window.weights.sum()), 1e-12)
    best = fit_sources(history_frame, encoder, "item_knn")
    best_gains = served_gains(best, seeds, window)
    ndcg = {best.model: round(float(share @ best_gains), 4)}
    if membership is not None and int((membership.sum(axis=0) > 0).sum()) >= 2:
        for mix in CATEGORY_MIXES:
            model = f"item_knn+category:{mix:g}"
            mixed = fit_sources(history_frame, encoder, model, 0.0, membership)
            gains = served_gains(mixed, seeds, window)
            ndcg[model] = round(float(share @ gains), 4)
            if weighted_better(gains, best_gains, share):
                best, best_gains = mixed, gains
    tau, by_tau = choose_recency(best, history_frame, encoder, window)
    tower = fit_sources(split.tower_train, encoder, best.model, tau, membership)
    return Choice(best.model, tau, ndcg | by_tau, tower)


def served_gains(sources: Sources, seeds: np.ndarray, window: Window) -> np.ndarray:
    """Each window user's NDCG@10 of the served form's list (``sources``
    scored from the user's last HISTORY seeds)."""
    discounts = 1 / np.log2(np.arange(2, 12))
    gains = np.zeros(len(window.truth))
    for i, wanted in enumerate(window.truth):
        top = sources.user_scores(seeds[i]).pool(seeds[i], 10)
        hits = np.isin(top, wanted)
        ideal = discounts[: min(10, len(wanted))].sum()
        gains[i] = (hits * discounts[: len(hits)]).sum() / ideal
    return gains


def choose_recency(
    sources: Sources, history: pd.DataFrame, encoder: Encoder, window: Window
) -> tuple[float, dict[str, float]]:
    """The seeds' recency weighting that ranks the window best, through the
    served form (each item's top neighbours, the last HISTORY seeds); every
    seed alike (tau 0) unless the best beats it by SIGNIFICANCE standard
    errors of their paired difference. The window's histories are shorter
    than the ones served: on a 2,000-shopper shop it preferred tau 10 to 0
    by a little, and the test split ranked tau 10 1.4% below tau 0."""
    seeds = history_rows(history, encoder, window.users)
    by_tau: dict[str, float] = {}
    gains: dict[float, np.ndarray] = {}
    share = window.weights / max(float(window.weights.sum()), 1e-12)
    for tau in RECENCY_TAUS:
        gains[tau] = served_gains(replace(sources, recency_tau=tau), seeds, window)
        by_tau[f"{sources.model} tau:{tau:g}"] = round(float(share @ gains[tau]), 4)
    best = max(RECENCY_TAUS, key=lambda t: (by_tau[f"{sources.model} tau:{t:g}"], -t))
    if best and not weighted_better(gains[best], gains[0.0], share):
        best = 0.0
    return best, by_tau


def item_item(matrix: np.ndarray, model: str, membership: np.ndarray | None = None) -> np.ndarray:
    """The dense item-item weights of ``model`` from a users x items matrix:
    ``ease:<lambda>``, ``item_knn``, or either ``+category:<weight>[^<power>]``,
    the category popularity weights scaled to the first's norm times weight."""
    base = model.partition("+category:")[0]
    if base.startswith("ease:"):
        weights = baselines.ease(matrix, float(base[5:]))
    else:
        weights = baselines.item_knn(matrix)
    if category_mix(model)[0]:
        membership = baselines.attributed_membership(matrix, membership)
    return with_category(weights, matrix, model, membership)


def with_category(
    weights: np.ndarray, matrix: np.ndarray, model: str, membership: np.ndarray | None
) -> np.ndarray:
    """``weights`` (changed in place) plus, for a ``+category:`` model, category
    popularity scaled to their norm (``membership`` attributed to ``matrix``)."""
    mix, power = category_mix(model)
    if not mix:
        return weights
    if membership is None:
        raise ValueError(f"{model} needs the items' categories")
    category = baselines.category_popularity(matrix, membership, power)
    scale = float(np.linalg.norm(weights)) / max(float(np.linalg.norm(category)), 1e-12)
    weights += np.float32(mix * scale) * category
    return weights


def from_weights(weights: np.ndarray, train: pd.DataFrame, encoder: Encoder, model: str) -> Sources:
    columns, values = truncate(weights, kept_neighbours(len(weights)))
    item_ids = np.asarray(["", *encoder.spec.item_ids])
    return Sources(columns, values, popular_rows(train, encoder), item_ids, model)


def popular_rows(train: pd.DataFrame, encoder: Encoder) -> np.ndarray:
    """The most interacted-with rows of ``train``, most first, ties by row."""
    counts = np.bincount(encoder.item_rows(list(train["item_id"])), minlength=encoder.spec.num_rows)
    counts[0] = 0
    order = np.lexsort((np.arange(len(counts)), -counts))
    return order[counts[order] > 0][:POPULAR_KEPT].astype(np.int64)


def fit_sources(
    train: pd.DataFrame,
    encoder: Encoder,
    model: str,
    recency_tau: float = 0.0,
    membership: np.ndarray | None = None,
) -> Sources:
    """The sources from every interaction in ``train`` with the chosen model."""
    users = sorted(train["user_id"].unique())
    if sparse_baselines.dense_ok(len(users), encoder.spec.num_rows):
        weights = item_item(baselines.interactions(train, encoder, users), model, membership)
        return replace(from_weights(weights, train, encoder, model), recency_tau=recency_tau)
    matrix = sparse_baselines.interactions(train, encoder, users)
    columns, values = sparse_neighbours.knn_neighbours(matrix, kept_neighbours(matrix.shape[1]))
    # Item-kNN, mixed with category popularity where the model says so,
    # whatever its base: the dense models are past the budget here.
    mix, power = category_mix(model)
    if mix:
        if membership is None:
            raise ValueError(f"{model} needs the items' categories")
        counts = np.asarray(matrix.sum(axis=0)).ravel().astype(np.float64) ** power
        columns, values = sparse_neighbours.with_category(columns, values, counts, membership, mix)
    served = f"item_knn+{model.partition('+')[2]}" if mix else "item_knn"
    item_ids = np.asarray(["", *encoder.spec.item_ids])
    return Sources(columns, values, popular_rows(train, encoder), item_ids, served, recency_tau)


REPEAT_TAU = 30.0  # the repeat score's recency: the 30th most recent own item weighs 1/e


def with_repeats(sources: Sources, train: pd.DataFrame, encoder: Encoder, repeat: bool) -> Sources:
    """``sources`` with each item's repeat rate from ``train``, where items
    are bought again (``recserve_model.sources``: the repeat source)."""
    if not repeat:
        return sources
    return replace(sources, repeat_rate=repeat_rates(train, encoder), repeat_tau=REPEAT_TAU)


def repeat_rates(train: pd.DataFrame, encoder: Encoder) -> np.ndarray:
    """[num_rows] each item's share of its buyers who bought it again, with
    one more buyer who did not (an item one shopper bought twice is no staple yet)."""
    pairs = train.groupby(["user_id", "item_id"]).size()
    rows = encoder.item_rows(list(pairs.index.get_level_values("item_id")))
    size = encoder.spec.num_rows
    buyers = np.bincount(rows, minlength=size).astype(np.float64)
    again = np.bincount(rows, weights=(pairs.to_numpy() > 1).astype(np.float64), minlength=size)
    rates = again / (buyers + 1.0)
    rates[0] = 0.0
    return rates.astype(np.float32)


def history_rows(train: pd.DataFrame, encoder: Encoder, users: list[str]) -> np.ndarray:
    """[len(users), HISTORY] each user's most recent training rows first (0 pads),
    as the features service serves `seen_item_ids`."""
    recent = recent_items(train, HISTORY)
    out = np.zeros((len(users), HISTORY), dtype=np.int64)
    for i, user in enumerate(users):
        rows = encoder.item_rows(recent.get(user, []))
        out[i, : len(rows)] = rows
    return out
