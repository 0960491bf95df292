"""Recommendation quality through the live stack, next to the offline number.

Calls Recommend through Envoy (k = 100, one at a time: a quality measure,
not a load test; a degraded answer is asked again) for every held-out user
of the pipeline's split and computes the offline evaluation's metrics on the
answers; the offline evaluation of the artifact being served runs on the
same users. Any
difference is skew between training and serving: HNSW instead of exact
search, features as the online store serves them, the gateway's own
exclusions.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc

from pipelines.dataset import artifact_dataset
from pipelines.evaluate import CUTOFFS, evaluate_artifact, metrics_at
from pipelines.gate import BASELINES
from pipelines.rescore.validate import movielens_split
from recserve.recommend.v1 import recommend_pb2 as pb
from recserve.recommend.v1 import recommend_pb2_grpc
from recserve_model import artifacts

K = max(CUTOFFS)
# How long one user's answer is asked again while it comes degraded (a
# stage late on a busy machine; a few seconds where another process takes
# the cores): after it, the degraded answer is counted.
PATIENCE_S = 30.0


async def live_answers(
    target: str, users: list[str], concurrency: int = 1
) -> dict[str, pb.RecommendResponse]:
    gate = asyncio.Semaphore(concurrency)
    async with grpc.aio.insecure_channel(target) as channel:
        stub = recommend_pb2_grpc.RecommendServiceStub(channel)

        async def one(user: str) -> tuple[str, pb.RecommendResponse]:
            # A degraded answer (a stage late on a busy machine) measures the
            # fallback, not the model: ask again, for a while, before counting it.
            async with gate:
                deadline = time.monotonic() + PATIENCE_S
                while True:
                    reply = await stub.Recommend(pb.RecommendRequest(user_id=user, k=K), timeout=10)
                    if not reply.degraded or time.monotonic() > deadline:
                        return user, reply
                    await asyncio.sleep(0.2)

        return dict(await asyncio.gather(*(one(u) for u in users)))


def live_metrics(
    answers: dict[str, pb.RecommendResponse], truth: dict[str, set[str]]
) -> dict[str, float]:
    totals: dict[str, float] = {}
    for user, reply in answers.items():
        ranked = [item.item_id for item in reply.items]
        for key, value in metrics_at(ranked, truth[user]).items():
            totals[key] = totals.get(key, 0.0) + value / len(answers)
    return totals


def compare(
    target: str,
    data_dir: Path,
    exclude: set[str] = frozenset(),
    dataset_dir: Path | None = None,
) -> dict[str, object]:
    """Live and offline metrics of the current artifact, on the same users
    (of the demo dataset, or of ``dataset_dir``, the one the artifact was built from)."""
    # Each user's latest 10, as the nightly gates read.
    dataset_dir = dataset_dir or artifact_dataset(artifacts.current(data_dir))
    truth, _ = movielens_split(data_dir, dataset_dir)
    users = sorted(u for u in truth if u not in exclude)
    answers = asyncio.run(live_answers(target, users))
    degraded = sum(1 for reply in answers.values() if reply.degraded)
    served = {reply.model_version for reply in answers.values() if reply.model_version}
    artifact = artifacts.current(data_dir)
    evaluated = evaluate_artifact(artifact, data_dir / "raw", set(users), dataset_dir)
    offline = evaluated["ranked"]
    live = live_metrics(answers, truth)
    return {
        "artifact": artifact.name,
        "served_versions": sorted(served),
        "users": len(users),
        "degraded_answers": degraded,
        "offline": offline,
        "live": live,
        # The baselines the gate holds the served list to, offline, on the same users.
        "baselines": {name: evaluated[name] for name in BASELINES if name in evaluated},
        "relative_difference": {
            k: (live[k] - offline[k]) / offline[k] if offline[k] else 0.0 for k in offline
        },
    }
