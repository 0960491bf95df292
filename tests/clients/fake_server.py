"""An in-process RecommendService whose answers a test scripts: each call
takes the next action (answer, fail with a status, or hang), and every
attempt that reaches it is counted."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field

import grpc
from recserve_client._proto import recommend_pb2 as pb
from recserve_client._proto import recommend_pb2_grpc


@dataclass
class Script:
    # ("ok", None) | ("fail", StatusCode, details) | ("hang", seconds)
    actions: list[tuple] = field(default_factory=list)
    attempts: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

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


@contextmanager
def fake_server() -> Iterator[tuple[str, Script]]:
    script = Script()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    recommend_pb2_grpc.add_RecommendServiceServicer_to_server(Servicer(script), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}", script
    finally:
        server.stop(0)
