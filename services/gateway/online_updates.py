"""Kept events on to the users' live features, off the events call's path.

The events call answers once its batch is on disk; the features service
gets the batch's taste-changing events from a queue drained by one sender,
which merges what queued while its last call ran and while it rested
after it (as long as that call took, at least ``min_rest_s`` and at most
``max_rest_s``), up to
``max_batch`` events a call: at a marketplace's event rate the features service then
writes a few large batches a second instead of a call per events call,
each user's row once a batch however many events they sent, and
a slow features service slows nobody's events call. The queue is bounded:
past ``max_queued`` events a batch is dropped from the live update (kept on
disk, learned at the next build), counted and logged.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections import deque
from collections.abc import Sequence

import grpc
from prometheus_client import Counter

from recserve.features.v1 import features_pb2 as fpb
from recserve_kit.clients import Client
from recserve_kit.tracing import outbound_metadata

ONLINE = Counter(
    "recserve_gateway_event_online_updates_total",
    "Kept events sent on to the users' live features: updated, failed, or dropped (the queue "
    "was full); the latter two are kept, not applied live.",
    ["outcome"],
)
# Events merged into one call at most: each user's activity, each item's
# statistics and each user's vector are written once a call, so under a
# flood the features service writes once per user per call, not per event
# (the features service's max_events takes as many).
MERGED_EVENTS = 10_000
TIMEOUT_S = 10.0  # one merged call of up to max_batch events
# Between calls the sender rests as long as its last call took, at most
# this: live updates then hold the process about half the time at most, the
# events call keeps being answered meanwhile, and the next call merges what
# arrived. Without the rest, a store whose client holds the GIL (Redis) kept
# the events call waiting, few events queued, and each call wrote about one
# row an event: 1,500 events a second acknowledged, not 5,000.
MAX_REST_S = 0.5
# And at least this while events keep coming: the features service answers
# a call before it writes (it merges, and writes behind), so a rest as long
# as the call alone made calls of about a hundred events, each paying the
# call's own costs (its items sent to watchers, its users' rows read).
MIN_REST_S = 0.25
LOG_EVERY_S = 10.0  # a full queue is logged at most this often
log = logging.getLogger(__name__)
Metadata = tuple[tuple[str, str], ...]


class OnlineUpdates:
    def __init__(
        self,
        features: Client | None,
        max_batch: int = MERGED_EVENTS,
        max_queued: int = 100_000,
        max_rest_s: float = MAX_REST_S,
        min_rest_s: float = MIN_REST_S,
    ) -> None:
        self.features = features
        self.max_batch = max_batch
        self.max_queued = max_queued
        self.max_rest_s = max_rest_s
        self.min_rest_s = min(min_rest_s, max_rest_s)
        self._last_call_s = 0.0  # how long the last call took; 0 after the queue ran dry
        self.queue: deque[tuple[Metadata, list[fpb.UserEvent]]] = deque()
        self.queued = 0
        self._sender: asyncio.Task[None] | None = None
        self._dropped_logged_at = 0.0

    def submit(self, events: Sequence[fpb.UserEvent], token: Metadata) -> None:
        """Queues ``events`` (sent with the caller's ``token``)."""
        if self.features is None or not events:
            return
        if self.queued + len(events) > self.max_queued:
            ONLINE.labels("dropped").inc(len(events))
            if time.monotonic() - self._dropped_logged_at > LOG_EVERY_S:
                self._dropped_logged_at = time.monotonic()
                log.warning("live feature updates queue full: %d events kept, not applied live",
                            len(events))  # fmt: skip
            return
        self.queue.append((token, list(events)))
        self.queued += len(events)
        if self._sender is None or self._sender.done():
            # A context of its own: not the trace of the call that started it.
            self._sender = asyncio.create_task(self._drain(), context=contextvars.Context())

    def _next_call(self) -> tuple[Metadata, list[fpb.UserEvent]]:
        """The queued events of one token, oldest first, up to max_batch."""
        token, events = self.queue.popleft()
        while self.queue and self.queue[0][0] == token:
            more = self.queue[0][1]
            if len(events) + len(more) > self.max_batch:
                break
            events += more
            self.queue.popleft()
        if len(events) > self.max_batch:  # one batch larger than the features service takes
            self.queue.appendleft((token, events[self.max_batch :]))
            events = events[: self.max_batch]
        self.queued -= len(events)
        return token, events

    async def _drain(self) -> None:
        assert self.features is not None
        while self.queue:
            rest = 0.0  # after a quiet spell the first events go at once
            if self._last_call_s > 0:
                rest = min(max(self._last_call_s, self.min_rest_s), self.max_rest_s)
            if rest > 0:
                await asyncio.sleep(rest)  # what arrives meanwhile joins the next call
            token, events = self._next_call()
            started = time.monotonic()
            try:
                await self.features.PushUserEvents(
                    fpb.PushUserEventsRequest(events=events),
                    timeout=TIMEOUT_S,
                    metadata=[*outbound_metadata(), *token],
                )
            except grpc.aio.AioRpcError as error:
                ONLINE.labels("failed").inc(len(events))
                log.warning(
                    "kept %d events but could not update live features: %s %s",
                    len(events), error.code().name, error.details(),
                )  # fmt: skip
                continue
            finally:
                self._last_call_s = time.monotonic() - started
            ONLINE.labels("updated").inc(len(events))
        self._last_call_s = 0.0  # ran dry: the next event goes at once

    async def idle(self) -> None:
        """Until everything queued has been sent (tests, shutdown)."""
        while self._sender is not None and not self._sender.done():
            await asyncio.shield(self._sender)
