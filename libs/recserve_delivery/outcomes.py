"""Outcomes of what was served: the impressions the gateways recorded
joined with the app events that name their ``recommendation_id``, per model
version, rollout arm and surface; and two arms compared (the difference in
conversion with its 95% interval and a two-sided p-value).

A list *converts* when an event of a positive role (a click, a purchase)
or a rating at or above the middle of its scale names it and one of its
items. Conversion = converted lists / lists shown. Events that name no
list, or a list no impression records, are counted apart (unattributed).

``outcomes`` reads the logs whole (the report, ``python -m pipelines
outcomes``); ``ArmOutcomes`` follows them (the rollout's guardrail);
``required_lists`` is the sample each arm needs before the guardrail judges.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist

from recserve_kit.jsonl_log import JsonlTail, read_unique
from recserve_model.catalogue import CatalogueSchema, EventKind

NORMAL = NormalDist()  # the standard normal (stdlib: no scipy in the ranker's image)


@dataclass
class Cell:
    """One model version x arm x surface."""

    lists: int = 0
    items_shown: int = 0
    converted: int = 0
    events: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    @property
    def rate(self) -> float:
        return self.converted / self.lists if self.lists else 0.0


@dataclass
class Outcomes:
    cells: dict[tuple[str, str, str], Cell]
    unattributed: int


def converts(kind: EventKind, value: float) -> bool:
    if kind.role == "positive":
        return True
    if kind.role == "rating" and kind.min is not None and kind.max is not None:
        return value >= (kind.min + kind.max) / 2
    return False


def outcomes(data_dir: Path, schema: CatalogueSchema) -> Outcomes:
    events_dir = data_dir / "events"
    shown: dict[str, tuple[tuple[str, str, str], frozenset[str]]] = {}
    cells: dict[tuple[str, str, str], Cell] = defaultdict(Cell)
    for impression in read_unique(events_dir / "impressions", "recommendation_id"):
        key = (
            impression["model_version"] or "(fallback)",
            impression["arm"],
            impression["surface"],
        )
        cell = cells[key]
        cell.lists += 1
        cell.items_shown += len(impression["items"])
        shown[impression["recommendation_id"]] = (key, frozenset(impression["items"]))
    converted: set[str] = set()
    unattributed = 0
    for event in read_unique(events_dir / "app", "event_id"):
        found = shown.get(event["recommendation_id"])
        if found is None or event["item_id"] not in found[1]:
            unattributed += 1
            continue
        key, _ = found
        cells[key].events[event["event_type"]] += 1
        kind = schema.event_types.get(event["event_type"])
        rid = event["recommendation_id"]
        if kind is not None and converts(kind, event["value"]) and rid not in converted:
            converted.add(rid)
            cells[key].converted += 1
    return Outcomes(dict(cells), unattributed)


@dataclass(frozen=True)
class Comparison:
    difference: float  # b's rate less a's
    low: float
    high: float  # the 95% interval of the difference
    p_value: float  # two-sided, two-proportion z-test


def compare(a: Cell, b: Cell, confidence: float = 0.95) -> Comparison:
    """b against a (candidate against stable)."""
    if not a.lists or not b.lists:
        return Comparison(0.0, -math.inf, math.inf, 1.0)
    difference = b.rate - a.rate
    z = NORMAL.inv_cdf(0.5 + confidence / 2)
    spread = math.sqrt(a.rate * (1 - a.rate) / a.lists + b.rate * (1 - b.rate) / b.lists)
    pooled = (a.converted + b.converted) / (a.lists + b.lists)
    null_spread = math.sqrt(pooled * (1 - pooled) * (1 / a.lists + 1 / b.lists))
    p = 1.0 if null_spread == 0 else 2 * (1 - NORMAL.cdf(abs(difference) / null_spread))
    return Comparison(difference, difference - z * spread, difference + z * spread, p)


def required_lists(baseline: float, drop: float, alpha: float, power: float) -> int:
    """Lists each arm needs to detect a relative ``drop`` of a ``baseline``
    conversion rate (one-sided test at ``alpha``, with ``power``): the
    two-proportion formula."""
    worse = baseline * (1 - drop)
    mean = (baseline + worse) / 2
    z_alpha, z_power = NORMAL.inv_cdf(1 - alpha), NORMAL.inv_cdf(power)
    spread = z_alpha * math.sqrt(2 * mean * (1 - mean)) + z_power * math.sqrt(
        baseline * (1 - baseline) + worse * (1 - worse)
    )
    return math.ceil((spread / (baseline - worse)) ** 2)


class ArmOutcomes:
    """Lists shown and converted per arm of one rollout, since it started,
    kept up with the logs as they grow (every gateway's files)."""

    def __init__(
        self,
        data_dir: Path,
        schema: CatalogueSchema,
        versions: dict[str, str],
        since: float,
        until: float = math.inf,
    ) -> None:
        self.schema = schema
        self.versions = versions  # model version -> arm ("stable", "candidate")
        self.since, self.until = since, until  # lists shown in this window
        self.impressions = JsonlTail(data_dir / "events" / "impressions", since)
        self.events = JsonlTail(data_dir / "events" / "app", since)
        self.shown: dict[str, tuple[str, frozenset[str]]] = {}  # list -> arm, items
        self.converted: set[str] = set()
        self.seen_events: set[str] = set()
        self.cells = {arm: Cell() for arm in versions.values()}

    def update(self) -> dict[str, Cell]:
        for impression in self.impressions.read_new():
            arm = self.versions.get(impression["model_version"])
            rid = impression["recommendation_id"]
            at = impression["at"]
            if arm is None or not self.since <= at <= self.until or rid in self.shown:
                continue
            self.shown[rid] = (arm, frozenset(impression["items"]))
            self.cells[arm].lists += 1
            self.cells[arm].items_shown += len(impression["items"])
        for event in self.events.read_new():
            found = self.shown.get(event["recommendation_id"])
            if event["event_id"] in self.seen_events or found is None:
                continue
            self.seen_events.add(event["event_id"])
            arm, items = found
            kind = self.schema.event_types.get(event["event_type"])
            if event["item_id"] not in items or kind is None:
                continue
            self.cells[arm].events[event["event_type"]] += 1
            rid = event["recommendation_id"]
            if converts(kind, event["value"]) and rid not in self.converted:
                self.converted.add(rid)
                self.cells[arm].converted += 1
        return self.cells
