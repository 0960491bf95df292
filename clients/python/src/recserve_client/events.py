"""EventBatcher: events from an app backend's request handlers, sent in
batches by a thread of its own, retried when the service could not take
them, never holding up a handler.

from recserve_client import ClientOptions, Event, EventBatcher, RecserveClient

client = RecserveClient(target, ClientOptions(token=app_token))
batcher = EventBatcher(client)  # one per process, beside the client
batcher.add(Event(click_id, user_id, item_id, "click", recommendation_id=rid))
batcher.close()  # at shutdown (or at the interpreter's exit): sends what is queued
"""

from __future__ import annotations

import atexit
import logging
import math
import random
import re
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from types import TracebackType

from recserve_client.client import EVENTS_TIMEOUT_S, RecserveClient
from recserve_client.errors import InvalidRequest, RecserveError
from recserve_client.results import Event

log = logging.getLogger(__name__)

MAX_BATCH = 1000  # the most one PushEvents call takes
# The service may not have answered, or may have kept the batch and the
# answer was lost (DEADLINE_EXCEEDED): sent again, an event already kept is
# counted as a duplicate, not kept twice. Any other failure stays a failure.
RETRIED = frozenset({"UNAVAILABLE", "RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED"})
# The service's id policy (docs/events.md): checked here so that one bad id
# raises in the handler that made it instead of costing a batch a call.
_ID = re.compile(r"[A-Za-z0-9._:@/-]{1,128}")
_REFUSED_EVENT = re.compile(r"^events\[(\d+)\]")


def new_event_id() -> str:
    """A fresh random id, for an event that has no id of its own. Prefer one
    derived from your own record of the event (its click's id): sent again
    by your own retry, it is then counted once."""
    return uuid.uuid4().hex


def check_event(event: Event) -> None:
    """ValueError naming the first field the service would refuse for sure;
    what only the service knows (the declared event types, their value
    ranges) is left to it."""
    fields = {"event_id": event.event_id, "user_id": event.user_id, "item_id": event.item_id}
    if event.recommendation_id:
        fields["recommendation_id"] = event.recommendation_id
    for name, value in fields.items():
        if not isinstance(value, str) or _ID.fullmatch(value) is None:
            raise ValueError(f"{name}: 1 to 128 of ASCII letters, digits and -_.:@/, got {value!r}")
    if not event.event_type:
        raise ValueError("event_type: is empty")
    if not math.isfinite(event.value):
        raise ValueError(f"value: must be a finite number, got {event.value!r}")
    if event.timestamp < 0:
        raise ValueError(f"timestamp: seconds since 1970 (0: now), got {event.timestamp}")


@dataclass(frozen=True)
class BatcherStats:
    """Counts of events since the batcher started (``queued`` and
    ``sending``: now). Each event given to ``add`` (and not refused with
    ValueError) is counted once: in dropped_full, or, once handled, in
    accepted, duplicates or another dropped_* count."""

    queued: int  # waiting for a batch
    sending: int  # in the batch being sent or retried
    accepted: int  # kept by the service
    duplicates: int  # kept before (a resend), or repeated in one batch: kept once
    dropped_full: int  # not queued: the queue was full
    dropped_rejected: int  # refused by the service (InvalidRequest, NotAuthorized, ...)
    dropped_failed: int  # still failing after the last attempt
    dropped_at_close: int  # still unsent when close's timeout ran out
    retries: int  # calls sent again after UNAVAILABLE, RESOURCE_EXHAUSTED or DEADLINE_EXCEEDED
    batches: int  # calls the service answered
    last_error: Exception | None  # the last failure of a call, retried or not


