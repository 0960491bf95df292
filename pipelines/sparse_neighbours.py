"""Each item's kept neighbours where the dense items x items matrices are
past the budget (``sparse_baselines.dense_ok``): cosine item-kNN through
sparse products, and item-kNN mixed with category popularity
(``baselines.category_popularity``: "more of what you browse, the popular
ones first"), each category's most popular items alone. At marketplace
size co-occurrences are sparse (a 200,000-product shop's items are each
bought a few dozen times) and the category's popular items carry what
they cannot: on that shop the generator's own list, category shares
times popularity within the category, scores 20% above item-kNN
(docs/evaluation.md)."""

from __future__ import annotations

import numpy as np
from scipy import sparse

ROW_BLOCK = 2048  # items whose neighbours are taken at once


def row_tops(block: sparse.csr_matrix, start: int, columns: np.ndarray, values: np.ndarray) -> None:
    """Each of ``block``'s rows (items ``start``...) best entries into
    ``columns`` / ``values``: not the item itself, not the out-of-vocabulary
    row, positives only; best first, ties by column."""
    for i in range(block.shape[0]):
        row = slice(block.indptr[i], block.indptr[i + 1])
        cols, vals = block.indices[row], block.data[row]
        keep = (cols != start + i) & (cols != 0) & (vals > 0)
        cols, vals = cols[keep], vals[keep]
        best = np.lexsort((cols, -vals))[: columns.shape[1]]
        columns[start + i, : len(best)] = cols[best]
        values[start + i, : len(best)] = vals[best]


def knn_neighbours(matrix: sparse.csr_matrix, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Cosine item-kNN's top ``m`` per item: a block of items'
    co-occurrence rows at a time, each row's best taken from its
    co-occurring items alone (never items x items, dense or in blocks: the
    work follows the co-occurrences)."""
    counts = np.asarray(matrix.sum(axis=0)).ravel()
    inverse = (1.0 / np.sqrt(np.maximum(counts, 1.0))).astype(np.float32)
    scaled = matrix.multiply(inverse[None, :]).tocsc()
    transposed = scaled.T.tocsr()
    n = matrix.shape[1]
    columns = np.zeros((n, min(m, n - 1)), dtype=np.int32)
    values = np.zeros(columns.shape, dtype=np.float32)
    for start in range(0, n, ROW_BLOCK):
        block = (transposed[start : min(n, start + ROW_BLOCK)] @ scaled).tocsr()
        row_tops(block, start, columns, values)
    return columns, values


def category_tops(counts: np.ndarray, membership: np.ndarray, k: int) -> sparse.csr_matrix:
    """[categories, num_rows]: each category's ``k`` items with the largest
    share of its interactions, and those shares (the rest left out)."""
    mass = membership * counts[:, None]
    shares = mass / np.maximum(mass.sum(axis=0, keepdims=True), 1e-12)
    k = min(k, len(counts) - 1)
    top = np.argpartition(-shares, k, axis=0)[:k]  # [k, categories]
    category = np.broadcast_to(np.arange(shares.shape[1]), top.shape)
    tops = sparse.csr_matrix(
        (shares[top, category].ravel().astype(np.float32), (category.ravel(), top.ravel())),
        shape=(shares.shape[1], len(counts)),
    )
    tops.eliminate_zeros()
    return tops


def with_category(
    columns: np.ndarray,
    values: np.ndarray,
    counts: np.ndarray,
    membership: np.ndarray,
    mix: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Kept neighbours (``columns`` / ``values``) plus category popularity
    scaled to their norm times ``mix``, as the dense ``+category:`` models
    (``item_neighbours.with_category``), each category's top items alone;
    each item's best again."""
    n, m = columns.shape
    knn = sparse.csr_matrix(
        (values.ravel(), columns.ravel(), np.arange(0, n * m + 1, m)), shape=(n, n), copy=True
    )
    knn.eliminate_zeros()
    tops = category_tops(counts, membership, m)
    member = sparse.csr_matrix(membership.astype(np.float32))
    # ||membership @ tops||_F without its diagonal, as the dense form's:
    # trace((M'M)(TT')) from two C x C products, less the diagonal's squares.
    full = float((member.T @ member).multiply(tops @ tops.T).sum())
    diagonal = np.asarray(member.multiply(tops.T).sum(axis=1)).ravel()
    norm = float(np.sqrt(max(full - float(diagonal @ diagonal), 0.0)))
    scale = np.float32(mix * float(np.linalg.norm(values)) / max(norm, 1e-12))
    out_columns = np.zeros_like(columns)
    out_values = np.zeros_like(values)
    for start in range(0, n, ROW_BLOCK):
        end = min(n, start + ROW_BLOCK)
        block = (knn[start:end] + (member[start:end] @ tops) * scale).tocsr()
        row_tops(block, start, out_columns, out_values)
    return out_columns, out_values
