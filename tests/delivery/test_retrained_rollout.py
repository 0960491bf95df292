"""A model retrained on what users did goes out as a canary, on the real
stack: simulated users send events back through the events API, the build
learns from the kept events beside the dataset and publishes a candidate
(CURRENT unchanged), `rollout start` readies the retriever (the retrained
model's own item vectors, a second generation) before moving any user,
users on the candidate are retrieved from their model's items and the
others from the stable's, and the promotion makes the retrained artifact
current everywhere: the retriever switches to the prepared generation
without a rebuild and the features service publishes it. Clients call
Recommend through Envoy the whole time; none may see an error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grpc
import numpy as np
import pandas as pd
import pytest

from bench.simulate import held_out_futures, simulate
from pipelines.build import build
from recserve.features.v1 import features_pb2 as fpb
from recserve.features.v1 import features_pb2_grpc
from recserve.ranker.v1 import ranker_pb2 as kpb
from recserve.ranker.v1 import ranker_pb2_grpc
from recserve.recommend.v1 import recommend_pb2_grpc
from recserve.retriever.v1 import retriever_pb2 as qpb
from recserve.retriever.v1 import retriever_pb2_grpc
from recserve_delivery.rollout import user_position
from recserve_feast.repo import published_version
from recserve_model import artifacts
from tests.delivery.traffic import Load, rarely_failed
from tests.helpers import data_dir_for_versions, full_answer, poll_until
from tests.stack import running_stack

pytestmark = pytest.mark.long  # minutes: started first in parallel runs
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def stack(built, tmp_path_factory):
    data_dir = data_dir_for_versions(
        tmp_path_factory.mktemp("retrained") / "data", built.directory.parents[1]
    )
    with running_stack(data_dir) as running:
        yield running


def cli(stack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "recserve_stack", "rollout", *args],
        env=stack.env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def item_vectors(directory: Path) -> dict[str, np.ndarray]:
    frame = pd.read_parquet(directory / "item_vectors.parquet")
    return dict(zip(frame["item_id"], frame["vector"], strict=True))


def retrieved_from(stack, user: str, stub) -> tuple[str, dict[str, float]]:
    """The user's full answer: its model version, and each item's retrieval
    score (what the retriever's generation gave the user's vector)."""
    reply = full_answer(stub, user, k=10, debug=True)
    return reply.model_version, {i.item_id: i.explanation.retrieval_score for i in reply.items}


def user_vector(stack, user: str) -> tuple[np.ndarray, str]:
    """The user's vector as the ranker computes it for their version."""
    features = features_pb2_grpc.FeatureServiceStub(stack.internal_channel("features"))
    profile = features.GetUserFeatures(fpb.GetUserFeaturesRequest(user_id=user), timeout=5).user
    ranker = ranker_pb2_grpc.RankerServiceStub(stack.internal_channel("ranker"))
    reply = ranker.EmbedUser(kpb.EmbedUserRequest(user=profile), timeout=5)
    return np.frombuffer(reply.vector_f32, "<f4"), reply.model_version


def scores_match(vector: np.ndarray, vectors: dict[str, np.ndarray], scores) -> bool:
    return all(abs(float(vector @ vectors[i]) - s) < 1e-3 for i, s in scores.items())


def launched_during_rollout(stack, retriever, retrained: str) -> None:
    """An item upserted with the caller's vector (the current model's space)
    while the retrained version rolls out: its generation holds the item as
    the retrained item tower embeds it, not the caller's vector."""
    token = (stack.data_dir / "auth" / "admin.token").read_text().strip()
    rng = np.random.default_rng(3)
    given = rng.standard_normal(64).astype(np.float32)
    given /= np.linalg.norm(given)
    features = fpb.ItemFeatures(
        item_id="launched-in-rollout", year=1999, categories=["Drama"], found=True
    )
    item = qpb.Item(
        item_id=features.item_id, vector=given, categories=["Drama"], year=1999, active=True
    )
    retriever.UpsertItems(
        qpb.UpsertItemsRequest(items=[item]),
        metadata=[("authorization", f"Bearer {token}")],
        timeout=30,
    )
    ranker = ranker_pb2_grpc.RankerServiceStub(stack.internal_channel("ranker"))
    embedded = ranker.EmbedItems(
        kpb.EmbedItemsRequest(model_version=retrained, items=[features]), timeout=30
    )
    own = np.frombuffer(embedded.vectors_f32, "<f4")
    for vector, version in ((own, retrained), (given, "")):
        top = retriever.Search(qpb.SearchRequest(vector=vector, k=1, model_version=version)).items
        assert top[0].item_id == item.item_id and top[0].score == pytest.approx(1.0, abs=1e-3)
    hits = retriever.Search(qpb.SearchRequest(vector=given, k=5, model_version=retrained)).items
    assert all(h.item_id != item.item_id or h.score < 0.99 for h in hits)
    retriever.DeleteItems(
        qpb.DeleteItemsRequest(item_ids=[item.item_id], mode=qpb.DELETE_MODE_HARD),
        metadata=[("authorization", f"Bearer {token}")],
        timeout=30,
    )


