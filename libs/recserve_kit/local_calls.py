"""Unary calls to a service hosted in the caller's own process.

Where one host serves, the gateway's process hosts the features, retriever
and ranker modules (``services.one_process``), and the request path's calls
to them skip gRPC altogether: no serialisation, no HTTP/2 stream, no wake of
gRPC's poller. Each call still runs the very handler a gRPC call would run,
with the same wrapper (error mapping, server span, duration metric, token
checks), and the caller sees the same thing: the reply message, or
``grpc.aio.AioRpcError`` with the status the handler chose, or
DEADLINE_EXCEEDED when ``timeout`` passes (the handler is cancelled, as a
server cancels a call whose deadline passed).

A deadline is kept as gRPC keeps one: by when the answer was ready, not by
when this process's loop got round to it. Over gRPC the core holds an answer
that arrived in time though the caller's loop was busy; here the handler's
own awaits (Triton's reply) are read by the same loop, so a deadline timer
that fires late, after the loop ran other requests' work, first lets the
loop read what arrived meanwhile (``_expire``). Without it a burst's first
requests lost rankings that Triton had answered in time.

``LocalCalls.unary`` has the shape of ``CallStream.unary``, so a
``recserve_kit.clients.Client`` carries its named methods on either.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import grpc

from recserve_kit.call_stream import FrameContext, UnaryHandler, rpc_error


class LocalCalls:
    """The unary methods of one in-process service, by full method name."""

    def __init__(self, handlers: Mapping[str, UnaryHandler]) -> None:
        self.handlers = dict(handlers)

    def unary(self, method: str, response_class: Any = None) -> Callable[..., Awaitable[Any]]:
        """A callable like a stub's ``method``: (request, timeout=, metadata=).
        The request and reply are the messages themselves; the caller must
        not change a message after it has sent it."""
        try:
            behaviour = self.handlers[method].behaviour
        except KeyError:
            raise ValueError(f"{method}: no such unary method in this process") from None

        async def call(
            request: Any, timeout: float | None = None, metadata: Iterable[tuple[str, str]] = ()
        ) -> Any:
            context = FrameContext(dict(metadata), timeout or 0.0)
            try:
                if timeout is None:
                    return await behaviour(request, context)
                loop = asyncio.get_running_loop()
                due = loop.time() + timeout
                async with asyncio.timeout(None) as limit:
                    expiry = loop.call_at(due, _expire, loop, limit, due, timeout)
                    try:
                        return await behaviour(request, context)
                    finally:
                        expiry.cancel()
            except grpc.aio.AbortError:
                code = context.code() or grpc.StatusCode.UNKNOWN
                raise rpc_error(code, context.details()) from None
            except TimeoutError:
                if timeout is not None and limit.expired():
                    late = grpc.StatusCode.DEADLINE_EXCEEDED
                    raise rpc_error(late, "Deadline Exceeded") from None
                raise

        return call


# A timer later than this ran after other work of the loop's.
LATE_S = 0.001


def _expire(
    loop: asyncio.AbstractEventLoop, limit: asyncio.Timeout, due: float, timeout: float
) -> None:
    """The deadline passed: cancel the call, unless the loop reached this
    timer late; then what it could not watch meanwhile (up to the call's
    own length) is given back once, for the answers that arrived in it."""
    late = loop.time() - due
    limit.reschedule(loop.time() + (min(late, timeout) if late > LATE_S else 0.0))
