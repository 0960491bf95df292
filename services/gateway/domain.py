"""The gateway: admission, then one of two flows inside a latency budget.

Every stage gets the smaller of its own cap and what remains of the budget
(itself the smaller of the configured budget and the caller's deadline, less
the time the request queued before us). What a failed stage is answered
with is the degrade policy's (``degrade.py``); past the (adaptive) bound on
requests in flight, or after queueing too long (``limiter.QueueWait``: a
burst may queue longer than overload), a request is shed to the fallback
at once. The pieces: ``query`` (what is asked and answered, the
edge's checks), ``stages`` (deadline, spans, timings), ``backends`` (the
calls), ``flows`` (Recommend and SimilarItems).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from opentelemetry import trace
from prometheus_client import Counter, Gauge, Histogram

from recserve_kit import attributes as attr
from recserve_kit.clients import Client
from recserve_kit.deadlines import Deadline
from recserve_kit.errors import InvalidArgument
from services.gateway.backends import Backends
from services.gateway.config import GatewaySettings
from services.gateway.degrade import Catalogue, Degrade
from services.gateway.descriptions import ItemDescriptions
from services.gateway.flows import Flows
from services.gateway.limiter import AdaptiveLimit, QueueWait
from services.gateway.popular import PopularItems
from services.gateway.query import Answer, Query, check_query
from services.gateway.segment_lists import SegmentLists
from services.gateway.stages import StageFailed, Stages

QUEUED_SECONDS = Histogram(
    "recserve_gateway_queued_seconds",
    "Time between Envoy taking a request (x-request-start) and the gateway starting it.",
    buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0),
)
SHED = Counter(
    "recserve_gateway_shed_total",
    "Requests shed at the door, by cause: the bound on requests in flight, or "
    "a wait before the gateway past max_queue_ms (overload) or burst_queue_ms.",
    ["cause"],
)
SHED_BY_BOUND, SHED_QUEUED = SHED.labels("bound"), SHED.labels("queued")
IN_FLIGHT = Gauge("recserve_gateway_in_flight", "Requests being served.")
LIMIT = Gauge("recserve_gateway_concurrency_limit", "Requests admitted at once (adaptive).")

Flow = Callable[[Query, Stages], Awaitable[Answer]]


class Gateway:
    def __init__(
        self,
        settings: GatewaySettings,
        features: Client,
        retriever: Client,
        ranker: Client,
        popular: PopularItems,
        descriptions: ItemDescriptions | None = None,
        segments: SegmentLists | None = None,
    ) -> None:
        self.settings = settings
        self.descriptions = descriptions if descriptions is not None else ItemDescriptions()
        self.catalogue = Catalogue(self.descriptions, popular)
        self.backends = Backends(settings, features, retriever, ranker)
        self.degrade = Degrade(self.catalogue, popular, segments)
        self.flows = Flows(self.backends, self.degrade)
        self.in_flight = 0
        self.limit = AdaptiveLimit(
            settings.min_in_flight,
            settings.max_in_flight,
            settings.limit_target_ms / 1000,
            recovery_s=settings.limit_recovery_s,
        )
        self.queue_wait = QueueWait(settings.max_queue_ms / 1000, settings.burst_queue_ms / 1000)
        # Read at scrape time: the gauge shows the bound's recovery when idle too.
        LIMIT.set_function(lambda: self.limit.current)

    async def recommend(
        self, query: Query, caller_remaining_s: float | None, queued_s: float = 0.0
    ) -> Answer:
        check_query(
            query,
            True,
            self.catalogue.categories(),
            self.catalogue.schema(),
            self.degrade.segments,
        )
        return await self._admitted(query, caller_remaining_s, queued_s, self.flows.recommend)

    async def similar(
        self, query: Query, caller_remaining_s: float | None, queued_s: float = 0.0
    ) -> Answer:
        check_query(query, False, self.catalogue.categories(), self.catalogue.schema())
        if not query.item_id:
            raise InvalidArgument("item_id", "is required")
        return await self._admitted(query, caller_remaining_s, queued_s, self.flows.similar)

    async def _admitted(
        self, query: Query, caller_remaining_s: float | None, queued_s: float, flow: Flow
    ) -> Answer:
        """Shed at once when the (adaptive) bound on requests in flight is
        reached or this one queued too long already (overload shows as
        queueing before us; a burst's queue drains, and may be longer)."""
        QUEUED_SECONDS.observe(queued_s)
        trace.get_current_span().set_attribute(attr.QUEUED_MS, queued_s * 1000)
        if not self.queue_wait.admits(queued_s):
            SHED_QUEUED.inc()
            return self.degrade.answer("shed", "SHED", query)
        if not self.limit.admits(self.in_flight):
            SHED_BY_BOUND.inc()
            return self.degrade.answer("shed", "SHED", query)
        self.in_flight += 1
        IN_FLIGHT.inc()
        started = time.perf_counter()
        reason = ""
        try:
            deadline = Deadline(
                caller_remaining_s,
                budget_s=self.settings.budget_ms / 1000,
                spent_s=queued_s,
                floor_s=self.settings.min_stage_ms / 1000,
            )
            stages = Stages(deadline)
            try:
                answer = await flow(query, stages)
            except StageFailed as failure:
                answer = self.degrade.answer(
                    failure.stage, failure.reason, query, timings=stages.timings
                )
            reason = answer.reason
            return answer
        finally:
            latency_s = queued_s + time.perf_counter() - started
            self.limit.record(latency_s, reason, self.in_flight)
            self.in_flight -= 1
            IN_FLIGHT.dec()
