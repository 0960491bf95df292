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
from collections import OrderedDict, defaultdict
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any, cast

from recserve_kit.jsonl_log import JsonlTail, hour_start, hourly_files, read_files
from recserve_model.catalogue import CatalogueSchema, EventKind

# A list converts when an event naming it comes within this long of its
# showing (its session); older lists are let go, so what the report and the
# guardrail hold is the lists of one window: about 460 bytes each (a list of
# 20 items), 170 MB at 100 lists a second.
ATTRIBUTION_WINDOW_S = 3600.0
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


class Attribution:
    """Lists shown, joined with the events that name them. Only the lists
    shown in the last ``window_s`` are remembered (``forget_before``), and
    the event ids of that window (a retried event is read once): memory
    follows the lists of one window, not the length of the logs. An event
    naming a list shown longer ago is unattributed."""

    def __init__(self, schema: CatalogueSchema, window_s: float = ATTRIBUTION_WINDOW_S) -> None:
        self.schema = schema
        self.window_s = window_s
        self.cells: dict[Hashable, Cell] = defaultdict(Cell)
        self.unattributed = 0
        self._shown: OrderedDict[str, tuple[Hashable, tuple[str, ...], float]] = OrderedDict()
        self._converted: set[str] = set()  # of the lists remembered
        self._events: OrderedDict[str, float] = OrderedDict()
        self._names: dict[str, str] = {}  # one string per item id, shared by every list

    def __len__(self) -> int:
        """Lists remembered now."""
        return len(self._shown)

    def show(self, key: Hashable, impression: dict[str, Any], at: float) -> None:
        rid = impression["recommendation_id"]
        if rid in self._shown:
            return  # recorded twice
        items = tuple(self._names.setdefault(i, i) for i in impression["items"])
        self._shown[rid] = (key, items, at)
        cell = self.cells[key]
        cell.lists += 1
        cell.items_shown += len(items)

    def attribute(self, event: dict[str, Any], at: float) -> None:
        if event["event_id"] in self._events:
            return  # a retry kept twice
        self._events[event["event_id"]] = at
        rid = event["recommendation_id"]
        found = self._shown.get(rid)
        if found is None or event["item_id"] not in found[1] or at - found[2] > self.window_s:
            self.unattributed += 1
            return
        key = found[0]
        self.cells[key].events[event["event_type"]] += 1
        kind = self.schema.event_types.get(event["event_type"])
        if kind is not None and converts(kind, event["value"]) and rid not in self._converted:
            self._converted.add(rid)
            self.cells[key].converted += 1

    def forget_before(self, cutoff: float) -> None:
        """Lists shown, and event ids seen, before ``cutoff`` (unix s)."""
        while self._shown and next(iter(self._shown.values()))[2] < cutoff:
            rid, _ = self._shown.popitem(last=False)
            self._converted.discard(rid)
        while self._events and next(iter(self._events.values())) < cutoff:
            self._events.popitem(last=False)


def outcomes(
    data_dir: Path, schema: CatalogueSchema, window_s: float = ATTRIBUTION_WINDOW_S
) -> Outcomes:
    """The logs read hour by hour in time order (every gateway's files of an
    hour, the impressions before the events), the lists older than the
    attribution window forgotten as each hour begins."""
    events_dir = data_dir / "events"
    shown_files = hourly_files(events_dir / "impressions")
    event_files = hourly_files(events_dir / "app")
    join = Attribution(schema, window_s)
    for hour in sorted(shown_files.keys() | event_files.keys()):
        start = hour_start(hour)
        if start is not None:
            join.forget_before(start - window_s)
        for impression in read_files(shown_files.get(hour, [])):
            version = impression["model_version"] or "(fallback)"
            key = (version, impression["arm"], impression["surface"])
            join.show(key, impression, impression.get("at", start or 0.0))
        for event in read_files(event_files.get(hour, [])):
            join.attribute(event, event.get("received_at", start or 0.0))
    cells = {cast(tuple[str, str, str], k): c for k, c in join.cells.items()}
    return Outcomes(cells, join.unattributed)


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
    kept up with the logs as they grow (every gateway's files); lists older
    than the attribution window before the newest one are forgotten."""

    def __init__(
        self,
        data_dir: Path,
        schema: CatalogueSchema,
        versions: dict[str, str],
        since: float,
        until: float = math.inf,
        window_s: float = ATTRIBUTION_WINDOW_S,
    ) -> None:
        self.versions = versions  # model version -> arm ("stable", "candidate")
        self.since, self.until = since, until  # lists shown in this window
        self.impressions = JsonlTail(data_dir / "events" / "impressions", since)
        self.events = JsonlTail(data_dir / "events" / "app", since)
        self.join = Attribution(schema, window_s)
        self.newest = since
        self.cells = {arm: self.join.cells[arm] for arm in versions.values()}

    def update(self) -> dict[str, Cell]:
        for impression in self.impressions.read_new():
            arm = self.versions.get(impression["model_version"])
            at = impression["at"]
            if arm is None or not self.since <= at <= self.until:
                continue
            self.join.show(arm, impression, at)
            self.newest = max(self.newest, at)
        for event in self.events.read_new():
            self.join.attribute(event, event.get("received_at", self.newest))
        self.join.forget_before(self.newest - self.join.window_s)
        return self.cells