class EventBatcher:
    """Make one per process, beside its ``RecserveClient`` (whose channel it
    sends on and which it does not close), and ``close()`` it at shutdown,
    or use it as a context manager; one still open when the interpreter
    exits normally is closed then (``atexit``).

    ``add`` only queues: a batch is sent, one call at a time, once it holds
    ``batch_size`` events or its oldest event has waited
    ``flush_interval_s``. A call that failed with UNAVAILABLE,
    RESOURCE_EXHAUSTED or DEADLINE_EXCEEDED is sent again, the same events
    with the same ids, after a backoff from ``initial_backoff_s`` doubling
    to ``max_backoff_s`` (a random part of it, as gRPC's own retries), up
    to ``max_attempts`` calls. An event the service refuses (``events[N]``)
    is dropped and the rest of its batch, of which nothing was kept, is sent
    without it; any other refusal drops the batch. Past ``max_queued``
    waiting events, a new one is dropped."""

    def __init__(
        self,
        client: RecserveClient,
        *,
        batch_size: int = 500,
        flush_interval_s: float = 0.5,
        max_queued: int = 10_000,
        max_attempts: int = 10,
        initial_backoff_s: float = 0.1,
        max_backoff_s: float = 5.0,
        call_timeout_s: float = EVENTS_TIMEOUT_S,
    ) -> None:
        if not 1 <= batch_size <= MAX_BATCH:
            raise ValueError(f"batch_size: 1 to {MAX_BATCH}")
        if max_queued < 1 or max_attempts < 1:
            raise ValueError("max_queued, max_attempts: at least 1")
        if min(flush_interval_s, initial_backoff_s, max_backoff_s, call_timeout_s) <= 0:
            raise ValueError("flush_interval_s, backoffs, call_timeout_s: must be positive")
        self._client = client
        self._batch_size, self._interval = batch_size, flush_interval_s
        self._max_queued, self._max_attempts = max_queued, max_attempts
        self._call_timeout_s = call_timeout_s
        self._backoff = (initial_backoff_s, max_backoff_s)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)  # the sender: events, a flush, close
        self._progress = threading.Condition(self._lock)  # flush and close: events handled
        self._queue: deque[tuple[float, Event]] = deque()  # (when added, event)
        # Events ever queued, taken into a batch, and handled (ended in a count).
        self._added = self._taken = self._handled = 0
        self._flush_to = 0  # partial batches go at once until _taken reaches it
        self._closing, self._full_streak = False, 0
        self._abandon = threading.Event()  # close's timeout ran out
        self._counts = dict.fromkeys(
            ("accepted", "duplicates", "dropped_full", "dropped_rejected", "dropped_failed",
             "dropped_at_close", "retries", "batches"), 0)  # fmt: skip
        self._last_error: Exception | None = None
        self._thread = threading.Thread(target=self._run, name="recserve-events", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def add(self, event: Event) -> bool:
        """Queues an event; never waits. False when the queue was full (the
        event is dropped and counted). ValueError for an event the service
        would refuse (a bad id: it would cost its whole batch a call)."""
        check_event(event)
        with self._lock:
            if self._closing:
                raise RuntimeError("EventBatcher: closed")
            if len(self._queue) < self._max_queued:
                self._queue.append((time.monotonic(), event))
                self._added += 1
                self._full_streak = 0
                if len(self._queue) in (1, self._batch_size):
                    self._wake.notify()
                return True
            self._counts["dropped_full"] += 1
            self._full_streak += 1
            first = self._full_streak == 1
        if first:
            log.warning("events queue full (%d): dropping new events", self._max_queued)
        return False

    def flush(self, timeout_s: float | None = 10.0) -> bool:
        """Sends what is queued now, without waiting for full batches, and
        waits until each event added before the call is accepted, a
        duplicate, or dropped (``stats`` says which). False if the timeout
        ran out first (retries go on)."""
        with self._lock:
            target = self._added
            self._flush_to = max(self._flush_to, target)
            self._wake.notify()
            return self._progress.wait_for(lambda: self._handled >= target, timeout_s)

    def close(self, timeout_s: float = 10.0) -> bool:
        """Sends what is queued (retrying as usual) and stops; later adds
        raise. True when all of it was handled within the timeout; False when
        it ran out, and what was still unsent is dropped (counted)."""
        atexit.unregister(self.close)
        with self._lock:
            self._closing = True
            self._wake.notify()
        self._thread.join(timeout_s)
        if not self._thread.is_alive():
            return True
        self._abandon.set()  # the batch being retried is dropped at its next wait
        with self._lock:
            left = len(self._queue)
            self._queue.clear()
            self._taken += left  # handled without a batch: sending stays what is in flight
            self._count("dropped_at_close", left)
        log.warning("events: closed with %d queued events unsent (and a batch in flight)", left)
        return False

    @property
    def stats(self) -> BatcherStats:
        with self._lock:
            return BatcherStats(
                queued=len(self._queue),
                sending=self._taken - self._handled,
                last_error=self._last_error,
                **self._counts,
            )

    def __enter__(self) -> EventBatcher:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # The sender thread.

    def _count(self, name: str, events: int) -> None:
        """Called holding the lock: ``events`` handled, ended in ``name``."""
        self._counts[name] += events
        self._handled += events
        self._progress.notify_all()

    def _run(self) -> None:
        while (batch := self._next_batch()) is not None:
            try:
                self._send(batch)
            except Exception as error:  # a closed channel, a bug: never the thread's end
                log.exception("events: dropping a batch of %d", len(batch))
                with self._lock:
                    self._last_error = error
                    self._count("dropped_failed", self._taken - self._handled)

    def _next_batch(self) -> list[Event] | None:
        with self._lock:
            while not self._abandon.is_set():
                if not self._queue:
                    if self._closing:
                        return None
                    self._wake.wait()
                    continue
                due = self._queue[0][0] + self._interval
                ready = len(self._queue) >= self._batch_size or self._taken < self._flush_to
                if ready or self._closing or time.monotonic() >= due:
                    n = min(self._batch_size, len(self._queue))
                    self._taken += n
                    return [self._queue.popleft()[1] for _ in range(n)]
                self._wake.wait(due - time.monotonic())
            return None

    def _send(self, batch: list[Event]) -> None:
        unique: dict[str, Event] = {}
        for event in batch:  # the service refuses a batch naming one id twice
            unique.setdefault(event.event_id, event)
        events = list(unique.values())
        with self._lock:
            self._count("duplicates", len(batch) - len(events))
        attempt = 1
        while events:
            try:
                result = self._client.push_events(events, timeout_s=self._call_timeout_s)
            except InvalidRequest as error:
                events = self._without_refused(events, error)
                continue
            except RecserveError as error:
                if error.code not in RETRIED or attempt >= self._max_attempts:
                    retried = error.code in RETRIED
                    self._drop(events, "dropped_failed" if retried else "dropped_rejected", error)
                    return
                if not self._back_off(attempt, error, len(events)):
                    self._drop(events, "dropped_at_close", error)
                    return
                attempt += 1
                continue
            with self._lock:
                self._counts["batches"] += 1
                accepted = min(result.accepted, len(events))
                self._count("accepted", accepted)
                self._count("duplicates", len(events) - accepted)  # the service's duplicates
            return

    def _without_refused(self, events: list[Event], error: InvalidRequest) -> list[Event]:
        """The batch less the event the service named (``events[N].field``);
        nothing of it was kept. None of it when no event was named."""
        match = _REFUSED_EVENT.match(error.field or "")
        n = int(match.group(1)) if match else len(events)
        if n >= len(events):
            self._drop(events, "dropped_rejected", error)
            return []
        self._drop([events[n]], "dropped_rejected", error)
        return events[:n] + events[n + 1 :]

    def _back_off(self, attempt: int, error: RecserveError, events: int) -> bool:
        """Waits before attempt ``attempt + 1``; False if close gave up meanwhile."""
        initial, most = self._backoff
        wait = random.uniform(0, min(most, initial * 2 ** (attempt - 1)))
        log.info("events: %s; sending %d again in %.2f s", error, events, wait)
        with self._lock:
            self._last_error = error
        if self._abandon.wait(wait):
            return False
        with self._lock:
            self._counts["retries"] += 1
        return True

    def _drop(self, events: list[Event], count: str, error: Exception) -> None:
        if count != "dropped_at_close":
            log.warning("events: dropped %d (%s): %s", len(events), count, error)
        with self._lock:
            self._last_error = error
            self._count(count, len(events))
