"""Deadlines: one concept for every service. A ``Deadline`` is the moment
work must be done by: the smaller of a budget of our own (less the time
already spent queued) and the caller's gRPC deadline, minus a small margin
so the answer still has time to travel back. Every outbound call gets the
smaller of its own cap and what remains; a call that would start with less
than the floor left is not made (``DeadlineExhausted``), so the caller can
fall back at once instead of making a call that cannot finish."""

from __future__ import annotations

import math
import time

import grpc

from recserve_kit.errors import DeadlineExhausted

# Time kept back for the response to travel back up one hop.
RETURN_MARGIN_S = 0.001
DEFAULT_FLOOR_S = 0.0005


def remaining_s(context: grpc.aio.ServicerContext) -> float | None:
    """Seconds left of the caller's deadline, or None when it set none."""
    remaining = context.time_remaining()
    return None if remaining is None else max(0.0, remaining)


class Deadline:
    def __init__(
        self,
        caller_remaining_s: float | None,
        budget_s: float | None = None,
        spent_s: float = 0.0,
        floor_s: float = DEFAULT_FLOOR_S,
    ) -> None:
        total = math.inf if budget_s is None else budget_s - spent_s
        if caller_remaining_s is not None:
            total = min(total, caller_remaining_s - RETURN_MARGIN_S)
        self.at = time.perf_counter() + total
        self.floor_s = floor_s

    @classmethod
    def of_call(
        cls, context: grpc.aio.ServicerContext | None, floor_s: float = DEFAULT_FLOOR_S
    ) -> Deadline:
        """The deadline the caller of this RPC set (none: no limit)."""
        return cls(None if context is None else remaining_s(context), floor_s=floor_s)

    def remaining_s(self) -> float:
        return self.at - time.perf_counter()

    def timeout(self, cap_s: float) -> float:
        """Timeout for one outbound call, or DeadlineExhausted."""
        timeout = min(cap_s, self.remaining_s())
        if timeout < self.floor_s:
            raise DeadlineExhausted("deadline budget exhausted before the call")
        return timeout


def outbound_timeout(
    context: grpc.aio.ServicerContext | None, cap_s: float, floor_s: float = DEFAULT_FLOOR_S
) -> float:
    """Timeout for one outbound call within the caller's deadline."""
    return Deadline.of_call(context, floor_s).timeout(cap_s)
