"""App events pushed through Envoy as fast as the stack takes them, and
where their CPU goes.

Closed loop: ``senders`` concurrent callers, each sending a batch of
``batch`` rating events (known users and items, fresh event ids) as soon as
the previous one is acknowledged, for ``duration_s``. An acknowledged batch
is written and fsynced (docs/events.md); events per second counts those.
Each stack process's CPU is read before and after, as ``bench cpu`` does,
and divided by the events acknowledged. The users' live features are
updated behind the acknowledgement (services.gateway.online_updates): the
gateways' counters say how many were applied during the run, and halfway
through it one more event's freshness is timed, until the features
service shows it as the user's latest item when asked directly.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import grpc
import psutil
from hdrh.histogram import HdrHistogram

from bench.cpu_profile import cpu_seconds, running_stack
from recserve.features.v1 import features_pb2 as fpb
from recserve.features.v1 import features_pb2_grpc
from recserve.recommend.v1 import events_pb2 as epb
from recserve.recommend.v1 import events_pb2_grpc
from recserve_kit import transport
from recserve_stack.settings import StackSettings

FRESHNESS_TIMEOUT_S = 10.0
PROBES_AT = (0.25, 0.5, 0.75)  # shares of the run at which an event's freshness is probed


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
    rate: float = 0.0,
    batch_size: int = 0,
) -> tuple[int, HdrHistogram, Counter[str]]:
    """(events acknowledged, batch latency in µs, errors by code); ``rate``:
    events a second in all (batches of ``batch_size``), 0: as fast as the
    stack acknowledges."""
    latency = HdrHistogram(1, 60_000_000, 3)
    errors: Counter[str] = Counter()
    acknowledged = 0
    metadata = [("authorization", f"Bearer {token}")]
    deadline = time.perf_counter() + duration_s
    async with grpc.aio.insecure_channel(target) as channel:
        stub = events_pb2_grpc.EventServiceStub(channel)

        async def sender(n: int) -> None:
            nonlocal acknowledged
            # Paced: this sender's batches at rate / senders, staggered.
            every = senders * batch_size / rate if rate else 0.0
            due = time.perf_counter() + n * every / senders
            while time.perf_counter() < deadline:
                if every:
                    await asyncio.sleep(max(0.0, due - time.perf_counter()))
                    due += every
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

        await asyncio.gather(*(sender(n) for n in range(senders)))
    return acknowledged, latency, errors


async def freshness_s(
    target: str,
    features: str,
    tls_dir: Path,
    token: str,
    user: str,
    items: list[str],
    event_type: str,
    value: float,
) -> float | None:
    """Seconds from an acknowledged event to the features service showing
    it as the user's latest item; None past the timeout. The item is one
    that is not the user's latest already (an earlier run's probe left one)."""
    metadata = [("authorization", f"Bearer {token}")]
    operator = transport.Tls.load(tls_dir, "operator") if (tls_dir / "ca.pem").exists() else None
    async with (
        grpc.aio.insecure_channel(target) as edge,
        transport.aio_channel(features, operator) as direct,
    ):
        events = events_pb2_grpc.EventServiceStub(edge)
        reader = features_pb2_grpc.FeatureServiceStub(direct)
        before = await reader.GetUserFeatures(
            fpb.GetUserFeaturesRequest(user_id=user), metadata=metadata, timeout=5
        )
        latest = list(before.user.recent_item_ids)[:1]
        item = random.choice([i for i in items if i not in latest])
        event = epb.AppEvent(
            event_id=f"bench-fresh-{uuid.uuid4().hex}", user_id=user, item_id=item,
            event_type=event_type, value=value, timestamp=int(time.time()),
        )  # fmt: skip
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


def live_updates(metrics_urls: list[str]) -> dict[str, float]:
    """The gateways' live-update counters, summed: updated, dropped, failed."""
    totals = {"updated": 0.0, "dropped": 0.0, "failed": 0.0}
    prefix = "recserve_gateway_event_online_updates_total{outcome="
    for url in metrics_urls:
        with urllib.request.urlopen(url, timeout=5) as response:
            for line in response.read().decode().splitlines():
                if line.startswith(prefix):
                    outcome = line[len(prefix) :].split('"')[1]
                    totals[outcome] = totals.get(outcome, 0.0) + float(line.split()[-1])
    return totals


