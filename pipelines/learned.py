"""What the build learns from a dataset's events: the positive and rating
events as interactions (user_id, item_id, rating, timestamp), one per user
and item, or, where items are bought again (the manifest's ``repeat``), one
per consumption. The logged app events a retrain adds are merged the same
way (pipelines.logged_events)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from recserve_data import Dataset, Role

LEARNED_ROLES = (Role.POSITIVE, Role.RATING)  # the events the models learn from
REPEAT_GAP_S = 3_600  # a user's events of one item closer than this are one consumption


def learned_interactions(data: Dataset) -> pd.DataFrame:
    """user_id, item_id, rating, timestamp: the positive and rating events
    (exposures and negatives are not learned from yet). ``rating`` is a
    rating's value, or 0 for a positive event: an implicit interaction, as
    the features service counts one online (in the count and the recent
    items, not in the mean rating). A user and item with several events are
    one interaction, at the first, with the largest value; where items are
    bought again, one per consumption (``consumptions``). Event weights are
    not used by the models yet."""
    events = data.interactions
    kinds = data.manifest.interactions.event_types
    learned = {n: e for n, e in kinds.items() if e.role in LEARNED_ROLES}
    events = events[events["event_type"].isin(list(learned))]
    value = np.zeros(len(events), dtype=np.float32)
    types = events["event_type"].to_numpy()
    for name, kind in learned.items():
        mask = types == name
        if kind.role is Role.RATING:
            value[mask] = events[kind.value_column].to_numpy(dtype=np.float32)[mask]
    frame = pd.DataFrame(
        {
            "user_id": events["user_id"].to_numpy(),
            "item_id": events["item_id"].to_numpy(),
            "rating": value,
            "timestamp": events["timestamp"].to_numpy(dtype=np.int64),
        }
    )
    if not frame.duplicated(["user_id", "item_id"]).any():
        return frame
    if data.manifest.interactions.repeat:
        return consumptions(frame)
    pairs = frame.groupby(["user_id", "item_id"], sort=False, as_index=False)
    merged = pairs.agg(rating=("rating", "max"), timestamp=("timestamp", "min"))
    return merged.astype({"rating": np.float32, "timestamp": np.int64})


def consumptions(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per consumption of ``frame``'s interactions: a user's events
    of one item less than REPEAT_GAP_S apart (a click, a cart and a
    purchase) are one, at the first, with the largest value; the same item
    bought again later is another."""
    keys = ["user_id", "item_id"]
    frame = frame.sort_values([*keys, "timestamp"], kind="stable")
    gap = frame.groupby(keys, sort=False)["timestamp"].diff()
    frame = frame.assign(consumption=(gap.isna() | (gap >= REPEAT_GAP_S)).cumsum())
    merged = frame.groupby([*keys, "consumption"], sort=False, as_index=False).agg(
        rating=("rating", "max"), timestamp=("timestamp", "min")
    )
    merged = merged[["user_id", "item_id", "rating", "timestamp"]]
    return merged.astype({"rating": np.float32, "timestamp": np.int64})
