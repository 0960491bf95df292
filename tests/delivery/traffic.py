"""Client traffic for the delivery rehearsals: Recommend through Envoy."""

from __future__ import annotations

import math
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

import grpc

from bench.simulate import Simulation
from recserve.recommend.v1 import recommend_pb2 as pb
from recserve.recommend.v1 import recommend_pb2_grpc


def rarely_failed(simulation: Simulation) -> bool:
    """At most 1% of simulated users' calls failed (3 at least allowed): a
    host two test workers share can stall past Envoy's 1 s for a moment;
    the rollout is judged on what users saw, which a lost call does not
    change."""
    return simulation.failures <= max(3, simulation.lists // 100)


@dataclass
class Load:
    """Recommend through Envoy in a loop over users 1-943, recording what
    each answer says, until stopped; ``rate`` lists a second at most, over
    all threads: enough for every rollout's judge, and it leaves the other
    test worker a core (unpaced, two threads kept both busy)."""

    address: str
    threads: int = 2
    rate: float = 40.0
    answers: list[tuple[str, str, bool]] = field(default_factory=list)  # user, version, degraded
    gateways: list[str] = field(default_factory=list)  # x-recserve-gateway of each answer
    errors: list[str] = field(default_factory=list)
    non_finite: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> Load:
        self.workers = [
            threading.Thread(target=self._run, args=(n,), daemon=True) for n in range(self.threads)
        ]
        for worker in self.workers:
            worker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for worker in self.workers:
            worker.join(30)

    def _run(self, offset: int) -> None:
        with grpc.insecure_channel(self.address) as channel:
            stub = recommend_pb2_grpc.RecommendServiceStub(channel)
            n = offset
            started = time.monotonic()
            while not self.stop.is_set():
                time.sleep(max(0.0, started + n / self.rate - time.monotonic()))
                user = str(n % 943 + 1)
                n += self.threads
                try:
                    reply, call = stub.Recommend.with_call(
                        pb.RecommendRequest(user_id=user, k=10), timeout=5
                    )
                except grpc.RpcError as exc:
                    self.errors.append(f"{exc.code().name}: {exc.details()}")
                    continue
                if any(not math.isfinite(item.score) for item in reply.items):
                    self.non_finite += 1
                self.answers.append((user, reply.model_version, reply.degraded))
                headers = dict(call.initial_metadata())
                self.gateways.append(str(headers.get("x-recserve-gateway", "")))

    def versions_by_user(self) -> dict[str, list[str]]:
        seen: dict[str, list[str]] = defaultdict(list)
        for user, version, degraded in list(self.answers):
            if not degraded:
                seen[user].append(version)
        return seen
