"""Kept events on to the users' live features, off the events call's path.

The events call answers once its batch is on disk; the features service
gets the batch's taste-changing events from a queue drained by one sender,
which sends at most one call every ``interval_s`` while events keep coming
(the first after a quiet spell at once), each with all that queued since,
per token and up to ``max_batch`` events: at a marketplace's event rate
the features service then takes a few large batches a second instead of a
call per events call, each user's row once a batch however many events
they sent. The features service serves a call's events at once and
answers when its online store has them (services.features.events), about
a second later: up to ``max_in_flight`` calls are under way at once,
so an event never waits for an earlier call's write, and a slow features
service slows nobody's events call. The queue is bounded: past
``max_queued`` events a batch is dropped from the live update (kept on
disk, learned at the next build), counted and logged.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import math
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
TIMEOUT_S = 10.0  # one merged call of up to max_batch events, until stored
# While events keep coming, one call this often at most: each merges what
# queued since. Calls sent as they came (each answered in a few ms before
# the features service wrote behind them) held about a hundred events, each
# paying the call's own costs (its items sent to watchers, its users' rows
# read).
SEND_EVERY_S = 0.25
# Calls under way at once: each answers when stored (the features service
# writes about once a second), so four or five are usually under way.
MAX_IN_FLIGHT = 8
LOG_EVERY_S = 10.0  # a full queue is logged at most this often
log = logging.getLogger(__name__)
Metadata = tuple[tuple[str, str], ...]


class OnlineUpdates:
    def __init__(
        self,
        features: Client | None,
        max_batch: int = MERGED_EVENTS,
        max_queued: int = 100_000,
        interval_s: float = SEND_EVERY_S,
        max_in_flight: int = MAX_IN_FLIGHT,
    ) -> None:
        self.features = features
        self.max_batch = max_batch
        self.max_queued = max_queued
        self.interval_s = interval_s
        self.queue: deque[tuple[Metadata, list[fpb.UserEvent]]] = deque()
        self.queued = 0
        self._sender: asyncio.Task[None] | None = None
        self._sent_at = -math.inf  # when the last call went
        self._slots = asyncio.Semaphore(max_in_flight)
        self._calls: set[asyncio.Task[None]] = set()
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
        while self.queue:
            wait = self._sent_at + self.interval_s - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)  # what arrives meanwhile joins the next call
            await self._slots.acquire()  # and what arrives while all calls are under way
            token, events = self._next_call()
            self._sent_at = time.monotonic()
            call = asyncio.create_task(self._send(token, events))
            self._calls.add(call)
            call.add_done_callback(self._calls.discard)

    async def _send(self, token: Metadata, events: list[fpb.UserEvent]) -> None:
        assert self.features is not None
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
        else:
            ONLINE.labels("updated").inc(len(events))
        finally:
            self._slots.release()

    async def idle(self) -> None:
        """Until everything queued has been sent and answered (tests, shutdown)."""
        while (self._sender is not None and not self._sender.done()) or self._calls:
            if self._sender is not None and not self._sender.done():
                await asyncio.shield(self._sender)
            if self._calls:
                await asyncio.wait(list(self._calls))
