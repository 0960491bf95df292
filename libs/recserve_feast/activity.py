"""A user's activity as the online store holds it, and how an event
changes it: one rule for the features service's live pushes and the
nightly job's catch-up with the logged events (the build computes the same
columns from its interactions, pipelines/dataset.py)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

RECENT_ITEMS = 20  # the user tower's history
SEEN_ITEMS = 1000  # what the gateway excludes; the retriever's filter takes 1,000 ids


@dataclass
class Activity:
    rating_count: int
    rated: int  # events with a rating, for the running mean
    mean_rating: float
    recent: list[str] = field(default_factory=list)  # most recent first
    seen: list[str] = field(default_factory=list)

    @classmethod
    def of(
        cls, count: int, mean_rating: float, recent: Sequence[str], seen: Sequence[str]
    ) -> Activity:
        return cls(int(count), int(count), float(mean_rating), list(recent), list(seen))

    @classmethod
    def from_columns(cls, row: Mapping[str, Any] | None) -> Activity:
        """The activity a stored user_activity row holds (None: no row yet)."""
        if row is None:
            return cls.of(0, 0.0, (), ())
        return cls.of(
            int(row["rating_count"] or 0),
            float(row["mean_rating"] or 0.0),
            row["recent_item_ids"] or (),
            row["seen_item_ids"] or (),
        )

    def extend(self, events: Iterable[tuple[str, float]]) -> None:
        """Events (item id, rating; 0: an implicit one), oldest first, each
        newer than every one before. The recent and seen lists are rebuilt
        once for all of them, not once an event: a busy user's many events
        in one call cost one pass over their up to 1,000 seen items."""
        items = []
        for item_id, rating in events:
            items.append(item_id)
            self.rating_count += 1
            if rating > 0:
                total = self.mean_rating * self.rated + rating
                self.rated += 1
                self.mean_rating = total / self.rated
        # Each item once, at its newest event's place; then the older ones.
        newest_first = list(dict.fromkeys(reversed(items)))
        fresh = set(newest_first)
        self.recent = newest_first + [i for i in self.recent if i not in fresh]
        self.seen = newest_first + [i for i in self.seen if i not in fresh]

    def columns(self) -> dict[str, Any]:
        """The user_activity columns (Feast's feature view) for this activity."""
        return {
            "rating_count": self.rating_count,
            "mean_rating": self.mean_rating,
            "recent_item_ids": self.recent[:RECENT_ITEMS],
            "seen_item_ids": self.seen[:SEEN_ITEMS],
        }
