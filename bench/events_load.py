"""App events pushed through Envoy as fast as the stack takes them, and
where their CPU goes.

Closed loop: ``senders`` concurrent callers, each sending a batch of
``batch`` rating events (known users and items, fresh event ids) as soon as
the previous one is acknowledged, for ``duration_s``. An acknowledged batch
is written and fsynced (docs/events.md); events per second counts those.
Each stack process's CPU is read before and after, as ``bench cpu`` does,
and divided by the events acknowledged. Freshness: after the load, one
more event for a user, and the time until the features service shows it
(their latest item) when asked directly.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import grpc
import psutil
from hdrh.histogram import HdrHistogram

from bench.cpu_profile import cpu_seconds, stack_processes
from recserve.features.v1 import features_pb2 as fpb
from recserve.features.v1 import features_pb2_grpc
from recserve.recommend.v1 import events_pb2 as epb
from recserve.recommend.v1 import events_pb2_grpc

FRESHNESS_TIMEOUT_S = 10.0


def batches(
    users: list[str], items: list[str], size: int, event_type: str, value: float
) -> Iterator[list[epb.AppEvent]]:
    """Endless batches: users and items in a fixed stride, so each batch
    touches many users (as a marketplace's traffic does) and repeats few."""
    run = uuid.uuid4().hex[:8]
    for n in itertools.count():
        yield [
            epb.AppEvent(
                event_id=f"bench-{run}-{n}-{i}",
                user_id=users[(n * size + i) * 7919 % len(users)],
                item_id=items[(n * size + i) * 104729 % len(items)],
                event_type=event_type,
                value=value,
                timestamp=int(time.time()),
            )
            for i in range(size)
        ]


async def push_for(
    target: str,
    token: str,
    source: Iterator[list[epb.AppEvent]],
    senders: int,
    duration_s: float,
) -> tuple[int, HdrHistogram, Counter[str]]:
    """(events acknowledged, batch latency in µs, errors by code)."""
    latency = HdrHistogram(1, 60_000_000, 3)
    errors: Counter[str] = Counter()
    acknowledged = 0
    metadata = [("authorization", f"Bearer {token}")]
    deadline = time.perf_counter() + duration_s
    async with grpc.aio.insecure_channel(target) as channel:
        stub = events_pb2_grpc.EventServiceStub(channel)

        async def sender() -> None:
            nonlocal acknowledged
            while time.perf_counter() < deadline:
                batch = next(source)
                started = time.perf_counter()
                try:
                    reply = await stub.PushEvents(
                        epb.PushEventsRequest(events=batch), metadata=metadata, timeout=10
                    )
                except grpc.aio.AioRpcError as exc:
                    errors[exc.code().name] += 1
                    continue
                latency.record_value(max(1, int((time.perf_counter() - started) * 1e6)))
                acknowledged += reply.accepted

        await asyncio.gather(*(sender() for _ in range(senders)))
    return acknowledged, latency, errors


async def freshness_s(
    target: str, features: str, token: str, user: str, item: str, event_type: str, value: float
) -> float | None:
    """Seconds from an acknowledged event to the features service showing
    it as the user's latest item; None past the timeout."""
    event = epb.AppEvent(
        event_id=f"bench-fresh-{uuid.uuid4().hex}", user_id=user, item_id=item,
        event_type=event_type, value=value, timestamp=int(time.time()),
    )  # fmt: skip
    metadata = [("authorization", f"Bearer {token}")]
    async with (
        grpc.aio.insecure_channel(target) as edge,
        grpc.aio.insecure_channel(features) as direct,
    ):
        events = events_pb2_grpc.EventServiceStub(edge)
        reader = features_pb2_grpc.FeatureServiceStub(direct)
        await events.PushEvents(
            epb.PushEventsRequest(events=[event]), metadata=metadata, timeout=10
        )
        acknowledged = time.perf_counter()
        while time.perf_counter() - acknowledged < FRESHNESS_TIMEOUT_S:
            reply = await reader.GetUserFeatures(
                fpb.GetUserFeaturesRequest(user_id=user), metadata=metadata, timeout=5
            )
            recent = list(reply.user.recent_item_ids)  # most recent first
            if recent and recent[0] == item:
                return time.perf_counter() - acknowledged
            await asyncio.sleep(0.01)
    return None


def run(
    target: str,
    features: str,
    data_dir: Path,
    users: list[str],
    items: list[str],
    event_type: str,
    value: float,
    senders: int,
    batch: int,
    duration_s: float,
) -> dict[str, object]:
    token = (data_dir / "auth" / "app.token").read_text().strip()
    processes = stack_processes()
    missing = [name for name, found in processes.items() if not found]
    if missing:
        raise SystemExit(f"not running: {', '.join(missing)} (start the stack first)")
    processes["load generator (this process)"] = [psutil.Process()]
    source = batches(users, items, batch, event_type, value)
    asyncio.run(push_for(target, token, source, 1, 2.0))  # warm: connections, caches
    before = {name: cpu_seconds(p) for name, p in processes.items()}
    started = time.perf_counter()
    acknowledged, latency, errors = asyncio.run(
        push_for(target, token, source, senders, duration_s)
    )
    elapsed = time.perf_counter() - started
    spent = {name: cpu_seconds(p) - before[name] for name, p in processes.items()}
    fresh = asyncio.run(
        freshness_s(target, features, token, users[0], items[-1], event_type, value)
    )
    per_event = {name: round(1e6 * s / max(acknowledged, 1), 1) for name, s in spent.items()}
    return {
        "senders": senders,
        "batch": batch,
        "duration_s": round(elapsed, 1),
        "events_acknowledged": acknowledged,
        "events_per_s": round(acknowledged / elapsed, 1),
        "batch_p50_ms": round(latency.get_value_at_percentile(50) / 1000, 2),
        "batch_p99_ms": round(latency.get_value_at_percentile(99) / 1000, 2),
        "errors": dict(errors),
        "cpu_us_per_event": per_event,
        "total_cpu_us_per_event": round(
            sum(us for name, us in per_event.items() if not name.startswith("load")), 1
        ),
        "freshness_s": None if fresh is None else round(fresh, 3),
    }
