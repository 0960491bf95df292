"""The synthetic generator writes the production schemas at any size."""

import numpy as np
import pandas as pd
from rich.console import Console

from pipelines.synthetic import CATEGORIES, read_vectors, write_synthetic


def test_synthetic_items_have_the_item_vector_schema(tmp_path):
    write_synthetic(tmp_path, items=3000, users=50, dim=16, seed=1, console=Console(quiet=True))
    items = pd.read_parquet(tmp_path / "item_vectors.parquet")
    assert list(items.columns) == [
        "item_id",
        "vector",
        "categories",
        "active",
        "title",
        "year",
        "popularity",
    ]
    assert len(items) == 3000 and items["item_id"].is_unique and items["active"].all()
    vectors = read_vectors(tmp_path / "item_vectors.parquet")
    assert vectors.shape == (3000, 16) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert all(1 <= len(c) <= 3 and set(c) <= set(CATEGORIES) for c in items["categories"])
    # Power-law popularity: the head dominates.
    popularity = items["popularity"].to_numpy()
    assert popularity[0] > 100 * popularity[-1] and (np.diff(popularity) <= 0).all()
    users = pd.read_parquet(tmp_path / "users.parquet")
    assert len(users) == 50 and set(users.columns) >= {"user_id", "age", "gender", "occupation"}
