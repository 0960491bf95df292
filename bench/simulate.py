"""Simulated users: Recommend through Envoy, then events back through the
public events API from a documented click model, so that outcomes (and the
rollout's guardrail) are measured on the live stack.

The click model: a user shown a list rates, 5 stars, each shown item that
is in their held-out future (the temporal split's test interactions: what
they really went on to rate), each with probability ``p_hit``, and any
other shown item with probability ``p_noise``. Every event names the
list's ``recommendation_id``. A better model shows more of users' futures,
so its lists convert more. Users who ``prefer`` a model version click only
on its lists: any other version's are worse for them, whatever they show
(a candidate the guardrail must roll back by itself).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from recserve.recommend.v1 import events_pb2 as epb
from recserve.recommend.v1 import events_pb2_grpc, recommend_pb2, recommend_pb2_grpc


def held_out_futures(raw_dir: Path, dataset_dir: Path | None = None) -> dict[str, set[str]]:
    """Each user's test items in the build's temporal split (the demo
    dataset's, or that of the dataset directory an artifact was built from)."""
    from pipelines.dataset import load_movielens, temporal_split

    test = temporal_split(load_movielens(raw_dir, dataset_dir).interactions).test
    return {str(u): set(map(str, items)) for u, items in test.groupby("user_id")["item_id"]}


@dataclass
class Simulation:
    lists: int = 0
    converted: int = 0
    events: int = 0
    by_version: dict[str, list[int]] = field(default_factory=dict)  # version -> [lists, converted]
    # Calls that failed, by status name: a user shown nothing (Recommend), or
    # clicks not taken (PushEvents). An app goes on; so do simulated users.
    failed: dict[str, int] = field(default_factory=dict)

    def fail(self, error: grpc.RpcError) -> None:
        code = error.code().name if hasattr(error, "code") else "UNKNOWN"
        self.failed[code] = self.failed.get(code, 0) + 1

    @property
    def failures(self) -> int:
        return sum(self.failed.values())

    def add(self, version: str, converted: bool) -> None:
        self.lists += 1
        self.converted += converted
        counts = self.by_version.setdefault(version, [0, 0])
        counts[0] += 1
        counts[1] += converted


def clicks(
    reply: recommend_pb2.RecommendResponse,
    future: set[str],
    rng: random.Random,
    p_hit: float,
    p_noise: float,
) -> list[str]:
    """The shown items a user clicks: each of their future with ``p_hit``,
    any other with ``p_noise``."""
    return [
        i.item_id for i in reply.items if rng.random() < (p_hit if i.item_id in future else p_noise)
    ]


def click_events(
    prefix: str,
    user: str,
    clicked: list[str],
    recommendation_id: str,
    event: tuple[str, float] = ("rating", 5.0),
) -> list[epb.AppEvent]:
    """An event of the given type and value (by default a five-star rating)
    for each clicked item, each naming the list it was on."""
    return [
        epb.AppEvent(
            event_id=f"{prefix}-{item}", user_id=user, item_id=item, event_type=event[0],
            value=event[1], recommendation_id=recommendation_id,
        )
        for item in clicked
    ]  # fmt: skip


def simulate(
    address: str,
    app_token: str,
    futures: dict[str, set[str]],
    until: Callable[[Simulation], bool],
    p_hit: float = 1.0,
    p_noise: float = 0.0,
    seed: int = 0,
    max_s: float = 300.0,
    surface: str = "simulated",
    prefer: str = "",
    rate: float = 0.0,
    event: tuple[str, float] = ("rating", 5.0),
) -> Simulation:
    """Users in turn (those with a future), a list each, events for what they
    click, until ``until(result)`` or ``max_s``; with ``prefer``, no clicks
    on another version's lists. ``rate``: lists a second at most (0: each
    user as soon as the last one's answer came), so that a host that also
    builds or tests keeps cores for it. ``event``: the clicks' event type
    and value (a dataset's own, ``rating_type``)."""
    rng = random.Random(seed)
    users = sorted(futures, key=lambda u: (len(u), u))
    result = Simulation()
    metadata = [("authorization", f"Bearer {app_token}")]
    deadline = time.monotonic() + max_s
    with grpc.insecure_channel(address) as channel:
        recommend = recommend_pb2_grpc.RecommendServiceStub(channel)
        events = events_pb2_grpc.EventServiceStub(channel)
        n = 0
        started = time.monotonic()
        while not until(result) and time.monotonic() < deadline:
            if rate > 0:
                time.sleep(max(0.0, started + n / rate - time.monotonic()))
            user = users[n % len(users)]
            n += 1
            request = recommend_pb2.RecommendRequest(user_id=user, k=10, surface=surface)
            try:
                reply = recommend.Recommend(request, timeout=5)
            except grpc.RpcError as error:
                result.fail(error)
                continue
            if reply.degraded:
                continue  # no model version to credit
            clicked = clicks(reply, futures[user], rng, p_hit, p_noise)
            if prefer and reply.model_version != prefer:
                clicked = []  # drawn all the same: the other lists' clicks stay as they were
            result.add(reply.model_version, bool(clicked))
            if not clicked:
                continue
            batch = click_events(f"sim-{seed}-{n}", user, clicked, reply.recommendation_id, event)
            try:
                events.PushEvents(epb.PushEventsRequest(events=batch), metadata=metadata, timeout=5)
            except grpc.RpcError as error:
                result.fail(error)
                continue
            result.events += len(batch)
    return result


def rating_type(directory: Path) -> tuple[str, float]:
    """The artifact's first rating event type and a value within its range
    (else its first positive type, value 0)."""
    from recserve_model.catalogue import CatalogueSchema

    kinds = CatalogueSchema.load(directory).event_types
    for name, kind in kinds.items():
        if kind.role == "rating":
            return name, float(kind.max if kind.max is not None else 1.0)
    for name, kind in kinds.items():
        if kind.role == "positive":
            return name, 0.0
    raise SystemExit(f"{directory.name} declares no rating or positive event type")
