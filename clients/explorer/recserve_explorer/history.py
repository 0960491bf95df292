"""What a user did, as the app backend knows it. Here: the current
artifact's activity tables (the app's own store, in a real backend)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq


@dataclass(frozen=True)
class HistoryItem:
    item_id: str
    title: str
    categories: tuple[str, ...]


class ArtifactHistory:
    def __init__(self, recent: dict[str, list[str]], items: dict[str, HistoryItem]) -> None:
        self._recent = recent
        self._items = items

    @classmethod
    def from_data_dir(cls, data_dir: Path) -> ArtifactHistory:
        current = (data_dir / "artifacts" / "CURRENT").read_text().strip()
        features = data_dir / "artifacts" / current / "features"
        activity = pq.read_table(
            features / "user_activity.parquet", columns=["user_id", "recent_item_ids"]
        ).to_pylist()
        profile = pq.read_table(
            features / "item_profile.parquet", columns=["item_id", "title", "genres"]
        ).to_pylist()
        items = {
            row["item_id"]: HistoryItem(row["item_id"], row["title"], tuple(row["genres"] or ()))
            for row in profile
        }
        recent = {row["user_id"]: list(row["recent_item_ids"] or ()) for row in activity}
        return cls(recent, items)

    def recent(self, user_id: str, limit: int = 20) -> list[HistoryItem]:
        """The user's latest items, newest first; empty for an unknown user."""
        ids = self._recent.get(user_id, [])[:limit]
        return [self._items.get(i, HistoryItem(i, i, ())) for i in ids]
