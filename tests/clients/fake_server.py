"""An in-process RecommendService whose answers a test scripts: each call
takes the next action (answer, fail with a status, or hang), and every
attempt that reaches it is counted. Beside it an EventService that keeps
events as the gateway does (all or nothing, once per event id), with
actions of its own."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field

import grpc
from recserve_client._proto import events_pb2 as epb
from recserve_client._proto import events_pb2_grpc, recommend_pb2_grpc
from recserve_client._proto import recommend_pb2 as pb

EVENT_TYPES = ("click", "rating")


@dataclass
class EventsScript:
    # ("fail", StatusCode, details): refused before anything is kept;
    # ("lost", StatusCode): kept, then the answer is lost (fails with it);
    # ("wait", threading.Event): held until the event is set, then kept.
    actions: list[tuple] = field(default_factory=list)
    calls: list[list[str]] = field(default_factory=list)  # each call's event ids
    called_at: list[float] = field(default_factory=list)  # time.monotonic() of each call
    metadata: list[dict[str, str]] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # ids, in the order kept, each once
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class Script:
    # ("ok", None) | ("fail", StatusCode, details) | ("hang", seconds)
    actions: list[tuple] = field(default_factory=list)
    attempts: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    events: EventsScript = field(default_factory=EventsScript)

    def next(self, method: str, context: grpc.ServicerContext) -> tuple:
        with self.lock:
            self.attempts.append((method, dict(context.invocation_metadata())))
            return self.actions.pop(0) if self.actions else ("ok",)


def answer(request: pb.RecommendRequest) -> pb.RecommendResponse:
    items = [
        pb.RecommendedItem(
            item_id=str(n),
            score=1.0 - n / 10,
            title=f"Item {n}",
            categories=["Drama"],
            explanation=pb.ItemExplanation(
                stage="rank", retrieval_score=0.5, retrieval_rank=n, ranker_score=1.0 - n / 10
            )
            if request.debug
            else None,
        )
        for n in range(1, request.k + 1)
    ]
    reply = pb.RecommendResponse(
        request_id=request.request_id or "generated", items=items, model_version="m1"
    )
    if request.debug:
        reply.stage_timings.add(stage="features", duration_ms=1.5)
    if request.user_id.startswith("new"):
        reply.degraded = True
        reply.degraded_reason = pb.DEGRADED_REASON_COLD_START
        reply.fallback_source = pb.FALLBACK_SOURCE_POPULAR
        reply.model_version = ""
    return reply


class Servicer(recommend_pb2_grpc.RecommendServiceServicer):
    def __init__(self, script: Script) -> None:
        self.script = script

    def _act(self, method: str, context: grpc.ServicerContext) -> None:
        action = self.script.next(method, context)
        if action[0] == "fail":
            context.abort(action[1], action[2])
        if action[0] == "hang":
            time.sleep(action[1])

    def Recommend(self, request, context):
        self._act("Recommend", context)
        return answer(request)

    def SimilarItems(self, request, context):
        self._act("SimilarItems", context)
        reply = answer(pb.RecommendRequest(k=request.k, debug=request.debug))
        return pb.SimilarItemsResponse(request_id="s", items=reply.items, model_version="m1")


def event_problem(events) -> str | None:
    """The gateway's checks that the tests need: the first bad event, named."""
    seen: dict[str, int] = {}
    for n, event in enumerate(events):
        if event.event_id in seen:
            return f"events[{n}].event_id: duplicates events[{seen[event.event_id]}]"
        seen[event.event_id] = n
        if event.event_type not in EVENT_TYPES:
            return f"events[{n}].event_type: {event.event_type!r} is not a declared event type"
    return None if 1 <= len(events) <= 1000 else f"events: 1 to 1000 per call, got {len(events)}"


class EventsServicer(events_pb2_grpc.EventServiceServicer):
    def __init__(self, script: EventsScript) -> None:
        self.script = script

    def PushEvents(self, request, context):
        ids = [e.event_id for e in request.events]
        with self.script.lock:
            self.script.calls.append(ids)
            self.script.called_at.append(time.monotonic())
            self.script.metadata.append(dict(context.invocation_metadata()))
            action = self.script.actions.pop(0) if self.script.actions else ("ok",)
        if action[0] == "fail":
            context.abort(action[1], action[2])
        if action[0] == "wait":
            action[1].wait(30)
        problem = event_problem(request.events)
        if problem is not None:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        with self.script.lock:
            new = [i for i in ids if i not in self.script.kept]
            self.script.kept.extend(new)
        if action[0] == "lost":
            context.abort(action[1], "kept, but the answer was lost")
        return epb.PushEventsResponse(accepted=len(new), duplicates=len(ids) - len(new))


@contextmanager
def fake_server(port: int = 0) -> Iterator[tuple[str, Script]]:
    """On ``port`` (0: a free one), until the block ends."""
    script = Script()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    recommend_pb2_grpc.add_RecommendServiceServicer_to_server(Servicer(script), server)
    events_pb2_grpc.add_EventServiceServicer_to_server(EventsServicer(script.events), server)
    port = server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    try:
        yield f"127.0.0.1:{port}", script
    finally:
        server.stop(0)
