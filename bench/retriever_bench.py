"""Retriever benchmark: HNSW latency and recall@100 against exact search.

Measured in-process on the store (the gRPC hop adds about 1 ms, see the
stack numbers): Qdrant Edge with 1,000,000 synthetic 64-d vectors at several
ef values, unfiltered and with a category filter of about 10% selectivity;
then, at 100,000 points, the same queries against qdrant-client's local
mode, the embedded option a user would reach for first.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from rich.progress import Progress

from bench.services import new_histogram, percentiles
from services.retriever.store import ItemRecord, SearchFilter

FILTER = SearchFilter(categories=("cat00",))
BATCH = 10_000


def load_items(path: Path, limit: int) -> tuple[list[str], np.ndarray, list[list[str]]]:
    table = pq.read_table(path, columns=["item_id", "vector", "categories"]).slice(0, limit)
    column = table.column("vector").combine_chunks()
    vectors = column.values.to_numpy(zero_copy_only=False).reshape(-1, column.type.list_size)
    return (
        table.column("item_id").to_pylist(),
        vectors.astype(np.float32),
        table.column("categories").to_pylist(),
    )


def fill(store, ids, vectors, categories, progress: Progress, label: str) -> float:
    task = progress.add_task(label, total=len(ids))
    started = time.perf_counter()
    for start in range(0, len(ids), BATCH):
        end = min(start + BATCH, len(ids))
        store.upsert(
            [ItemRecord(ids[i], vectors[i], tuple(categories[i])) for i in range(start, end)]
        )
        progress.advance(task, end - start)
    store.build_index()
    return time.perf_counter() - started


def exact_top(vectors: np.ndarray, query: np.ndarray, k: int, mask: np.ndarray | None) -> set[int]:
    scores = vectors @ (query / np.linalg.norm(query))
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    return set(np.argpartition(-scores, k)[:k].tolist())


def queries(vectors: np.ndarray, n: int, seed: int = 3) -> np.ndarray:
    """User-like queries: the mean of three random items (a short history)."""
    rng = np.random.default_rng(seed)
    picked = vectors[rng.integers(0, len(vectors), (n, 3))].mean(axis=1)
    return (picked / np.linalg.norm(picked, axis=1, keepdims=True)).astype(np.float32)


def measure(
    store,
    qs: np.ndarray,
    truth: list[set[int]],
    index_of: dict[str, int],
    flt: SearchFilter,
    ef: int,
) -> dict[str, float]:
    histogram = new_histogram()
    recall = []
    for q, expected in zip(qs, truth, strict=True):
        started = time.perf_counter()
        hits = store.search(q, 100, flt, ef)
        histogram.record_value(max(1, int((time.perf_counter() - started) * 1e6)))
        got = {index_of[i] for i, _ in hits}
        recall.append(len(got & expected) / max(1, len(expected)))
    return {"ef": ef, **percentiles(histogram), "recall_at_100": round(float(np.mean(recall)), 4)}


def run(
    items_path: Path,
    work: Path,
    n_points: int,
    n_queries: int,
    efs: tuple[int, ...],
    progress: Progress,
) -> dict[str, object]:
    from services.retriever.edge_store import EdgeStore

    ids, vectors, categories = load_items(items_path, n_points)
    index_of = {item_id: i for i, item_id in enumerate(ids)}
    mask = np.array(["cat00" in c for c in categories])
    qs = queries(vectors, n_queries)
    unfiltered_truth = [exact_top(vectors, q, 100, None) for q in qs]
    filtered_truth = [exact_top(vectors, q, 100, mask) for q in qs]
    shutil.rmtree(work, ignore_errors=True)
    store = EdgeStore.create(work / "edge", "bench", vectors.shape[1], 16, 128)
    build_s = fill(
        store, ids, vectors, categories, progress, f"Qdrant Edge load+index {n_points:,}"
    )
    out: dict[str, object] = {
        "points": n_points,
        "queries": n_queries,
        "filter_selectivity": round(float(mask.mean()), 4),
        "edge_build_s": round(build_s, 1),
        "edge_unfiltered": [
            measure(store, qs, unfiltered_truth, index_of, SearchFilter(), ef) for ef in efs
        ],
        "edge_filtered": [measure(store, qs, filtered_truth, index_of, FILTER, ef) for ef in efs],
    }
    store.close()
    return out


def run_local_mode(
    items_path: Path, n_points: int, n_queries: int, ef: int, progress: Progress
) -> dict[str, object]:
    from services.retriever.server_store import ServerStore, connect

    ids, vectors, categories = load_items(items_path, n_points)
    index_of = {item_id: i for i, item_id in enumerate(ids)}
    mask = np.array(["cat00" in c for c in categories])
    qs = queries(vectors, n_queries)
    store = ServerStore.create(connect(":memory:"), "bench", "g1", vectors.shape[1], 16, 128)
    fill(store, ids, vectors, categories, progress, f"qdrant-client local {n_points:,}")
    return {
        "local_unfiltered": measure(
            store, qs, [exact_top(vectors, q, 100, None) for q in qs], index_of, SearchFilter(), ef
        ),
        "local_filtered": measure(
            store, qs, [exact_top(vectors, q, 100, mask) for q in qs], index_of, FILTER, ef
        ),
    }
