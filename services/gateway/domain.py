"""The gateway's request path: features -> user embedding -> retrieval ->
ranking -> top-k, inside a latency budget.

Internal calls carry columns, not messages: the user vector and scores as
float32 bytes, candidates as an id list. The ranker gathers candidates' item
features from its own live table; titles and categories come from the
gateway's live copy of the catalogue, for the k items returned only.

Every stage gets the smaller of its own cap and what remains of the budget
(itself the smaller of the configured budget and the caller's deadline). A
stage that fails, times out or would start with too little budget left ends
the full path: the answer comes from the popular-items fallback, marked
degraded with the reason. A failing ranker is the exception: the retrieved
candidates in retrieval order are a better answer than popularity, still
marked degraded. Past ``max_in_flight`` requests are shed to the fallback at
once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import grpc
import numpy as np
from opentelemetry import trace
from prometheus_client import Counter, Gauge, Histogram

from recserve.features.v1 import features_pb2 as fpb
from recserve.features.v1 import features_pb2_grpc
from recserve.ranker.v1 import ranker_pb2 as rpb
from recserve.ranker.v1 import ranker_pb2_grpc
from recserve.retriever.v1 import retriever_pb2 as qpb
from recserve.retriever.v1 import retriever_pb2_grpc
from recserve_kit import attributes as attr
from recserve_kit.errors import InvalidArgument, NotFound
from recserve_kit.tracing import outbound_metadata
from recserve_kit.validation import check_id, check_ids
from services.gateway.cold_start import GENDERS, MAX_AGE, Attributes, ColdStartLists
from services.gateway.config import GatewaySettings
from services.gateway.descriptions import ItemDescriptions
from services.gateway.fallback import PopularItems
from services.gateway.limiter import AdaptiveLimit
from services.gateway.user_vectors import UserVectors

log = logging.getLogger(__name__)
tracer = trace.get_tracer("recserve.gateway")
T = TypeVar("T")

MAX_K = 100
MAX_OCCUPATION = 64
MAX_FILTER_VALUES = 1000
RETRIEVER_EXCLUDE_LIMIT = 1000

STAGE_SECONDS = Histogram(
    "recserve_gateway_stage_duration_seconds",
    "Duration of each gateway stage.",
    ["stage"],
    buckets=(0.0005, 0.001, 0.002, 0.004, 0.008, 0.015, 0.03, 0.06, 0.1, 0.2),
)
DESCRIBE_TIMEOUT_S = 0.01  # titles the live catalogue lacks: worth a short wait only
STAGE_CHILDREN = {
    name: STAGE_SECONDS.labels(name)
    for name in ("features", "embed", "retrieve", "rank", "describe")
}
QUEUED_SECONDS = Histogram(
    "recserve_gateway_queued_seconds",
    "Time between Envoy taking a request (x-request-start) and the gateway starting it.",
    buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0),
)
FALLBACKS = Counter("recserve_gateway_fallback_total", "Degraded answers by reason.", ["reason"])
SHED = Counter(
    "recserve_gateway_shed_total",
    "Requests shed at the door, by cause: the bound on requests in flight, or "
    "a wait before the gateway past max_queue_ms.",
    ["cause"],
)
SHED_BY_BOUND, SHED_QUEUED = SHED.labels("bound"), SHED.labels("queued")
IN_FLIGHT = Gauge("recserve_gateway_in_flight", "Requests being served.")
LIMIT = Gauge("recserve_gateway_concurrency_limit", "Requests admitted at once (adaptive).")


@dataclass(frozen=True)
class Query:
    user_id: str
    k: int
    categories: tuple[str, ...] = ()
    exclude_item_ids: tuple[str, ...] = ()
    item_id: str = ""  # SimilarItems only
    attributes: Attributes | None = None  # a new user's, for the cold-start list


@dataclass(frozen=True)
class Item:
    item_id: str
    score: float
    title: str
    categories: tuple[str, ...]


@dataclass(frozen=True)
class Embedded:
    vector_f32: bytes
    model_version: str


@dataclass
class Answer:
    items: list[Item]
    degraded: bool = False
    reason: str = ""  # a DegradedReason name without the prefix, e.g. "RANKER_TIMEOUT"
    model_version: str = ""
    timings: list[tuple[str, float]] = field(default_factory=list)
    source: str = ""  # a FallbackSource name without the prefix, e.g. "PRECOMPUTED"


class StageFailed(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Budget:
    def __init__(
        self, settings: GatewaySettings, caller_remaining_s: float | None, queued_s: float = 0.0
    ) -> None:
        # The budget is end to end: time already spent queued is gone.
        total = settings.budget_ms / 1000 - queued_s
        if caller_remaining_s is not None:
            total = min(total, caller_remaining_s - 0.001)
        self.deadline = time.perf_counter() + total
        self.min_stage_s = settings.min_stage_ms / 1000

    def remaining_s(self) -> float:
        return self.deadline - time.perf_counter()

    def timeout(self, cap_ms: float) -> float:
        timeout = min(cap_ms / 1000, self.remaining_s())
        if timeout < self.min_stage_s:
            raise StageFailed("BUDGET_EXHAUSTED")
        return timeout


def check_query(query: Query, need_user: bool, known_categories: frozenset[str]) -> None:
    """The public edge's checks: a bad request is the caller's error, never
    a degraded answer that looks like an outage."""
    if need_user and not query.user_id:
        raise InvalidArgument("user_id", "is required")
    if query.user_id:
        check_id(query.user_id, "user_id")
    if query.item_id:
        check_id(query.item_id, "item_id")
    if not 1 <= query.k <= MAX_K:
        raise InvalidArgument("k", f"must be between 1 and {MAX_K}, got {query.k}")
    if len(query.categories) > MAX_FILTER_VALUES or any(not c for c in query.categories):
        raise InvalidArgument("filter.categories", f"at most {MAX_FILTER_VALUES} non-empty values")
    if known_categories:  # known once the catalogue (or the popular lists) arrived
        unknown = [c for c in query.categories if c not in known_categories]
        if unknown:
            raise InvalidArgument("filter.categories", f"unknown category {unknown[0][:64]!r}")
    if len(query.exclude_item_ids) > MAX_FILTER_VALUES:
        raise InvalidArgument("filter.exclude_item_ids", f"at most {MAX_FILTER_VALUES} ids")
    check_ids(query.exclude_item_ids, "filter.exclude_item_ids")
    a = query.attributes
    if a is not None:
        if not 1 <= a.age <= MAX_AGE:
            raise InvalidArgument("attributes.age", f"must be between 1 and {MAX_AGE}, got {a.age}")
        if a.gender not in GENDERS:
            raise InvalidArgument("attributes.gender", f"must be one of {', '.join(GENDERS)}")
        if not a.occupation or len(a.occupation) > MAX_OCCUPATION:
            raise InvalidArgument("attributes.occupation", f"1 to {MAX_OCCUPATION} characters")


class Gateway:
    def __init__(
        self,
        settings: GatewaySettings,
        features: features_pb2_grpc.FeatureServiceStub,
        retriever: retriever_pb2_grpc.RetrieverServiceStub,
        ranker: ranker_pb2_grpc.RankerServiceStub,
        popular: PopularItems,
        descriptions: ItemDescriptions | None = None,
        cold_start: ColdStartLists | None = None,
    ) -> None:
        self.settings = settings
        self.cold_start = cold_start
        self.descriptions = descriptions if descriptions is not None else ItemDescriptions()
        self.user_vectors = UserVectors(settings.user_vector_cache_size)
        self.features = features
        self.retriever = retriever
        self.ranker = ranker
        self.popular = popular
        self.in_flight = 0
        self.limit = AdaptiveLimit(
            settings.min_in_flight if settings.adaptive_limit else settings.max_in_flight,
            settings.max_in_flight,
            settings.limit_target_ms / 1000,
            recovery_s=settings.limit_recovery_s,
        )
        # Read at scrape time: the gauge shows the bound's recovery when idle too.
        LIMIT.set_function(lambda: self.limit.current)

    # -- stages --------------------------------------------------------------

    async def _stage(
        self,
        name: str,
        reason: str,
        cap_ms: float,
        budget: Budget,
        answer: Answer,
        call: Callable[[float], Awaitable[T]],
    ) -> T:
        timeout = budget.timeout(cap_ms)
        started = time.perf_counter()
        with tracer.start_as_current_span(f"gateway.{name}") as span:
            span.set_attribute(attr.STAGE, name)
            span.set_attribute(attr.BUDGET_REMAINING_MS, budget.remaining_s() * 1000)
            try:
                return await call(timeout)
            except grpc.aio.AioRpcError as exc:
                code = exc.code()
                if code == grpc.StatusCode.NOT_FOUND:
                    raise NotFound(exc.details() or "not found") from None
                if code == grpc.StatusCode.INVALID_ARGUMENT:
                    # The backend refused what the caller sent: the caller's error.
                    field, _, problem = (exc.details() or "request: invalid").partition(": ")
                    raise InvalidArgument(field, problem or "invalid") from None
                failure = "TIMEOUT" if code == grpc.StatusCode.DEADLINE_EXCEEDED else "UNAVAILABLE"
                if code not in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE):
                    log.warning("%s stage failed with %s: %s", name, code.name, exc.details())
                span.set_attribute(attr.DEGRADED_REASON, f"{reason}_{failure}")
                raise StageFailed(f"{reason}_{failure}") from None
            finally:
                elapsed = time.perf_counter() - started
                STAGE_CHILDREN[name].observe(elapsed)
                answer.timings.append((name, elapsed * 1000))

    def fallback(
        self,
        answer: Answer,
        reason: str,
        query: Query,
        seen: Sequence[str] = (),
        user: fpb.UserFeatures | None = None,
    ) -> Answer:
        """The user's precomputed list when there is one and no category
        filter asks for more than it knows; popular items otherwise."""
        started = time.perf_counter()
        exclude = {*query.exclude_item_ids, *seen, query.item_id}
        personal = list(user.precomputed_item_ids) if user is not None else []
        for_new_user = self._for_attributes(query, exclude) if reason == "COLD_START" else []
        if personal and not query.categories and not query.item_id:
            ids = [i for i in personal if i not in exclude][: query.k]
            answer.items = [self._describe(i, 0.0) for i in ids]
            answer.source = "PRECOMPUTED"
        elif for_new_user:
            answer.items = for_new_user
            answer.source = "ATTRIBUTES"
        else:
            answer.items = [
                Item(p.item_id, float(p.popularity), p.title, p.categories)
                for p in self.popular.top(query.k, query.categories, exclude)
            ]
            answer.source = "POPULAR"
        answer.degraded = True
        answer.reason = reason
        answer.model_version = ""
        FALLBACKS.labels(reason.lower()).inc()
        span = trace.get_current_span()
        span.set_attribute(attr.DEGRADED, True)
        span.set_attribute(attr.DEGRADED_REASON, reason)
        answer.timings.append(("fallback", (time.perf_counter() - started) * 1000))
        return answer

    def _for_attributes(self, query: Query, exclude: set[str]) -> list[Item]:
        """A new user's list for their attributes, in the asked categories,
        topped up from the popular list when the filter leaves it short."""
        if query.attributes is None or self.cold_start is None:
            return []
        ids = self.cold_start.items(query.attributes)
        wanted = set(query.categories)
        items: list[Item] = []
        for rank, item_id in enumerate(ids):
            if item_id in exclude:
                continue
            item = self._describe(item_id, float(len(ids) - rank))
            if not wanted or wanted & set(item.categories):
                items.append(item)
                if len(items) == query.k:
                    return items
        if not items:
            return []
        taken = exclude | {i.item_id for i in items}
        more = self.popular.top(query.k - len(items), query.categories, taken)
        return items + [Item(p.item_id, 0.0, p.title, p.categories) for p in more]

    def known_categories(self) -> frozenset[str]:
        return self.descriptions.categories or frozenset(self.popular.by_category)

    def _describe(self, item_id: str, score: float) -> Item:
        """An item with its title and categories, as far as they are known here."""
        known = self.descriptions.get(item_id)
        if known is not None:
            return Item(item_id, score, known[0], known[1])
        popular = self.popular.describe(item_id)
        if popular is not None:
            return Item(item_id, score, popular.title, popular.categories)
        return Item(item_id, score, "", ())

    async def _fill_missing_titles(self, answer: Answer, budget: Budget) -> None:
        """Titles the live catalogue lacks (not synced yet, or items newer than
        it), asked of the features service for just those items."""
        missing = [i.item_id for i in answer.items if not i.title]
        if not missing:
            return
        timeout = min(DESCRIBE_TIMEOUT_S, max(budget.remaining_s(), 0.002))
        started = time.perf_counter()
        try:
            reply = await self.features.GetItemFeatures(
                fpb.GetItemFeaturesRequest(item_ids=missing),
                timeout=timeout,
                metadata=outbound_metadata(),
            )
        except grpc.aio.AioRpcError:
            return  # ids without titles are still the answer
        finally:
            STAGE_CHILDREN["describe"].observe(time.perf_counter() - started)
        found = {f.item_id: f for f in reply.items if f.found}
        answer.items = [
            Item(i.item_id, i.score, found[i.item_id].title, tuple(found[i.item_id].categories))
            if i.item_id in found and not i.title
            else i
            for i in answer.items
        ]

    async def _personal_fallback(
        self,
        answer: Answer,
        reason: str,
        query: Query,
        seen: Sequence[str],
        user: fpb.UserFeatures | None,
        budget: Budget,
    ) -> Answer:
        """The fallback, with titles for items the local copies do not describe
        asked of the features service when it is answering."""
        self.fallback(answer, reason, query, seen, user)
        if answer.source == "PRECOMPUTED" and not reason.startswith("FEATURES"):
            await self._fill_missing_titles(answer, budget)
        return answer

    # -- requests ------------------------------------------------------------

    async def recommend(
        self, query: Query, caller_remaining_s: float | None, queued_s: float = 0.0
    ) -> Answer:
        check_query(query, need_user=True, known_categories=self.known_categories())
        return await self._guarded(query, caller_remaining_s, queued_s, self._recommend)

    async def similar(
        self, query: Query, caller_remaining_s: float | None, queued_s: float = 0.0
    ) -> Answer:
        check_query(query, need_user=False, known_categories=self.known_categories())
        if not query.item_id:
            raise InvalidArgument("item_id", "is required")
        return await self._guarded(query, caller_remaining_s, queued_s, self._similar)

    async def _guarded(
        self,
        query: Query,
        caller_remaining_s: float | None,
        queued_s: float,
        path: Callable[[Query, Budget, Answer], Awaitable[Answer]],
    ) -> Answer:
        """Shed at once when the (adaptive) bound on requests in flight is
        reached or this one queued too long already (overload shows as
        queueing before us)."""
        answer = Answer(items=[])
        QUEUED_SECONDS.observe(queued_s)
        if queued_s * 1000 > self.settings.max_queue_ms:
            SHED_QUEUED.inc()
            return self.fallback(answer, "SHED", query)
        if not self.limit.admits(self.in_flight):
            SHED_BY_BOUND.inc()
            return self.fallback(answer, "SHED", query)
        self.in_flight += 1
        IN_FLIGHT.inc()
        started = time.perf_counter()
        try:
            budget = Budget(self.settings, caller_remaining_s, queued_s)
            try:
                return await path(query, budget, answer)
            except StageFailed as failure:
                return self.fallback(answer, failure.reason, query)
        finally:
            latency_s = queued_s + time.perf_counter() - started
            self.limit.record(latency_s, answer.reason, self.in_flight)
            self.in_flight -= 1
            IN_FLIGHT.dec()

    async def _user(self, query: Query, budget: Budget, answer: Answer) -> fpb.UserFeatures:
        reply = await self._stage(
            "features",
            "FEATURES",
            self.settings.features_ms,
            budget,
            answer,
            lambda t: self.features.GetUserFeatures(
                fpb.GetUserFeaturesRequest(user_id=query.user_id),
                timeout=t,
                metadata=outbound_metadata(),
            ),
        )
        return reply.user

    async def _embed(self, profile: fpb.UserFeatures, budget: Budget, answer: Answer) -> Embedded:
        """The user's vector: from the cache when this profile was embedded by
        the model version in use, else from the ranker (and cached)."""
        key = UserVectors.key(profile)
        cached = self.user_vectors.get(key)
        if cached is not None:
            with tracer.start_as_current_span("gateway.embed") as span:
                span.set_attribute(attr.STAGE, "embed")
                span.set_attribute(attr.CACHE_HITS, 1)
            STAGE_CHILDREN["embed"].observe(0.0)
            answer.timings.append(("embed", 0.0))
            return Embedded(*cached)
        reply = await self._stage(
            "embed",
            "RANKER",
            self.settings.embed_ms,
            budget,
            answer,
            lambda t: self.ranker.EmbedUser(
                rpb.EmbedUserRequest(user=profile), timeout=t, metadata=outbound_metadata()
            ),
        )
        self.user_vectors.put(key, reply.vector_f32, reply.model_version)
        return Embedded(reply.vector_f32, reply.model_version)

    async def _recommend(self, query: Query, budget: Budget, answer: Answer) -> Answer:
        user = await self._user(query, budget, answer)
        trace.get_current_span().set_attribute(attr.USER_FOUND, user.found)
        if not user.found:
            return self.fallback(answer, "COLD_START", query)
        seen = list(user.seen_item_ids)
        profile = ranker_profile(user)
        try:
            embedded = await self._embed(profile, budget, answer)
            exclude = list(query.exclude_item_ids)
            exclude += seen[: max(0, RETRIEVER_EXCLUDE_LIMIT - len(exclude))]
            retrieved = await self._stage(
                "retrieve",
                "RETRIEVER",
                self.settings.retrieve_ms,
                budget,
                answer,
                lambda t: self.retriever.Search(
                    qpb.SearchRequest(
                        vector_f32=embedded.vector_f32,
                        k=self.settings.candidates,
                        filter=qpb.SearchFilter(
                            categories=query.categories, exclude_item_ids=exclude
                        ),
                        columns=True,
                    ),
                    timeout=t,
                    metadata=outbound_metadata(),
                ),
            )
        except StageFailed as failure:
            return await self._personal_fallback(answer, failure.reason, query, seen, user, budget)
        ids, scores = list(retrieved.item_ids), np.frombuffer(retrieved.scores_f32, "<f4")
        if len(seen) + len(query.exclude_item_ids) > RETRIEVER_EXCLUDE_LIMIT:
            # The retriever was sent only the first 1,000 exclusions.
            blocked = {*query.exclude_item_ids, *seen}
            keep = [n for n, i in enumerate(ids) if i not in blocked]
            ids, scores = [ids[n] for n in keep], scores[keep]
        return await self._rank_and_merge(query, profile, embedded, ids, scores, budget, answer)

    async def _similar(self, query: Query, budget: Budget, answer: Answer) -> Answer:
        user: fpb.UserFeatures | None = None
        seen: list[str] = []
        if query.user_id:
            user = await self._user(query, budget, answer)
            seen = list(user.seen_item_ids) if user.found else []
        depth = self.settings.candidates if user is not None and user.found else query.k
        retrieved = await self._stage(
            "retrieve",
            "RETRIEVER",
            self.settings.retrieve_ms,
            budget,
            answer,
            lambda t: self.retriever.SimilarItems(
                qpb.SimilarItemsRequest(
                    item_id=query.item_id,
                    k=depth,
                    filter=qpb.SearchFilter(
                        categories=query.categories, exclude_item_ids=query.exclude_item_ids
                    ),
                ),
                timeout=t,
                metadata=outbound_metadata(),
            ),
        )
        blocked = {*query.exclude_item_ids, *seen}
        hits = [c for c in retrieved.items if c.item_id not in blocked]
        ids = [c.item_id for c in hits]
        scores = np.fromiter((c.score for c in hits), np.float32, len(hits))
        if user is None or not user.found:
            return await self._rank_and_merge(query, None, None, ids, scores, budget, answer)
        profile = ranker_profile(user)
        embedded = await self._embed(profile, budget, answer)
        return await self._rank_and_merge(query, profile, embedded, ids, scores, budget, answer)

    async def _rank_and_merge(
        self,
        query: Query,
        profile: fpb.UserFeatures | None,
        embedded: Embedded | None,
        ids: Sequence[str],
        retrieval_scores: np.ndarray,
        budget: Budget,
        answer: Answer,
    ) -> Answer:
        trace.get_current_span().set_attribute(attr.CANDIDATES, len(ids))
        if not ids:
            # Nothing passes the filters (every match seen or excluded): an
            # empty answer, not an outage.
            answer.items = []
            return answer
        scores = retrieval_scores
        if profile is not None and embedded is not None:
            if self.settings.stage_delay_ms:
                await asyncio.sleep(self.settings.stage_delay_ms / 1000)
            try:
                ranked = await self._stage(
                    "rank",
                    "RANKER",
                    self.settings.rank_ms,
                    budget,
                    answer,
                    lambda t: self.ranker.Score(
                        rpb.ScoreRequest(
                            user=profile,
                            user_vector_f32=embedded.vector_f32,
                            user_vector_version=embedded.model_version,
                            item_ids=ids,
                            retrieval_scores_f32=retrieval_scores.tobytes(),
                        ),
                        timeout=t,
                        metadata=outbound_metadata(),
                    ),
                )
                scores = np.asarray(ranked.scores, dtype=np.float32)
                answer.model_version = ranked.model_version
                self.user_vectors.saw_version(ranked.model_version, profile, embedded.model_version)
            except StageFailed as failure:
                # Retrieval order is still personal: better than popularity.
                answer.degraded = True
                answer.reason = failure.reason
                answer.source = "RETRIEVAL_ORDER"
                FALLBACKS.labels(failure.reason.lower()).inc()
        started = time.perf_counter()
        chosen: dict[str, Item] = {}
        # Best first; ties keep retrieval order (a stable sort, as before).
        for n in np.argsort(-scores, kind="stable").tolist():
            item_id = ids[n]
            if item_id not in chosen:
                chosen[item_id] = self._describe(item_id, float(scores[n]))
            if len(chosen) == query.k:
                break
        answer.items = list(chosen.values())
        await self._fill_missing_titles(answer, budget)
        answer.timings.append(("merge", (time.perf_counter() - started) * 1000))
        span = trace.get_current_span()
        span.set_attribute(attr.RESULTS, len(answer.items))
        span.set_attribute(attr.MODEL_VERSION, answer.model_version)
        span.set_attribute(attr.DEGRADED, answer.degraded)
        return answer


def ranker_profile(user: fpb.UserFeatures) -> fpb.UserFeatures:
    """What the ranker reads of a user: without the seen and precomputed
    lists (up to 1,000 ids each), which only the gateway needs."""
    return fpb.UserFeatures(
        user_id=user.user_id,
        found=user.found,
        age=user.age,
        gender=user.gender,
        occupation=user.occupation,
        rating_count=user.rating_count,
        mean_rating=user.mean_rating,
        recent_item_ids=user.recent_item_ids,
    )
