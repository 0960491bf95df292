"""Bursts after a quiet spell: N Recommend calls at once through Envoy, as an
app backend rendering a page of carousels sends them. How many were shed,
degraded otherwise or failed, and how long the slowest took."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import grpc

from recserve.recommend.v1 import recommend_pb2 as pb
from recserve.recommend.v1 import recommend_pb2_grpc


async def one_burst(target: str, size: int, quiet_s: float, offset: int) -> dict[str, object]:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = recommend_pb2_grpc.RecommendServiceStub(channel)
        await stub.Recommend(pb.RecommendRequest(user_id="1", k=10), timeout=5)  # connected
        await asyncio.sleep(quiet_s)
        reasons: Counter[str] = Counter()
        errors: Counter[str] = Counter()
        latencies: list[float] = []

        async def call(n: int) -> None:
            started = time.perf_counter()
            request = pb.RecommendRequest(user_id=str(1 + (offset + n * 37) % 943), k=10)
            try:
                reply = await stub.Recommend(request, timeout=1.0)
                if reply.degraded:
                    reasons[pb.DegradedReason.Name(reply.degraded_reason)] += 1
            except grpc.aio.AioRpcError as exc:
                errors[exc.code().name] += 1
            latencies.append((time.perf_counter() - started) * 1000)

        await asyncio.gather(*(call(n) for n in range(size)))
    return {
        "size": size,
        "shed": reasons.get("DEGRADED_REASON_SHED", 0),
        "degraded": dict(reasons),
        "errors": dict(errors),
        "max_ms": round(max(latencies), 1),
    }


def run(
    target: str, sizes: tuple[int, ...], repeats: int, quiet_s: float
) -> list[dict[str, object]]:
    rows = []
    for size in sizes:
        for r in range(repeats):
            rows.append(asyncio.run(one_burst(target, size, quiet_s, r * 101)))
    return rows