def running_processes() -> dict[str, list[psutil.Process]]:
    """The stack's processes by component, and this one's (the load)."""
    processes = running_stack()
    processes["load generator (this process)"] = [psutil.Process()]
    return processes


def settled(metrics_urls: list[str], quiet_s: float = 2.0, limit_s: float = 120.0) -> None:
    """Until the gateways' live-update counters stop moving (their queues
    drained), at most ``limit_s``."""
    deadline = time.monotonic() + limit_s
    last = live_updates(metrics_urls)
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        now = live_updates(metrics_urls)
        if now == last:
            return
        last = now


async def load_and_probe(
    settings: StackSettings,
    token: str,
    source: Iterator[list[epb.AppEvent]],
    probe: tuple[str, list[str], str, float],
    load: tuple[int, float, float, int],
) -> tuple[tuple[int, HdrHistogram, Counter[str]], list[float | None]]:
    """The load (senders, seconds, rate, batch size), and a quarter, half
    and three quarters through it one event's freshness each (user, items
    to pick from, event type, value)."""
    target = f"{settings.host}:{settings.envoy_port}"
    features = f"{settings.host}:{settings.features_port}"
    senders, duration_s, rate, batch_size = load

    async def probes() -> list[float | None]:
        seen: list[float | None] = []
        started = time.perf_counter()
        for share in PROBES_AT:
            await asyncio.sleep(max(0.0, started + share * duration_s - time.perf_counter()))
            tls_dir = settings.data_dir / "tls"
            seen.append(await freshness_s(target, features, tls_dir, token, *probe))
        return seen

    return await asyncio.gather(
        push_for(target, token, source, senders, duration_s, rate, batch_size), probes()
    )


def run(
    settings: StackSettings,
    users: list[str],
    items: list[str],
    event_type: str,
    value: float,
    senders: int,
    batch: int,
    duration_s: float,
    rate: float = 0.0,
) -> dict[str, object]:
    target = f"{settings.host}:{settings.envoy_port}"
    metrics = [
        f"http://{settings.host}:{settings.metrics_port('gateway', r)}/metrics"
        for r in range(len(settings.gateway_ports))
    ]
    token = (settings.data_dir / "auth" / "app.token").read_text().strip()
    processes = running_processes()
    # The freshness probe's user gets no load: its event is the newest it has.
    source = batches(users[1:] or users, items, batch, event_type, value)
    asyncio.run(push_for(target, token, source, 1, 2.0))  # warm: connections, caches
    settled(metrics)  # what earlier runs queued is applied first
    before = {name: cpu_seconds(p) for name, p in processes.items()}
    live_before = live_updates(metrics)
    started = time.perf_counter()
    probe = (users[0], items, event_type, value)
    (acknowledged, latency, errors), fresh = asyncio.run(
        load_and_probe(settings, token, source, probe, (senders, duration_s, rate, batch))
    )
    elapsed = time.perf_counter() - started
    seen = None if None in fresh else max(f for f in fresh if f is not None)
    spent = {name: cpu_seconds(p) - before[name] for name, p in processes.items()}
    live = {k: v - live_before.get(k, 0.0) for k, v in live_updates(metrics).items()}
    per_event = {name: round(1e6 * s / max(acknowledged, 1), 1) for name, s in spent.items()}
    return {
        "rate_events_per_s": rate or "as fast as acknowledged",
        "senders": senders,
        "batch": batch,
        "duration_s": round(elapsed, 1),
        "events_acknowledged": acknowledged,
        "events_per_s": round(acknowledged / elapsed, 1),
        "batch_p50_ms": round(latency.get_value_at_percentile(50) / 1000, 2),
        "batch_p99_ms": round(latency.get_value_at_percentile(99) / 1000, 2),
        "errors": dict(errors),
        # Applied to the live features during the run (the rest: queued or dropped).
        "live_updated_per_s": round(live["updated"] / elapsed, 1),
        "live_dropped": int(live["dropped"]),
        "live_failed": int(live["failed"]),
        "cpu_us_per_event": per_event,
        "total_cpu_us_per_event": round(
            sum(us for name, us in per_event.items() if not name.startswith("load")), 1
        ),
        # The slowest of the probes (None: one not seen within the timeout).
        "freshness_under_load_s": None if seen is None else round(seen, 3),
        "freshness_probes_s": [None if f is None else round(f, 3) for f in fresh],
    }
