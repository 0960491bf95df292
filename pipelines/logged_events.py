"""Retraining from what was served: the app events the gateways kept
(``<data_dir>/events/app``, docs/events.md) added to the base dataset's
interactions, so the next build learns from what users did with the lists.

Kept: events of a type the build learns from (a rating, with its value; a
positive event, as 0: an implicit interaction), of users and items the dataset
knows, the first of each event id; a user's later rating of an item
replaces an earlier one (the base dataset's included), and an implicit
interaction never replaces a rating. Everything else is counted and left out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from pipelines.dataset import MovieLens
from pipelines.learned import LEARNED_ROLES, consumptions
from recserve_data import Role
from recserve_kit.jsonl_log import read_unique
from recserve_model.catalogue import EventKind


@dataclass(frozen=True)
class LoggedEvents:
    rows: pd.DataFrame  # user_id, item_id, rating, timestamp: the build's columns
    skipped: int  # events of another type, or of an unknown user or item

    @property
    def fingerprint(self) -> str:
        """Changes with the events used: a build with new events is a new version."""
        digest = hashlib.sha256()
        for row in self.rows.itertuples(index=False):
            digest.update(f"{row.user_id}|{row.item_id}|{row.rating}|{row.timestamp}\n".encode())
        return digest.hexdigest()[:16]


def learned_values(event_types: Mapping[str, EventKind]) -> dict[str, float | None]:
    """The event types the build learns from, each with the value an event
    counts as: None for a rating (its own value), 0 for a positive type (an
    implicit interaction, as pipelines.learned.learned_interactions)."""
    learned = {role.value for role in LEARNED_ROLES}
    return {
        name: None if kind.role == Role.RATING.value else 0.0
        for name, kind in event_types.items()
        if kind.role in learned
    }


def read_logged(data_dir: Path, data: MovieLens) -> LoggedEvents:
    return logged_ratings(
        data_dir / "events" / "app",
        learned_values(data.catalogue.event_types),
        set(data.users["user_id"]),
        set(data.items["item_id"]),
    )


def logged_ratings(
    directory: Path,
    learned: Mapping[str, float | None],
    users: set[str],
    items: set[str],
    received_after: float = 0.0,
) -> LoggedEvents:
    """The kept events of a learned type (``learned_values``), of known users
    and items, received after ``received_after`` (unix seconds); the rest
    counted as skipped."""
    rows, skipped = [], 0
    for event in read_unique(directory, "event_id") if directory.exists() else ():
        if received_after and event.get("received_at", 0.0) <= received_after:
            continue  # older than what the reader has (not counted: not left out)
        known = event["user_id"] in users and event["item_id"] in items
        if event["event_type"] not in learned or not known:
            skipped += 1
            continue
        weight = learned[event["event_type"]]
        value = event["value"] if weight is None else weight
        rows.append((event["user_id"], event["item_id"], value, event["timestamp"]))
    frame = pd.DataFrame(rows, columns=["user_id", "item_id", "rating", "timestamp"])
    frame = frame.astype({"rating": np.float32, "timestamp": np.int64})
    return LoggedEvents(frame, skipped)


def with_logged(data: MovieLens, logged: LoggedEvents) -> MovieLens:
    """The dataset with the logged events among its interactions (a new
    fingerprint when there are any)."""
    if logged.rows.empty:
        return data
    merged = pd.concat([data.interactions, logged.rows], ignore_index=True)
    if data.repeat:  # each consumption counts, the logged ones as the export's
        merged = consumptions(merged)
    else:
        # A later rating replaces an earlier one (a re-rating); an implicit
        # interaction (0) never replaces a rating.
        rated = merged["rating"] > 0
        merged = merged.assign(rated=rated).sort_values(["rated", "timestamp"], kind="stable")
        merged = merged.drop_duplicates(["user_id", "item_id"], keep="last").drop(columns="rated")
    merged = merged.sort_values("timestamp", kind="stable").reset_index(drop=True)
    return replace(
        data, interactions=merged, fingerprint=f"{data.fingerprint}+events:{logged.fingerprint}"
    )
