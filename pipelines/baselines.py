"""Classic baselines on the same split, so every build prints where the served
models stand: item-kNN (cosine) and EASE (Steck 2019, closed form).

Both read the user's whole training history (everything before the holdout)
as a binary row; the served models see the last 20 items and the profile.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipelines import sparse_baselines
from recserve_model.affinity import RANK
from recserve_model.encoding import Encoder

EASE_LAMBDA = 300.0


def interactions(train: pd.DataFrame, encoder: Encoder, users: list[str]) -> np.ndarray:
    """[len(users), num_rows] binary matrix (row 0, the unknown item, stays empty)."""
    index = {user: i for i, user in enumerate(users)}
    matrix = np.zeros((len(users), encoder.spec.num_rows), dtype=np.float32)
    known = train[train["user_id"].isin(index)]
    rows = encoder.item_rows(list(known["item_id"]))
    matrix[known["user_id"].map(index).to_numpy(), rows] = 1.0
    return matrix


def ease(matrix: np.ndarray, lam: float = EASE_LAMBDA) -> np.ndarray:
    """The item-item weights B with a zero diagonal; scores are ``matrix @ B``.

    B = I - P / diag(P) with P = (X'X + lambda I)^-1, inverted on the smaller
    side: with fewer users than items (a young shop: 600 shoppers, 14,000
    products), Woodbury's identity P = (I - X'(XX' + lambda I)^-1 X) / lambda
    inverts users x users and B's off-diagonal is M_ij / (1 - M_jj) with
    M = X'(XX' + lambda I)^-1 X: seconds instead of minutes."""
    users, items = matrix.shape
    if users < items:
        x = matrix.astype(np.float64)
        kernel = x @ x.T
        kernel[np.diag_indices_from(kernel)] += lam
        solved = np.linalg.solve(kernel, x)  # (XX' + lambda I)^-1 X, users x items
        m = (x.T.astype(np.float32)) @ solved.astype(np.float32)
        diag = np.einsum("ui,ui->i", x, solved)
        weights = m / (1.0 - diag)[None, :].astype(np.float32)
        weights[np.diag_indices_from(weights)] = 0.0
        return weights.astype(np.float32, copy=False)
    gram = (matrix.T @ matrix).astype(np.float64)
    gram[np.diag_indices_from(gram)] += lam
    inverse = np.linalg.inv(gram)
    weights = -inverse / np.diag(inverse)
    weights[np.diag_indices_from(weights)] = 0.0
    return weights.astype(np.float32)


def item_knn(matrix: np.ndarray) -> np.ndarray:
    """Cosine similarity between items' user columns, zero diagonal."""
    norms = np.sqrt((matrix * matrix).sum(axis=0))
    norms[norms == 0] = 1.0
    similarity = (matrix.T @ matrix) / np.outer(norms, norms)
    similarity[np.diag_indices_from(similarity)] = 0.0
    return similarity.astype(np.float32)


# The ranker's affinity feature: EASE over the user's recent items, most
# recent weighted most (exp(-k / 10) for the k-th most recent), through a
# rank-32 factorisation of B. On this split (the last 20 items): NDCG@10
# 0.164 at full rank, 0.170 at rank 64 and 0.172 at rank 32 (truncation
# regularises; each rank costs the ranker a gather per recent item and
# candidate), against 0.140 for EASE over the whole history unweighted
# (docs/evaluation.md).
RECENCY_TAU = 10.0
AFFINITY_RANK = RANK


def recency_weights(length: int, tau: float = RECENCY_TAU) -> np.ndarray:
    return np.exp(-np.arange(length, dtype=np.float64) / tau).astype(np.float32)


EXACT_SVD_ITEMS = 4_096
SVD_OVERSAMPLE = 16
SVD_POWER_ITERATIONS = 6


def randomized_svd(
    matrix: np.ndarray, rank: int, seed: int = 7
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The top ``rank`` singular triplets (Halko, Martinsson, Tropp 2011):
    a few products with a thin random block instead of the full
    decomposition, so the cost is items^2 x rank, not items^3 (a full SVD
    of a 14,000-item EASE matrix ran over 26 minutes on 2 cores)."""
    width = min(rank + SVD_OVERSAMPLE, min(matrix.shape))
    block = np.random.default_rng(seed).standard_normal((matrix.shape[1], width))
    basis, _ = np.linalg.qr(matrix @ block)
    for _ in range(SVD_POWER_ITERATIONS):
        basis, _ = np.linalg.qr(matrix.T @ basis)
        basis, _ = np.linalg.qr(matrix @ basis)
    small, singular, right = np.linalg.svd(basis.T @ matrix, full_matrices=False)
    return (basis @ small)[:, :rank], singular[:rank], right[:rank]


def affinity_factors(
    weights: np.ndarray, rank: int = AFFINITY_RANK
) -> tuple[np.ndarray, np.ndarray]:
    """(history side, item side), each [num_rows, rank]: B ~ history @ item.T.
    Exact where the full decomposition costs seconds (up to EXACT_SVD_ITEMS
    rows: about 10 s at 4,096), randomised above."""
    if len(weights) <= EXACT_SVD_ITEMS:
        left, singular, right = np.linalg.svd(weights.astype(np.float64))
        left, singular, right = left[:, :rank], singular[:rank], right[:rank]
    else:
        left, singular, right = randomized_svd(weights.astype(np.float64), rank)
    history = left * singular
    return history.astype(np.float32), right.T.astype(np.float32)


def fit_affinity(
    train: pd.DataFrame, encoder: Encoder, rank: int = AFFINITY_RANK
) -> tuple[np.ndarray, np.ndarray]:
    """The affinity factors from every user's interactions in ``train``: of
    EASE's weights where affordable (``sparse_baselines.dense_ok``), else of
    its low-rank form."""
    users = sorted(train["user_id"].unique())
    if not sparse_baselines.dense_ok(len(users), encoder.spec.num_rows):
        matrix = sparse_baselines.interactions(train, encoder, users)
        return sparse_baselines.low_rank_ease(matrix, rank, EASE_LAMBDA)
    return affinity_factors(ease(interactions(train, encoder, users)), rank)


def category_popularity(
    matrix: np.ndarray, membership: np.ndarray, power: float = 1.0
) -> np.ndarray:
    """Item-item weights W[j, i] = sum over categories c of m[j, c] * P_c(i):
    a history's scores are its category shares times each item's share of
    its categories' interactions ("more of what you browse, the popular
    ones first"), counts raised to ``power`` (above 1 a category's head
    gains: a user's distinct items flatten it, where shoppers come back to
    the same best sellers). ``membership``: [num_rows, C], each item's
    categories with rows summing to 1 (0 for none); where items are listed
    in several, as their buyers shop (``attributed_membership``). Needs few
    interactions per user, so it carries young shops where co-occurrences
    are sparse."""
    counts = matrix.sum(axis=0).astype(np.float64) ** power
    mass = membership * counts[:, None]
    shares = mass / np.maximum(mass.sum(axis=0, keepdims=True), 1e-12)  # [num_rows, C]
    weights = (membership @ shares.T).astype(np.float32)
    weights[np.diag_indices_from(weights)] = 0.0
    return weights


ATTRIBUTION_STEPS = 10  # at most; on a 2,000-product shop it settles in about five
ATTRIBUTION_USERS = 2048  # users x items held at once


def attributed_membership(matrix: np.ndarray, membership: np.ndarray | None) -> np.ndarray | None:
    """Each item's categories weighted by its buyers' category shares: a
    product listed in "snacks" and "drinks" and bought by shoppers of
    drinks counts as drinks, instead of half each. EM steps until the
    weights settle (a buyer's shares count the item's own listing too, so
    one step stops short). Items without interactions keep ``membership``.
    On a 2,000-product shop, where a tenth of products carry a second
    category at random, splitting them evenly took a heavy mixture from
    5.7% above EASE (the generator's category alone) to 0.4% on the test
    split; attributed, 5.2%. None (no categories) stays None."""
    if membership is None:
        return None
    listed = membership.astype(np.float32)
    current = listed
    for _ in range(ATTRIBUTION_STEPS):
        mass = np.zeros(listed.shape, dtype=np.float64)
        for start in range(0, len(matrix), ATTRIBUTION_USERS):
            x = matrix[start : start + ATTRIBUTION_USERS].astype(np.float32)
            shares = x @ current
            shares /= np.maximum(shares.sum(axis=1, keepdims=True), 1e-12)  # [users, C]
            expected = shares @ listed.T  # [users, items]: the user's share of its listing
            np.divide(x, np.maximum(expected, 1e-12), out=x, where=x > 0)
            mass += x.T @ shares
        mass *= listed
        total = mass.sum(axis=1, keepdims=True)
        settled = np.where(total > 0, mass / np.maximum(total, 1e-12), listed)
        if np.abs(settled - current).max() < 1e-4:
            return settled
        current = settled.astype(np.float32)
    return current


def category_membership(item_features: np.ndarray, start: int, end: int) -> np.ndarray:
    """Each row's categories from the encoded item features' multi-hot
    columns ``[start, end)``, normalised to sum to 1 (rows without stay 0)."""
    hot = item_features[:, start:end].astype(np.float64)
    return hot / np.maximum(hot.sum(axis=1, keepdims=True), 1.0)
