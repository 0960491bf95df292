"""How the gateway degrades: one table from what failed to which fallback.

A stage that fails, times out or would start with too little budget left
ends the full path; the answer then comes from the first source in its row
that can answer, marked degraded with the reason. Ranking is the exception
that keeps the path: the retrieved candidates in retrieval order are a
better answer than any list made without them.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass

from opentelemetry import trace
from prometheus_client import Counter

from recserve.features.v1 import features_pb2 as fpb
from recserve_kit import attributes as attr
from recserve_model.catalogue import CatalogueSchema
from services.gateway.descriptions import ItemDescriptions
from services.gateway.popular import PopularItems
from services.gateway.query import Answer, Explanation, Item, Query
from services.gateway.segment_lists import SegmentLists

FALLBACKS = Counter("recserve_gateway_fallback_total", "Degraded answers by reason.", ["reason"])

# What failed -> the sources to try, in order. PRECOMPUTED: the user's list
# from the nightly re-scoring (needs the user's features, and no category or
# item filter it was not made for); ATTRIBUTES: the list for a new user's
# attributes (segment lists); POPULAR: per category, always answers.
POLICY: dict[str, tuple[str, ...]] = {
    "shed": ("POPULAR",),  # overload: the cheapest answer, at once
    # Without features the user is unknown, but attributes the request sent
    # still say who they are like: nearer than everyone's popular items.
    "features": ("ATTRIBUTES", "POPULAR"),
    "new_user": ("ATTRIBUTES", "POPULAR"),
    "embed": ("PRECOMPUTED", "POPULAR"),
    "retrieve": ("PRECOMPUTED", "POPULAR"),
    "rank": ("RETRIEVAL_ORDER",),  # kept in the flow: it has the candidates
}


class Catalogue:
    """Titles and categories as far as this process knows them: the live copy
    of the item catalogue, else the popular lists."""

    def __init__(self, descriptions: ItemDescriptions, popular: PopularItems) -> None:
        self.descriptions = descriptions
        self.popular = popular

    def categories(self) -> frozenset[str]:
        return self.descriptions.categories or frozenset(self.popular.by_category)

    def schema(self) -> CatalogueSchema:
        return self.popular.schema

    def item(self, item_id: str, score: float) -> Item:
        known = self.descriptions.get(item_id)
        if known is not None:
            return Item(item_id, score, known[0], known[1])
        popular = self.popular.describe(item_id)
        if popular is not None:
            return Item(item_id, score, popular.title, popular.categories)
        return Item(item_id, score, "", ())


@dataclass(frozen=True)
class Known:
    """What the request had learnt when it failed."""

    user: fpb.UserFeatures | None = None
    seen: Sequence[str] = ()


class Degrade:
    def __init__(
        self, catalogue: Catalogue, popular: PopularItems, segments: SegmentLists | None
    ) -> None:
        self.catalogue = catalogue
        self.popular = popular
        self.segments = segments

    def answer(
        self,
        failed: str,
        reason: str,
        query: Query,
        known: Known = Known(),
        timings: list[tuple[str, float]] | None = None,
    ) -> Answer:
        """The fallback answer when stage ``failed`` could not answer."""
        started = time.perf_counter()
        exclude = {*query.exclude_item_ids, *known.seen, query.item_id}
        items: list[Item] | None = None
        source = ""
        for source in POLICY[failed]:
            items = self._from(source, query, known, exclude)
            if items is not None:
                break
        assert items is not None, f"no source answers for {failed}"
        if query.debug:
            explanation = Explanation(stage=source.lower())
            items = [dataclasses.replace(i, explanation=explanation) for i in items]
        FALLBACKS.labels(reason.lower()).inc()
        span = trace.get_current_span()
        span.set_attribute(attr.DEGRADED, True)
        span.set_attribute(attr.DEGRADED_REASON, reason)
        timings = [] if timings is None else timings
        timings.append(("fallback", (time.perf_counter() - started) * 1000))
        return Answer(items, True, reason, "", timings, source)

    def ranking_failed(self, reason: str) -> None:
        """Counted here; the flow keeps its candidates in retrieval order."""
        FALLBACKS.labels(reason.lower()).inc()
        trace.get_current_span().set_attribute(attr.DEGRADED_REASON, reason)

    def _from(
        self, source: str, query: Query, known: Known, exclude: set[str]
    ) -> list[Item] | None:
        """The source's list, or None where it cannot answer this query."""
        if source == "PRECOMPUTED":
            personal = list(known.user.precomputed_item_ids) if known.user is not None else []
            if not personal or query.categories or query.item_id or query.attribute_filters:
                return None
            ids = [i for i in personal if i not in exclude][: query.k]
            return [self.catalogue.item(i, 0.0) for i in ids]
        if source == "ATTRIBUTES":
            return self._for_attributes(query, exclude) or None
        found = self.popular.top(query.k, query.categories, exclude, query.attribute_filters)
        return [Item(p.item_id, float(p.popularity), p.title, p.categories) for p in found]

    def _for_attributes(self, query: Query, exclude: set[str]) -> list[Item]:
        """A new user's list for their attributes, in the asked categories,
        topped up from the popular list when the filter leaves it short."""
        if query.attributes is None or self.segments is None or query.attribute_filters:
            return []  # (the segment lists know no item attributes: popular answers)
        ids = self.segments.items(query.attributes)
        wanted = set(query.categories)
        items: list[Item] = []
        for rank, item_id in enumerate(ids):
            if item_id in exclude:
                continue
            item = self.catalogue.item(item_id, float(len(ids) - rank))
            if not wanted or wanted & set(item.categories):
                items.append(item)
                if len(items) == query.k:
                    return items
        if not items:
            return []
        taken = exclude | {i.item_id for i in items}
        more = self.popular.top(query.k - len(items), query.categories, taken)
        return items + [Item(p.item_id, 0.0, p.title, p.categories) for p in more]
