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


def held_out_futures(raw_dir: Path) -> dict[str, set[str]]:
    """Each user's test items in the build's temporal split (the demo dataset)."""
    from pipelines.dataset import load_movielens, temporal_split

    test = temporal_split(load_movielens(raw_dir).interactions).test
    return {str(u): set(map(str, items)) for u, items in test.groupby("user_id")["item_id"]}


@dataclass
class Simulation:
    lists: int = 0
    converted: int = 0
    events: int = 0
    by_version: dict[str, list[int]] = field(default_factory=dict)  # version -> [lists, converted]

    def add(self, version: str, converted: bool) -> None:
        self.lists += 1
        self.converted += converted
        counts = self.by_version.setdefault(version, [0, 0])
        counts[0] += 1
        counts[1] += converted


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
) -> Simulation:
    """Users in turn (those with a future), a list each, events for what they
    click, until ``until(result)`` or ``max_s``; with ``prefer``, no clicks
    on another version's lists."""
    rng = random.Random(seed)
    users = sorted(futures, key=lambda u: (len(u), u))
    result = Simulation()
    metadata = [("authorization", f"Bearer {app_token}")]
    deadline = time.monotonic() + max_s
    with grpc.insecure_channel(address) as channel:
        recommend = recommend_pb2_grpc.RecommendServiceStub(channel)
        events = events_pb2_grpc.EventServiceStub(channel)
        n = 0
        while not until(result) and time.monotonic() < deadline:
            user = users[n % len(users)]
            n += 1
            request = recommend_pb2.RecommendRequest(user_id=user, k=10, surface=surface)
            reply = recommend.Recommend(request, timeout=5)
            if reply.degraded:
                continue  # no model version to credit
            clicked = [
                i.item_id
                for i in reply.items
                if rng.random() < (p_hit if i.item_id in futures[user] else p_noise)
            ]
            if prefer and reply.model_version != prefer:
                clicked = []  # drawn all the same: the other lists' clicks stay as they were
            result.add(reply.model_version, bool(clicked))
            if not clicked:
                continue
            batch = [
                epb.AppEvent(
                    event_id=f"sim-{seed}-{n}-{item}",
                    user_id=user,
                    item_id=item,
                    event_type="rating",
                    value=5.0,
                    recommendation_id=reply.recommendation_id,
                )
                for item in clicked
            ]
            events.PushEvents(epb.PushEventsRequest(events=batch), metadata=metadata, timeout=5)
            result.events += len(batch)
    return result
