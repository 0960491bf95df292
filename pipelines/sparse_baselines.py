"""The affinity and the gate's baselines where dense items x items
matrices cost too much (``dense_ok``): nothing here is quadratic in items.

- Low-rank EASE: EASE's weights are ``I - P / diag(P)`` with ``P = (X'X +
  lambda I)^-1``; the ranker uses them through a rank-32 factorisation
  anyway. On the top singular subspace of the sparse users x items matrix
  ``X ~ U S V'`` the regularised item-item map ``(X'X + lambda I)^-1 X'X``
  is ``V diag(s^2 / (s^2 + lambda)) V'``: the same ridge, without the zero
  diagonal, from a sparse truncated SVD (ARPACK on ``X``: a few sparse
  products per iteration, linear in interactions).
- Item-kNN (cosine) scores for a batch of users, through the users:
  ``(x D^-1) X' X D^-1`` costs batch x interactions, never items x items.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import sparse
from scipy.sparse.linalg import svds

from recserve_model.encoding import Encoder

DENSE_ITEMS = 20_000  # above this many item rows: sparse id tables' gradients, partial sorts
# One dense EASE fit's budget (the build makes about six: the window's
# models, the refits, the gate's): its matrices' bytes, and its
# multiply-adds (2e12: about two minutes on 2 cores).
DENSE_BYTES = 16 << 30
DENSE_MULTIPLY_ADDS = 2e12
SVD_SEED = 7
SCORED_USERS = 256  # users whose sparse baseline scores are computed at once
BASELINE_RANK = 64  # the low-rank EASE baseline's (the ranker's affinity uses 32)


def dense_cost(users: int, items: int) -> tuple[int, int]:
    """(bytes, multiply-adds) of one dense EASE fit (pipelines/baselines.py):
    the users x items matrix (float32) and about five items x items ones
    (float64) at once; the items x items product of X (users x items^2),
    and the inverse or, with fewer users than items, Woodbury's users x
    users solve (the smaller side cubed)."""
    smaller = min(users, items)
    return users * items * 4 + items * items * 8 * 5, users * items * items + smaller**3


def dense_ok(users: int, items: int) -> bool:
    """Whether the dense EASE and item-kNN fit the budget for ``users`` x
    ``items`` rows: chosen by their cost, not by the catalogue alone (600
    shoppers and 20,000 products: about 15 GiB and 2.4e11, dense; 100,000
    shoppers and 10,000 products: 7.5 GiB and 1.1e13, sparse)."""
    memory, work = dense_cost(users, items)
    return memory <= DENSE_BYTES and work <= DENSE_MULTIPLY_ADDS


def sparse_tables(num_rows: int) -> bool:
    """Whether the towers' and the ranker's id tables take sparse gradients
    (SparseAdam): dense Adam updates every row every step."""
    return num_rows > DENSE_ITEMS


def interactions(train: pd.DataFrame, encoder: Encoder, users: list[str]) -> sparse.csr_matrix:
    """[len(users), num_rows] binary CSR matrix (row 0, the unknown item, stays empty)."""
    index = {user: i for i, user in enumerate(users)}
    known = train[train["user_id"].isin(index)]
    rows = known["user_id"].map(index).to_numpy()
    columns = np.asarray(encoder.item_rows(list(known["item_id"])))
    values = np.ones(len(rows), dtype=np.float32)
    shape = (len(users), encoder.spec.num_rows)
    matrix = sparse.csr_matrix((values, (rows, columns)), shape=shape, dtype=np.float32)
    matrix.data[:] = 1.0  # a repeated (user, item) pair is one interaction
    return matrix


def low_rank_ease(
    matrix: sparse.csr_matrix, rank: int, lam: float
) -> tuple[np.ndarray, np.ndarray]:
    """(history side, item side), each [num_rows, rank]: the ridge item-item
    map on the top ``rank`` singular directions, B ~ history @ item.T."""
    k = min(rank, min(matrix.shape) - 1)
    start = np.random.default_rng(SVD_SEED).standard_normal(min(matrix.shape))
    _, singular, right = svds(matrix.astype(np.float64), k=k, v0=start)
    order = np.argsort(-singular)
    singular, right = singular[order], right[order]
    shrink = singular**2 / (singular**2 + lam)
    history = np.zeros((matrix.shape[1], rank), dtype=np.float32)
    item = np.zeros((matrix.shape[1], rank), dtype=np.float32)
    history[:, :k] = (right.T * shrink).astype(np.float32)
    item[:, :k] = right.T.astype(np.float32)
    return history, item


class ItemKnn:
    """Cosine item-kNN scores of a batch of users' rows, through the users."""

    def __init__(self, matrix: sparse.csr_matrix) -> None:
        counts = np.asarray(matrix.sum(axis=0)).ravel()
        self.inverse_norms = (1.0 / np.sqrt(np.maximum(counts, 1.0))).astype(np.float32)
        self.has_users = (counts > 0).astype(np.float32)
        self.matrix = matrix.tocsr()
        self.transposed = matrix.T.tocsr()

    def scores(self, rows: sparse.csr_matrix) -> np.ndarray:
        """[len(rows), num_rows] float32: each user's summed cosine similarity
        to every item, an item's similarity to itself left out (as the dense
        form's zero diagonal)."""
        scaled = rows.multiply(self.inverse_norms[None, :]).tocsr()
        co_users = scaled @ self.transposed  # [batch, users]: shared items, weighted
        out = (co_users @ self.matrix).toarray().astype(np.float32)
        out *= self.inverse_norms[None, :]
        # The self term, x_i * c_ii / n_i^2 = x_i for any item with users.
        out -= rows.toarray().astype(np.float32) * self.has_users[None, :]
        return out


def top(scores: np.ndarray, n: int) -> np.ndarray:
    """The rows of the ``n`` highest scores, best first, ties by row: as a
    stable descending argsort, without sorting a large catalogue whole."""
    if len(scores) <= DENSE_ITEMS or n >= len(scores):
        return np.argsort(-scores, kind="stable")[:n]
    # Every row tied with the n-th best competes, so ties resolve by row.
    threshold = np.partition(scores, len(scores) - n)[len(scores) - n]
    candidates = np.flatnonzero(scores >= threshold)
    order = np.lexsort((candidates, -scores[candidates]))
    return candidates[order[:n]]
