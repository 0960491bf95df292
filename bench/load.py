"""Open-loop load: Recommend at a constant arrival rate through Envoy.

Request i is due at t0 + i / rate whether or not earlier ones finished, and
its latency counts from when it was due, not from when it was sent, so a
stalled server shows up in the numbers instead of slowing the generator
down (no coordinated omission). Bounded in count and time; loopback only.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import grpc
from hdrh.histogram import HdrHistogram

from recserve.recommend.v1 import recommend_pb2 as pb
from recserve.recommend.v1 import recommend_pb2_grpc


@dataclass
class LoadResult:
    rate: float
    duration_s: float
    sent: int = 0
    ok: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    degraded: Counter[str] = field(default_factory=Counter)
    histogram: HdrHistogram = field(default_factory=lambda: HdrHistogram(1, 60_000_000, 3))
    late_sends: int = 0  # requests the generator itself sent >5 ms after their due time
    # With debug on: each gateway stage's time (us) over full answers, for stage shares.
    stages: dict[str, HdrHistogram] = field(default_factory=dict)
    # With timeline on: (seconds after the start, "full" | reason | "error:CODE") per request.
    timeline: list[tuple[float, str]] = field(default_factory=list)

    @property
    def full(self) -> int:
        return self.ok - sum(self.degraded.values())

    def record_stages(self, timings: Iterable[pb.StageTiming]) -> None:
        for timing in timings:
            histogram = self.stages.get(timing.stage)
            if histogram is None:
                histogram = self.stages[timing.stage] = HdrHistogram(1, 60_000_000, 3)
            histogram.record_value(max(1, int(timing.duration_ms * 1000)))

    def stage_ms(self, p: float) -> dict[str, float]:
        return {
            name: round(h.get_value_at_percentile(p) / 1000, 2) for name, h in self.stages.items()
        }

    def percentile_curve(self) -> list[tuple[float, float]]:
        """(percentile, ms) at the usual points of a latency percentile plot."""
        points = (50, 75, 90, 95, 99, 99.5, 99.9, 99.95, 99.99)
        return [(p, self.percentile_ms(p)) for p in points]

    def percentile_ms(self, p: float) -> float:
        return self.histogram.get_value_at_percentile(p) / 1000

    def summary(self) -> dict[str, object]:
        return {
            "rate_rps": self.rate,
            "duration_s": self.duration_s,
            "sent": self.sent,
            "ok": self.ok,
            "p50_ms": round(self.percentile_ms(50), 2),
            "p90_ms": round(self.percentile_ms(90), 2),
            "p99_ms": round(self.percentile_ms(99), 2),
            "p999_ms": round(self.percentile_ms(99.9), 2),
            "max_ms": round(self.histogram.get_max_value() / 1000, 2),
            "errors": dict(self.errors),
            "degraded": dict(self.degraded),
            "full_answers_per_s": round(self.full / self.duration_s, 1),
            "late_sends": self.late_sends,
        }


async def warm_up(stub: recommend_pb2_grpc.RecommendServiceStub, user_prefix: str, k: int) -> None:
    """The path warmed (connections, caches) before measuring."""
    for n in range(20):
        await stub.Recommend(pb.RecommendRequest(user_id=f"{user_prefix}{1 + n}", k=k), timeout=5)


async def run_load(
    target: str,
    rate: float,
    duration_s: float,
    k: int = 20,
    users: int = 943,
    timeout_s: float = 1.0,
    debug: bool = False,
    timeline: bool = False,
    event: tuple[float, Callable[[], None]] | None = None,
    user_prefix: str = "",
    stop: asyncio.Event | None = None,
) -> LoadResult:
    """``event``: (seconds into the load, what to do then), e.g. a SIGKILL.
    Users are ``<user_prefix><1..users>`` (MovieLens's ids by default).
    ``stop``, once set, ends the load early: requests not yet due are not
    sent, those in flight are awaited, and the result covers what was sent
    (its duration the seconds it ran)."""
    result = LoadResult(rate, duration_s)
    total = int(rate * duration_s)
    async with grpc.aio.insecure_channel(target) as channel:
        stub = recommend_pb2_grpc.RecommendServiceStub(channel)
        await warm_up(stub, user_prefix, k)
        start = time.perf_counter() + 0.05
        if event is not None:
            loop = asyncio.get_running_loop()
            loop.call_later(start - time.perf_counter() + event[0], event[1])

        async def one(i: int) -> None:
            due = start + i / rate
            if not await until_due(due, stop):
                return
            result.sent += 1
            if time.perf_counter() - due > 0.005:
                result.late_sends += 1
            user_id = f"{user_prefix}{1 + (i * 7919) % users}"
            request = pb.RecommendRequest(user_id=user_id, k=k, debug=debug)
            outcome = "full"
            try:
                reply = await stub.Recommend(request, timeout=timeout_s)
                result.ok += 1
                if reply.degraded:
                    outcome = pb.DegradedReason.Name(reply.degraded_reason)
                    result.degraded[outcome] += 1
                else:
                    result.record_stages(reply.stage_timings)
            except grpc.aio.AioRpcError as exc:
                result.errors[exc.code().name] += 1
                outcome = f"error:{exc.code().name}"
            finally:
                if timeline:
                    result.timeline.append((due - start, outcome))
                elapsed_us = int((time.perf_counter() - due) * 1_000_000)
                result.histogram.record_value(max(1, elapsed_us))

        tasks = [asyncio.create_task(one(i)) for i in range(total)]
        await asyncio.gather(*tasks)
        if result.sent < total:
            result.duration_s = time.perf_counter() - start
    return result


async def until_due(due: float, stop: asyncio.Event | None) -> bool:
    """Waits for ``due`` (a perf_counter time); False where ``stop`` was set
    first (the request is then not sent)."""
    delay = due - time.perf_counter()
    if stop is None:
        if delay > 0:
            await asyncio.sleep(delay)
        return True
    if stop.is_set():
        return False
    if delay > 0:
        try:
            await asyncio.wait_for(stop.wait(), delay)
            return False
        except TimeoutError:
            pass
    return not stop.is_set()


async def run_closed(
    target: str, requests: int, k: int = 20, users: int = 943
) -> tuple[HdrHistogram, Counter[str]]:
    """One client, one request at a time: the latency of an idle stack."""
    histogram = HdrHistogram(1, 60_000_000, 3)
    degraded: Counter[str] = Counter()
    async with grpc.aio.insecure_channel(target) as channel:
        stub = recommend_pb2_grpc.RecommendServiceStub(channel)
        for n in range(50):  # warm
            await stub.Recommend(pb.RecommendRequest(user_id=str(1 + n), k=k), timeout=5)
        for i in range(requests):
            request = pb.RecommendRequest(user_id=str(1 + (i * 7919) % users), k=k)
            started = time.perf_counter()
            reply = await stub.Recommend(request, timeout=1.0)
            histogram.record_value(max(1, int((time.perf_counter() - started) * 1e6)))
            if reply.degraded:
                degraded[pb.DegradedReason.Name(reply.degraded_reason)] += 1
    return histogram, degraded


async def answers(target: str, users: int, k: int = 20) -> dict[str, list[tuple[str, float]]]:
    """Each user's answer (ids and scores), for comparing two builds' rankings,
    asked through the Python client as an app backend would."""
    from recserve_client import AsyncRecserveClient

    async with AsyncRecserveClient(target) as client:
        out = {}
        for u in range(1, users + 1):
            answer = await client.recommend(str(u), k, timeout_s=5)
            out[str(u)] = [(i.item_id, round(i.score, 5)) for i in answer.items]
        return out


def wait_for_full_answer(target: str, timeout_s: float = 120.0) -> None:
    """Until Recommend through ``target`` answers in full (a stack settled after
    a load step or a restart): a condition, not a fixed pause."""
    from recserve_stack.probes import wait_until

    def full() -> bool:
        with grpc.insecure_channel(target) as channel:
            stub = recommend_pb2_grpc.RecommendServiceStub(channel)
            try:
                reply = stub.Recommend(pb.RecommendRequest(user_id="1", k=5), timeout=1)
            except grpc.RpcError:
                return False
            return not reply.degraded

    wait_until(full, timeout_s, "a full answer", interval_s=0.2)
