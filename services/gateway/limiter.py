"""The gateway's admission: an adaptive bound on requests in flight (AIMD,
as in Netflix's concurrency-limits ``AIMDLimit``), and how long a request
may have queued before the gateway (``QueueWait``, below).

Under overload on CPU-bound hosts, every admitted request slows every other:
at 200/s on two cores a fixed bound of 64 let requests run out their stage
deadlines mid-path (CPU spent, then the fallback anyway, p99 110 ms), while a
bound of 3 shed the same share at the door in a millisecond and kept p99 at
51 ms (docs/benchmarks.md). The right bound depends on the host and the load,
so it is learned: a request that ends late or with a stage timeout shrinks
the bound by ``backoff`` (at most once per ``target_s``, so one slow burst
does not collapse it), and an on-time request grows it by 1/limit while the
bound is actually in use.

A bound learned under overload says nothing once the overload is gone: after
``recovery_s`` without a late request it is back at the maximum. Otherwise a
bound cut to its floor by one busy minute stays there through any quiet
spell (growth needs the bound in use), and the next burst of a page's few
carousels would be shed though the machine is idle.
"""

from __future__ import annotations

import time
from collections.abc import Callable

OVERLOAD_REASONS = frozenset(
    {"FEATURES_TIMEOUT", "RANKER_TIMEOUT", "RETRIEVER_TIMEOUT", "BUDGET_EXHAUSTED"}
)


class AdaptiveLimit:
    def __init__(
        self,
        minimum: int,
        maximum: int,
        target_s: float,
        backoff: float = 0.9,
        clock: Callable[[], float] = time.monotonic,
        recovery_s: float = 1.0,
    ) -> None:
        if not 1 <= minimum <= maximum:
            raise ValueError(f"need 1 <= minimum <= maximum, got {minimum}, {maximum}")
        self.minimum = minimum
        self.maximum = maximum
        self.target_s = target_s
        self.backoff = backoff
        self.clock = clock
        self.recovery_s = recovery_s
        self.limit = float(maximum)
        self._last_decrease = -float("inf")

    @property
    def current(self) -> int:
        if self.limit < self.maximum and self.clock() - self._last_decrease >= self.recovery_s:
            self.limit = float(self.maximum)  # no overload for a while: forget it
        return int(self.limit)

    def admits(self, in_flight: int) -> bool:
        return in_flight < self.current

    def record(self, latency_s: float, reason: str, in_flight: int) -> None:
        """One finished request: its end-to-end latency, its degraded reason
        ("" when full) and the requests in flight when it ended (itself included)."""
        if latency_s > self.target_s or reason in OVERLOAD_REASONS:
            now = self.clock()
            if now - self._last_decrease >= self.target_s:
                self.limit = max(float(self.minimum), self.limit * self.backoff)
                self._last_decrease = now
        elif in_flight * 2 >= self.limit:
            self.limit = min(float(self.maximum), self.limit + 1 / self.limit)


class QueueWait:
    """How long a request may have queued before the gateway (Envoy's
    x-request-start to its handler) and still take the full path: CoDel as
    servers use it for their request queues (Maurer, "Fail at scale", ACM
    Queue 2015). While the queue has been empty within the last ``long_s``
    (a request waited at most ``empty_s``), up to ``long_s``: a page's burst
    after a quiet spell is such a queue, and its tail has most of the budget
    left. Once it has not, the queue stands (overload) and only ``short_s``
    is allowed, which keeps it short."""

    def __init__(
        self,
        short_s: float,
        long_s: float,
        empty_s: float = 0.005,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 < short_s <= long_s:
            raise ValueError(f"need 0 < short_s <= long_s, got {short_s}, {long_s}")
        self.short_s = short_s
        self.long_s = long_s
        self.empty_s = min(empty_s, short_s)
        self.clock = clock
        self._last_empty = -float("inf")

    def admits(self, queued_s: float) -> bool:
        if queued_s <= self.empty_s:
            self._last_empty = self.clock()
            return True
        if queued_s <= self.short_s:
            return True
        return queued_s <= self.long_s and self.clock() - self._last_empty <= self.long_s