def test_a_model_retrained_on_logged_events_is_canaried_then_promoted(stack, built):
    envoy = stack.envoy_address
    token = (stack.data_dir / "auth" / "app.token").read_text().strip()
    futures = held_out_futures(built.directory.parents[1] / "raw")
    # Users also rate shown items outside their held-out future (p_noise):
    # interactions the dataset lacks, so the retrain learns something new.
    until = lambda r: r.lists >= 200  # noqa: E731
    sent = simulate(envoy, token, futures, until, p_noise=0.3, seed=11, max_s=240)
    assert sent.events > 200 and rarely_failed(sent), sent.failed
    # The retrain: the kept events beside the dataset; a candidate, CURRENT unchanged.
    retrained = build(stack.data_dir, with_events=True, candidate=True)
    root = artifacts.artifacts_root(stack.data_dir)
    assert retrained.version != built.version and not retrained.reused
    assert artifacts.current(stack.data_dir).name == built.version
    assert artifacts.verify(retrained.directory)["logged_events"] >= sent.events
    stable_items, retrained_items = (
        item_vectors(built.directory),
        item_vectors(root / retrained.version),
    )
    retriever = retriever_pb2_grpc.RetrieverServiceStub(stack.internal_channel("retriever"))
    before = retriever.GetInfo(qpb.GetInfoRequest(), timeout=5)
    recommend = recommend_pb2_grpc.RecommendServiceStub(grpc.insecure_channel(envoy))
    on_candidate = next(u for u in map(str, range(1, 944)) if user_position(u) < 50)
    on_stable = next(u for u in map(str, range(1, 944)) if user_position(u) >= 50)
    with Load(envoy) as load:
        # Latency is not what this judges (test_rollout.py's slow version is).
        plan = ["--steps", "50,100", "--soak-s", "600", "--max-p99-ms", "5000"]
        started = cli(stack, "start", retrained.version, *plan)
        assert started.returncode == 0, started.stdout + started.stderr
        assert "ready" in started.stdout and "running" in started.stdout, started.stdout
        info = retriever.GetInfo(qpb.GetInfoRequest(), timeout=5)
        assert info.prepared_model_version == retrained.version
        assert info.generation == before.generation != info.prepared_generation
        prepared_generation = info.prepared_generation
        # Each user is retrieved from their own model's items.
        for user, items in ((on_candidate, retrained_items), (on_stable, stable_items)):
            vector, version = user_vector(stack, user)
            # Every request-path process's ranker follows the rollout within
            # a quarter of a second (services/ranker/replica.py).
            served, scores = poll_until(
                lambda u=user, v=version: (a := retrieved_from(stack, u, recommend))[0] == v and a,
                10, 0.05, f"user {user} served by {version}",
            )  # fmt: skip
            assert scores_match(vector, items, scores), (user, version)
        assert served == built.version != retrained.version  # on_stable, last
        vector, _ = user_vector(stack, on_candidate)
        _, scores = retrieved_from(stack, on_candidate, recommend)
        assert not scores_match(vector, stable_items, scores)  # not the stable's items
        launched_during_rollout(stack, retriever, retrained.version)
        promoted = poll_until(
            lambda: (s := cli(stack, "promote")).returncode == 0 and "promoted" in s.stdout,
            60,
            1.0,
            "the operator's promotion",
        )
        assert promoted
        # The retrained artifact is current everywhere.
        assert artifacts.current(stack.data_dir).name == retrained.version
        poll_until(
            lambda: (
                retriever.GetInfo(qpb.GetInfoRequest(), timeout=5).model_version
                == retrained.version
            ),
            60,
            0.5,
            "the retriever to serve the promoted artifact",
        )
        poll_until(
            lambda: published_version(stack.data_dir / "feast") == retrained.version,
            120,
            0.5,
            "the features service to publish it",
        )
    info = retriever.GetInfo(qpb.GetInfoRequest(), timeout=5)
    assert info.generation == prepared_generation  # switched to, not rebuilt
    assert info.prepared_model_version == ""
    vector, version = user_vector(stack, on_stable)
    assert version == retrained.version
    served, scores = retrieved_from(stack, on_stable, recommend)
    assert served == retrained.version and scores_match(vector, retrained_items, scores)
    assert load.errors == []
