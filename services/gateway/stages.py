"""One request's stages: each backend call runs inside the request's
deadline with its own cap, in its own span, timed; a backend's failure
becomes ``StageFailed`` naming the stage and the reason, which the degrade
policy (``degrade.py``) turns into an answer. A backend that refused what the
caller sent is the caller's error (INVALID_ARGUMENT / NOT_FOUND), not an
outage."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc
from opentelemetry import trace
from prometheus_client import Histogram

from recserve_kit import attributes as attr
from recserve_kit.deadlines import Deadline
from recserve_kit.errors import DeadlineExhausted, InvalidArgument, NotFound

log = logging.getLogger(__name__)
tracer = trace.get_tracer("recserve.gateway")
T = TypeVar("T")

STAGE_SECONDS = Histogram(
    "recserve_gateway_stage_duration_seconds",
    "Duration of each gateway stage.",
    ["stage"],
    buckets=(0.0005, 0.001, 0.002, 0.004, 0.008, 0.015, 0.03, 0.06, 0.1, 0.2),
)
STAGE_CHILDREN = {
    name: STAGE_SECONDS.labels(name)
    for name in ("features", "embed", "retrieve", "rank", "describe")
}


class StageFailed(Exception):
    """``stage`` could not give its part of the answer, for ``reason`` (a
    DegradedReason name without the prefix)."""

    def __init__(self, stage: str, reason: str) -> None:
        super().__init__(f"{stage}: {reason}")
        self.stage = stage
        self.reason = reason


class Stages:
    """The stages of one request, sharing its deadline and its timings."""

    def __init__(self, deadline: Deadline) -> None:
        self.deadline = deadline
        self.timings: list[tuple[str, float]] = []

    def timeout(self, stage: str, cap_ms: float) -> float:
        try:
            return self.deadline.timeout(cap_ms / 1000)
        except DeadlineExhausted:
            raise StageFailed(stage, "BUDGET_EXHAUSTED") from None

    def record(self, stage: str, seconds: float) -> None:
        STAGE_CHILDREN[stage].observe(seconds)
        self.timings.append((stage, seconds * 1000))

    async def run(
        self, stage: str, backend: str, cap_ms: float, call: Callable[[float], Awaitable[T]]
    ) -> T:
        """``call(timeout)`` as stage ``stage``; ``backend`` names the reason
        (``RANKER`` -> ``RANKER_TIMEOUT``)."""
        timeout = self.timeout(stage, cap_ms)
        started = time.perf_counter()
        with tracer.start_as_current_span(f"gateway.{stage}") as span:
            span.set_attribute(attr.STAGE, stage)
            span.set_attribute(attr.BUDGET_REMAINING_MS, self.deadline.remaining_s() * 1000)
            try:
                return await call(timeout)
            except grpc.aio.AioRpcError as exc:
                reason = failure_reason(exc, stage, backend)
                span.set_attribute(attr.DEGRADED_REASON, reason)
                raise StageFailed(stage, reason) from None
            finally:
                self.record(stage, time.perf_counter() - started)

    def cached(self, stage: str) -> None:
        """A stage answered from a cache: a span and a zero timing, no call."""
        with tracer.start_as_current_span(f"gateway.{stage}") as span:
            span.set_attribute(attr.STAGE, stage)
            span.set_attribute(attr.CACHE_HITS, 1)
        self.record(stage, 0.0)


def failure_reason(exc: grpc.aio.AioRpcError, stage: str, backend: str) -> str:
    """The degraded reason for a failed call, or the caller's own error raised."""
    code = exc.code()
    if code == grpc.StatusCode.NOT_FOUND:
        raise NotFound(exc.details() or "not found") from None
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        # The backend refused what the caller sent: the caller's error.
        field, _, problem = (exc.details() or "request: invalid").partition(": ")
        raise InvalidArgument(field, problem or "invalid") from None
    if code not in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE):
        log.warning("%s stage failed with %s: %s", stage, code.name, exc.details())
    return f"{backend}_{'TIMEOUT' if code == grpc.StatusCode.DEADLINE_EXCEEDED else 'UNAVAILABLE'}"
