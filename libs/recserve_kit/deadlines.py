"""Deadline propagation: every outbound call gets the smaller of its own cap
and what remains of the caller's deadline, minus a small margin so the
answer still has time to travel back."""

from __future__ import annotations

import grpc

from recserve_kit.errors import DeadlineExhausted

# Time kept back for the response to travel back up one hop.
RETURN_MARGIN_S = 0.001


def remaining_s(context: grpc.aio.ServicerContext) -> float | None:
    """Seconds left of the caller's deadline, or None when it set none."""
    remaining = context.time_remaining()
    return None if remaining is None else max(0.0, remaining)


def outbound_timeout(
    context: grpc.aio.ServicerContext | None, cap_s: float, floor_s: float = 0.0005
) -> float:
    """Timeout for one outbound call.

    Raises DeadlineExhausted when less than ``floor_s`` would be left, so the
    caller can fall back at once instead of making a call that cannot finish.
    """
    timeout = cap_s
    if context is not None:
        remaining = remaining_s(context)
        if remaining is not None:
            timeout = min(cap_s, remaining - RETURN_MARGIN_S)
    if timeout < floor_s:
        raise DeadlineExhausted("deadline budget exhausted before the call")
    return timeout
