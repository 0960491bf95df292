"""Synthetic data with the production schemas, for benchmarks at scale.

N items with power-law (Zipf) popularity, 1-3 categories each, and unit
64-d vectors with the low-rank structure learned embeddings have: a
16-d latent factor per item (shifted by its category), mapped to 64-d, plus
a little noise. (Isotropic Gaussian noise in all 64 dimensions makes every
item almost equidistant from every query, which no trained embedding does
and which defeats any ANN index.) M users with profiles. Written in chunks
so 5,000,000 x 64 (the 1.28 GB fp32 embedding-table case) fits.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from rich.console import Console
from rich.progress import Progress

CATEGORIES = [f"cat{i:02d}" for i in range(20)]
CHUNK = 250_000
LATENT = 16


def item_chunk(
    rng: np.random.Generator,
    start: int,
    count: int,
    dim: int,
    centers: np.ndarray,
    basis: np.ndarray,
) -> pa.Table:
    primary = rng.integers(0, len(CATEGORIES), count)
    latent = centers[primary] + rng.standard_normal((count, LATENT)).astype(np.float32)
    vectors = latent @ basis + 0.05 * rng.standard_normal((count, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    extra = rng.integers(0, len(CATEGORIES), (count, 2))
    n_cats = rng.integers(1, 4, count)
    categories = [
        sorted({CATEGORIES[p], *(CATEGORIES[e] for e in ex[: n - 1])})
        for p, ex, n in zip(primary, extra, n_cats, strict=True)
    ]
    ids = np.arange(start, start + count)
    # Zipf-like popularity: rank r gets about 1e6 / r interactions.
    popularity = (1_000_000 / (ids + 1) ** 1.1).astype(np.int64)
    return pa.table(
        {
            "item_id": pa.array([str(i) for i in ids]),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), dim),
            "categories": pa.array(categories),
            "active": pa.array(np.ones(count, dtype=bool)),
            "title": pa.array([f"item {i}" for i in ids]),
            "year": pa.array(rng.integers(1950, 2026, count).astype(np.int32)),
            "popularity": pa.array(popularity),
        }
    )


def write_synthetic(
    out: Path, items: int, users: int, dim: int, seed: int, console: Console
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    centers = 1.5 * rng.standard_normal((len(CATEGORIES), LATENT)).astype(np.float32)
    basis = rng.standard_normal((LATENT, dim)).astype(np.float32) / np.sqrt(LATENT)
    with Progress(console=console) as progress:
        task = progress.add_task(f"synthetic items ({items:,})", total=items)
        writer: pq.ParquetWriter | None = None
        for start in range(0, items, CHUNK):
            table = item_chunk(rng, start, min(CHUNK, items - start), dim, centers, basis)
            writer = writer or pq.ParquetWriter(out / "item_vectors.parquet", table.schema)
            writer.write_table(table)
            progress.advance(task, table.num_rows)
        if writer is not None:
            writer.close()
    occupations = ["engineer", "student", "artist", "other"]
    pd.DataFrame(
        {
            "user_id": [str(u) for u in range(users)],
            "age": rng.integers(16, 80, users).astype(np.int32),
            "gender": rng.choice(["M", "F"], users),
            "occupation": rng.choice(occupations, users),
        }
    ).to_parquet(out / "users.parquet", index=False)
    console.print(f"wrote {items:,} items and {users:,} users to {out}")


def read_vectors(path: Path) -> np.ndarray:
    """All item vectors as one float32 matrix [N, dim]."""
    column = pq.read_table(path, columns=["vector"]).column("vector").combine_chunks()
    dim = column.type.list_size
    return column.values.to_numpy(zero_copy_only=False).astype(np.float32).reshape(-1, dim)
