"""The events API: app backends' events, checked whole, kept durably and
once per event id, in ``<data_dir>/events/app/`` (recserve_kit.jsonl_log)
beside the impressions they join by ``recommendation_id``.

A batch is all or nothing: every event is checked before any is kept. The
reply comes after the batch is written and fsynced, so an acknowledged
event survives a SIGKILL. Event ids already kept are remembered (the last
``remember`` of them, caught up from every replica's files before each
batch), so a retried batch lands once wherever the retry goes; only the
same id reaching two replicas at the same instant can land twice, and
readers (``read_events``) keep the first of each id.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
from prometheus_client import Counter

from recserve.recommend.v1 import events_pb2 as epb
from recserve.recommend.v1 import events_pb2_grpc
from recserve_kit.errors import InvalidArgument
from recserve_kit.jsonl_log import JsonlLog, read_records
from recserve_kit.validation import check_id
from recserve_model.catalogue import CatalogueSchema

EVENTS = Counter(
    "recserve_gateway_events_total",
    "App events by outcome: kept, duplicate (an event id kept before), refused (a bad batch).",
    ["outcome"],
)
MAX_BATCH = 1000
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
        self.log = JsonlLog(directory)
        self.kept: OrderedDict[str, None] = OrderedDict()
        self.read_to: dict[Path, int] = {}  # how far each file was read
        self.lock = asyncio.Lock()
        self.catch_up()

    def catch_up(self) -> None:
        """Remembers the ids appended to any file since the last call."""
        for path in sorted(self.directory.rglob("*.jsonl")) if self.directory.exists() else ():
            start = self.read_to.get(path, 0)
            if path.stat().st_size <= start:
                continue
            with path.open("rb") as lines:
                lines.seek(start)
                for line in lines:
                    if not line.endswith(b"\n"):
                        break  # being written: read it whole next time
                    start += len(line)
                    self._remember(json.loads(line)["event_id"])
            self.read_to[path] = start

    def _remember(self, event_id: str) -> None:
        self.kept[event_id] = None
        self.kept.move_to_end(event_id)
        if len(self.kept) > self.remember:
            self.kept.popitem(last=False)

    def _keep(self, records: list[dict[str, Any]]) -> int:
        self.catch_up()
        new = [r for r in records if r["event_id"] not in self.kept]
        if new:
            self.log.write(new)
            for record in new:
                self._remember(record["event_id"])
        return len(new)

    async def keep(self, records: list[dict[str, Any]]) -> tuple[int, int]:
        """(accepted, duplicates), after the new ones are on disk."""
        async with self.lock:  # one batch at a time decides what is new
            accepted = await asyncio.to_thread(self._keep, records)
        EVENTS.labels("kept").inc(accepted)
        EVENTS.labels("duplicate").inc(len(records) - accepted)
        return accepted, len(records) - accepted

    def close(self) -> None:
        self.log.close()


def read_events(directory: Path) -> Iterator[dict[str, Any]]:
    """Every kept event, the first of each event id."""
    seen: set[str] = set()
    for record in read_records(directory):
        if record["event_id"] not in seen:
            seen.add(record["event_id"])
            yield record


class EventServicer(events_pb2_grpc.EventServiceServicer):
    def __init__(self, log: EventLog, schema: Callable[[], CatalogueSchema]) -> None:
        self.log = log
        self.schema = schema

    async def PushEvents(
        self, request: epb.PushEventsRequest, context: grpc.aio.ServicerContext
    ) -> epb.PushEventsResponse:
        try:
            records = check_events(request.events, self.schema(), time.time())
        except InvalidArgument:
            EVENTS.labels("refused").inc(len(request.events))
            raise
        accepted, duplicates = await self.log.keep(records)
        return epb.PushEventsResponse(accepted=accepted, duplicates=duplicates)
