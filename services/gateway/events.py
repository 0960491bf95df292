"""The events API: app backends' events, checked whole, kept durably and
once per event id, in ``<data_dir>/events/app/`` (recserve_kit.jsonl_log)
beside the impressions they join by ``recommendation_id``.

A batch is all or nothing: every event is checked before any is kept. The
reply comes after the batch is written and fsynced, so an acknowledged
event survives a SIGKILL. Event ids already kept are remembered (the last
``remember`` of them, caught up from every replica's files before each
batch), so a retried batch lands once wherever the retry goes; only the
same id reaching two replicas at the same instant can land twice, and
readers (``recserve_kit.jsonl_log.read_unique``) keep the first of each id.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import grpc
from prometheus_client import Counter

from recserve.features.v1 import features_pb2 as fpb
from recserve.recommend.v1 import events_pb2 as epb
from recserve.recommend.v1 import events_pb2_grpc
from recserve_kit.errors import InvalidArgument
from recserve_kit.jsonl_log import JsonlLog, JsonlTail
from recserve_kit.validation import check_id
from recserve_model.catalogue import CatalogueSchema
from services.gateway.online_updates import OnlineUpdates
from services.gateway.outcome_metrics import OutcomeMetrics

EVENTS = Counter(
    "recserve_gateway_events_total",
    "App events by outcome: kept, duplicate (an event id kept before), refused (a bad batch).",
    ["outcome"],
)
MAX_BATCH = 1000
log = logging.getLogger(__name__)
FUTURE_S = 86400


def check_events(
    events: Sequence[epb.AppEvent], schema: CatalogueSchema, now: float
) -> list[dict[str, Any]]:
    """The batch as records to keep; InvalidArgument naming the first bad field."""
    if not 1 <= len(events) <= MAX_BATCH:
        raise InvalidArgument("events", f"1 to {MAX_BATCH} per call, got {len(events)}")
    seen: dict[str, int] = {}
    records = []
    for n, event in enumerate(events):
        field = f"events[{n}]"
        check_id(event.event_id, f"{field}.event_id")
        if event.event_id in seen:
            raise InvalidArgument(f"{field}.event_id", f"duplicates events[{seen[event.event_id]}]")
        seen[event.event_id] = n
        check_id(event.user_id, f"{field}.user_id")
        check_id(event.item_id, f"{field}.item_id")
        kind = schema.event_types.get(event.event_type)
        if kind is None:
            declared = ", ".join(sorted(schema.event_types)) or "none"
            raise InvalidArgument(
                f"{field}.event_type",
                f"{event.event_type[:64]!r} is not a declared event type (declared: {declared})",
            )
        problem = kind.value_problem(event.value)
        if problem is not None:
            raise InvalidArgument(f"{field}.value", problem)
        if event.timestamp < 0 or event.timestamp > now + FUTURE_S:
            raise InvalidArgument(
                f"{field}.timestamp", "seconds since 1970, not more than a day ahead (0: now)"
            )
        if event.recommendation_id:
            check_id(event.recommendation_id, f"{field}.recommendation_id")
        records.append(
            {
                "event_id": event.event_id,
                "user_id": event.user_id,
                "item_id": event.item_id,
                "event_type": event.event_type,
                "timestamp": event.timestamp or int(now),
                "value": event.value,
                "recommendation_id": event.recommendation_id,
                "received_at": round(now, 3),
            }
        )
    return records


class EventLog:
    """The kept events; which ids are kept is caught up from every writer's
    files before each batch (other replicas' too), so a retry that reaches
    another gateway is a duplicate there as well."""

    def __init__(self, directory: Path, remember: int = 1_000_000) -> None:
        self.directory = directory
        self.remember = remember
        self.log = JsonlLog(directory, background=False)  # events are written in the call
        self.kept: OrderedDict[str, None] = OrderedDict()
        self.tail = JsonlTail(directory)
        self.lock = asyncio.Lock()
        # The newest ids of every file (this writer's name's too), not every
        # id of every day: a day of events can take minutes to read.
        for record in self.tail.read_newest(remember):
            self._remember(record["event_id"])

    def catch_up(self) -> None:
        """Remembers the ids other writers (gateway replicas) appended since
        the last call; this one's it remembers as it writes them."""
        for record in self.tail.read_new(skip_writer=self.log.writer):
            self._remember(record["event_id"])

    def _remember(self, event_id: str) -> None:
        self.kept[event_id] = None
        self.kept.move_to_end(event_id)
        if len(self.kept) > self.remember:
            self.kept.popitem(last=False)

    def _keep(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        self.catch_up()
        new = [r for r in records if r["event_id"] not in self.kept]
        if new:
            self.log.write(new)
            for record in new:
                self._remember(record["event_id"])
        return new

    async def keep(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The records not kept before, once they are on disk."""
        async with self.lock:  # one batch at a time decides what is new
            new = await asyncio.to_thread(self._keep, records)
        EVENTS.labels("kept").inc(len(new))
        EVENTS.labels("duplicate").inc(len(records) - len(new))
        return new

    def close(self) -> None:
        self.log.close()


def online_events(
    records: Sequence[dict[str, Any]], schema: CatalogueSchema
) -> list[fpb.UserEvent]:
    """The events that change a user's live features, as the features service
    takes them: a rating with its value (on the features' 0.5-5 scale), a
    positive event as an implicit interaction (0); exposures and negative
    events change nothing there."""
    out = []
    for record in records:
        kind = schema.event_types[record["event_type"]]
        if kind.role == "rating" and kind.min is not None and kind.max is not None:
            low, high = kind.min, kind.max
            value = record["value"]
            if not (low >= 0.5 and high <= 5.0):  # another scale: mapped onto 0.5-5
                value = 0.5 + 4.5 * (value - low) / ((high - low) or 1.0)
        elif kind.role == "positive":
            value = 0.0
        else:
            continue
        event = fpb.UserEvent(user_id=record["user_id"], item_id=record["item_id"], rating=value)
        event.event_time.FromSeconds(int(record["timestamp"]))
        out.append(event)
    return out


class EventServicer(events_pb2_grpc.EventServiceServicer):
    def __init__(
        self,
        log: EventLog,
        schema: Callable[[], CatalogueSchema],
        online: OnlineUpdates | None = None,
        outcomes: OutcomeMetrics | None = None,
    ) -> None:
        self.log = log
        self.schema = schema
        self.online = online or OnlineUpdates(None)
        self.outcomes = outcomes or OutcomeMetrics()

    async def PushEvents(
        self, request: epb.PushEventsRequest, context: grpc.aio.ServicerContext
    ) -> epb.PushEventsResponse:
        schema = self.schema()
        try:
            records = check_events(request.events, schema, time.time())
        except InvalidArgument:
            EVENTS.labels("refused").inc(len(request.events))
            raise
        new = await self.log.keep(records)
        self.outcomes.events(new)
        self.update_online(new, schema, context)
        return epb.PushEventsResponse(accepted=len(new), duplicates=len(records) - len(new))

    def update_online(
        self,
        records: list[dict[str, Any]],
        schema: CatalogueSchema,
        context: grpc.aio.ServicerContext,
    ) -> None:
        """The users' live features, so their next Recommend reflects the
        events: queued for the features service (services.gateway
        .online_updates) with the app's own token. The events are kept
        already: a features service that fails is counted and logged, not
        the caller's error, and does not hold up the reply."""
        token = tuple(
            (k, v) for k, v in context.invocation_metadata() or () if k == "authorization"
        )
        self.online.submit(online_events(records, schema), token)
