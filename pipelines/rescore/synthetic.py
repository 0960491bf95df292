"""Synthetic users for benchmarks: real profiles resampled, random histories.

Written with the same schemas as the artifact's ``user_profile`` and
``user_activity`` tables, over the artifact's own item vocabulary, so the
job scores them with the real model exactly as it scores real users.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd


def write_users(artifact_dir: Path, out: Path, users: int, seed: int = 7) -> Path:
    rng = np.random.default_rng(seed)
    features = artifact_dir / "features"
    profile = pd.read_parquet(features / "user_profile.parquet")
    activity = pd.read_parquet(features / "user_activity.parquet")
    items = pd.read_parquet(features / "item_stats.parquet")
    weights = items["popularity"].to_numpy(dtype=np.float64) + 1.0
    weights /= weights.sum()
    ids = np.array([f"s{i}" for i in range(users)])
    base = profile.iloc[rng.integers(0, len(profile), users)].reset_index(drop=True)
    base["user_id"] = ids
    stats = activity.iloc[rng.integers(0, len(activity), users)].reset_index(drop=True)
    lengths = rng.integers(5, 200, users)
    histories = [
        list(items["item_id"].to_numpy()[rng.choice(len(items), n, replace=False, p=weights)])
        for n in lengths
    ]
    out.mkdir(parents=True, exist_ok=True)
    base.to_parquet(out / "user_profile.parquet", index=False)
    pd.DataFrame(
        {
            "user_id": ids,
            "rating_count": lengths.astype(np.int64),
            "mean_rating": stats["mean_rating"].to_numpy(),
            "recent_item_ids": [h[:20] for h in histories],
            "seen_item_ids": histories,
            "event_timestamp": stats["event_timestamp"].to_numpy(),
        }
    ).to_parquet(out / "user_activity.parquet", index=False)
    return out
