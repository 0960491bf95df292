"""Outcomes as they happen: lists shown and the app events that came of
them, per model version, rollout arm and surface, in Prometheus.

CTR of a version is ``rate(events{event_type="click"}) / rate(lists_shown)``
over the same labels (the Grafana panel "Outcomes per model version").
An event is attributed through its ``recommendation_id`` to the list this
gateway served; the gateway remembers the last ``remember`` lists. An event
of a list served by another replica, or older than that memory, counts as
unattributed: the batch report (``python -m pipelines outcomes``) joins
the logs exactly, this is the live view.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from prometheus_client import Counter

LABELS = ["model_version", "arm", "surface"]
SHOWN = Counter(
    "recserve_gateway_lists_shown_total",
    "Answers shown (Recommend and SimilarItems) by model version, rollout arm and surface.",
    LABELS,
)
ATTRIBUTED = Counter(
    "recserve_gateway_list_events_total",
    "Kept app events of a list this gateway served, by event type and the list's "
    "model version, rollout arm and surface.",
    ["event_type", *LABELS],
)
UNATTRIBUTED = Counter(
    "recserve_gateway_unattributed_events_total",
    "Kept app events with no list this gateway remembers (no recommendation_id, "
    "another replica's list, or one older than its memory).",
    ["event_type"],
)
# Surfaces are the caller's words: past this many, the rest share one label.
MAX_SURFACES = 32
OTHER_SURFACE = "other"
NO_VERSION = "none"  # a fallback answer no model ranked


class OutcomeMetrics:
    def __init__(self, remember: int = 100_000) -> None:
        self.remember = remember
        self._lists: OrderedDict[str, tuple[str, str, str]] = OrderedDict()
        self._surfaces: set[str] = set()
        self._interned: dict[tuple[str, str, str], tuple[tuple[str, str, str], Any]] = {}

    def _surface(self, surface: str) -> str:
        if surface in self._surfaces:
            return surface
        if len(self._surfaces) < MAX_SURFACES:
            self._surfaces.add(surface)
            return surface
        return OTHER_SURFACE

    def shown(self, recommendation_id: str, model_version: str, arm: str, surface: str) -> None:
        labels = (model_version or NO_VERSION, arm or "none", self._surface(surface))
        # One tuple and one counter child per label set: no lookup in the
        # metric's own table on every answer.
        found = self._interned.get(labels)
        if found is None:
            found = self._interned[labels] = (labels, SHOWN.labels(*labels))
        labels, shown = found
        shown.inc()
        self._lists[recommendation_id] = labels
        if len(self._lists) > self.remember:
            self._lists.popitem(last=False)

    def events(self, records: Iterable[dict[str, Any]]) -> None:
        """Kept events (the events API's records), each counted once."""
        for record in records:
            labels = self._lists.get(record.get("recommendation_id") or "")
            if labels is None:
                UNATTRIBUTED.labels(record["event_type"]).inc()
            else:
                ATTRIBUTED.labels(record["event_type"], *labels).inc()
