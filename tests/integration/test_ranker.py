"""The ranker service against the real Triton: scores equal ONNX Runtime's,
concurrent requests are batched, a reload under load drops nothing, input
limits hold, and health follows Triton."""

import asyncio
import os
import re
import shutil
import signal
from datetime import UTC, datetime

import grpc
import numpy as np
import onnxruntime as ort
import pandas as pd
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pipelines.triton_repo import model_specs, publish_model
from recserve.features.v1 import features_pb2 as fpb
from recserve.ranker.v1 import ranker_pb2 as pb
from recserve.ranker.v1 import ranker_pb2_grpc
from recserve_model.affinity import UserAffinity
from recserve_model.encoding import Encoder, EncodingSpec
from recserve_model.sources import SOURCE_ANN, source_features
from recserve_stack.triton import shared_memory
from recserve_stack.triton_process import running_triton, start_triton
from services.features.config import FeaturesSettings
from services.features.domain import Event
from services.features.server import create_server as create_features_server
from services.ranker.config import RankerSettings
from services.ranker.server import create_server
from tests.helpers import (
    apoll_until,
    data_dir_with_artifacts,
    ranker_catalog,
    started_ranker,
    user_message,
)
from tests.helpers import ranker_candidates as candidates


@pytest.fixture(scope="module")
def setup(built, tmp_path_factory):
    """A writable copy of the repository, with a second artifact version."""
    root = tmp_path_factory.mktemp("ranker")
    repository = root / "triton" / "repository"
    source = built.directory.parents[1] / "triton" / "repository"
    shutil.copytree(source, repository, symlinks=True)
    (root / "artifacts").mkdir()
    (root / "artifacts" / built.version).symlink_to(built.directory)
    second = built.version + "-b"
    (root / "artifacts" / second).symlink_to(built.directory)
    for model in model_specs():
        if model.name in ("user_tower", "ranker", "item_tower"):
            publish_model(repository, model, built.directory, second)
    # Serving waits 250 µs for a batch to fill, tuned for latency; on a busy
    # host a burst of concurrent Scores can reach Triton further apart than
    # that. The batching test asks whether the ranker's calls overlap, so the
    # copy here waits long enough for any overlap to be seen.
    config = repository / "ranker" / "config.pbtxt"
    delay = "max_queue_delay_microseconds: "
    text, replaced = re.subn(delay + r"\d+", delay + "20000", config.read_text())
    assert replaced == 1, text
    config.write_text(text)
    return root, repository, second


@pytest.fixture(scope="module")
def triton(setup):
    root, repository, _ = setup
    models = ["user_tower", "ranker", "item_tower"]
    with running_triton(root / "triton-run", repository, models) as server:
        yield server


@pytest.fixture
async def ranker(setup, triton):
    root, repository, _ = setup
    service = await started_ranker(root, repository, triton)
    channel = grpc.aio.insecure_channel(service.address)
    yield ranker_pb2_grpc.RankerServiceStub(channel), service, channel
    await channel.close()
    await service.stop(0)


@pytest.fixture(scope="module")
def catalog(built):
    return ranker_catalog(built.directory)


async def test_scores_equal_onnxruntime_offline(built, ranker, catalog):
    stub, _, _ = ranker
    users, items = catalog
    user = users.iloc[3]
    encoder = Encoder(EncodingSpec.load(built.directory / "encoding.json"))
    embedded = await stub.EmbedUser(pb.EmbedUserRequest(user=user_message(user)))
    uf = encoder.user(user.age, user.gender, user.occupation, user.rating_count, user.mean_rating)
    hist = encoder.history(list(user.recent_item_ids))
    expected_vector = ort.InferenceSession(str(built.directory / "user_tower" / "model.onnx")).run(
        None, {"user_features": uf[None, :], "history": hist[None, :]}
    )[0][0]
    np.testing.assert_allclose(embedded.vector, expected_vector, rtol=1e-5, atol=1e-6)
    newest = built.version + "-b"  # the ranker starts on the newest version
    assert embedded.model_version == newest

    cands = candidates(items, 200)
    reply = await stub.Score(
        pb.ScoreRequest(user=user_message(user), candidates=cands, user_vector=embedded.vector)
    )
    n = len(cands)
    feed = {
        "item_id": encoder.item_rows([c.item_id for c in cands])[:, None],
        "user_vector": np.repeat(np.asarray(embedded.vector, np.float32)[None, :], n, 0),
        "user_features": np.repeat(uf[None, :], n, 0),
        "item_features": np.stack(
            [
                encoder.item(
                    c.features.year,
                    c.features.popularity,
                    c.features.mean_rating,
                    c.features.categories,
                )
                for c in cands
            ]
        ),
        "retrieval_score": np.asarray([[c.retrieval_score] for c in cands], np.float32),
        # The user's side of the affinity, from the recent items and the artifact.
        "user_affinity": np.repeat(UserAffinity.load(built.directory).vectors(hist[None, :]), n, 0),
        # Candidate messages carry no sources: nearest neighbours, no neighbour score.
        "source_features": source_features(
            np.zeros(n, np.float32), np.full(n, SOURCE_ANN, np.uint8)
        ),
    }
    expected = ort.InferenceSession(str(built.directory / "ranker" / "model.onnx")).run(None, feed)[
        0
    ][:, 0]
    np.testing.assert_allclose(reply.scores, expected, rtol=1e-5, atol=1e-5)
    assert reply.model_version == newest and reply.unknown_item_count == 0
    # Without a vector, the ranker computes it: same scores.
    again = await stub.Score(pb.ScoreRequest(user=user_message(user), candidates=cands))
    np.testing.assert_allclose(again.scores, reply.scores, rtol=1e-5, atol=1e-5)


async def test_many_users_embedded_in_one_call_equal_one_at_a_time(ranker, catalog):
    """EmbedUsers (the features service's vectors after events): one call,
    each user's vector and version as EmbedUser gives it; no users or more
    than the user tower takes in one call is refused, naming the field."""
    stub, _, _ = ranker
    users, _ = catalog
    profiles = [user_message(users.iloc[n]) for n in range(40)]
    many = await stub.EmbedUsers(pb.EmbedUsersRequest(users=profiles))
    assert [u.user_id for u in many.users] == [p.user_id for p in profiles]
    for profile, embedded in zip(profiles, many.users, strict=True):
        one = await stub.EmbedUser(pb.EmbedUserRequest(user=profile))
        assert embedded.model_version == one.model_version
        np.testing.assert_allclose(
            np.frombuffer(embedded.vector_f32, "<f4"), one.vector, rtol=1e-5, atol=1e-6
        )
    for asked, field in (([], "users"), (profiles * 7, "users")):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.EmbedUsers(pb.EmbedUsersRequest(users=asked))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert field in refused.value.details()


async def test_columns_form_gathers_features_from_the_live_table(
    built, setup, triton, catalog, tmp_path
):
    """Score with ids and float32 bytes, item features from the ranker's table
    (fed by a real features service's watch) equals Score with candidate
    messages carrying the same features; pushes reach the table."""
    root, repository, _ = setup
    features_settings = FeaturesSettings(
        port=0,
        data_dir=data_dir_with_artifacts(tmp_path / "data", built.directory.parents[1]),
        shutdown_drain_s=0,
        refresh_interval_s=0,
    )
    features = await create_features_server(features_settings)
    await features.start()
    settings = RankerSettings(
        port=0,
        data_dir=root,
        triton_url=triton.grpc_url,
        triton_repository=repository,
        features_addr=features.address,
        shutdown_drain_s=0,
        health_interval_s=0.1,
    )
    service = await create_server(settings)
    await service.start()
    channel = grpc.aio.insecure_channel(service.address)
    try:
        health = health_pb2_grpc.HealthStub(channel)

        async def serving():
            reply = await health.Check(health_pb2.HealthCheckRequest(service=""))
            return reply.status == health_pb2.HealthCheckResponse.SERVING

        await apoll_until(serving, 60)  # Triton's models and the item table
        stub = ranker_pb2_grpc.RankerServiceStub(channel)
        users, items = catalog
        user = user_message(users.iloc[5])
        cands = [*candidates(items, 150, 20), pb.Candidate(item_id="not-in-catalogue")]
        vector = (await stub.EmbedUser(pb.EmbedUserRequest(user=user))).vector_f32
        assert np.frombuffer(vector, "<f4").shape == (64,)
        by_messages = await stub.Score(
            pb.ScoreRequest(user=user, candidates=cands, user_vector_f32=vector)
        )
        retrieval = np.asarray([c.retrieval_score for c in cands], np.float32)
        ids = [c.item_id for c in cands]
        by_columns = await stub.Score(
            pb.ScoreRequest(
                user=user,
                item_ids=ids,
                retrieval_scores_f32=retrieval.tobytes(),
                user_vector_f32=vector,
            )
        )
        np.testing.assert_array_equal(by_columns.scores, by_messages.scores)
        assert by_columns.unknown_item_count == by_messages.unknown_item_count == 1
        # A vector cached from another model version is not used: re-embedded.
        stale = await stub.Score(
            pb.ScoreRequest(
                user=user,
                item_ids=ids,
                retrieval_scores_f32=retrieval.tobytes(),
                user_vector_f32=np.zeros(64, np.float32).tobytes(),
                user_vector_version="an-older-version",
            )
        )
        np.testing.assert_allclose(stale.scores, by_columns.scores, rtol=1e-5, atol=1e-5)
        for request, field in [
            (pb.ScoreRequest(user=user, item_ids=ids, retrieval_scores_f32=b"abc"), "retrieval"),
            (
                pb.ScoreRequest(
                    user=user, item_ids=ids[:2], retrieval_scores_f32=retrieval[:3].tobytes()
                ),
                "retrieval",
            ),
            (
                pb.ScoreRequest(
                    user=user,
                    item_ids=ids[:1],
                    retrieval_scores_f32=retrieval[:1].tobytes(),
                    user_vector_f32=b"\0" * 8,
                ),
                "user_vector_f32",
            ),
        ]:
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await stub.Score(request)
            assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert raised.value.details().startswith(field)
        # A push changes an item's popularity: the table follows, and so do its scores.
        table = service.domain.items
        before = table.items[table.slot_of[ids[0]]].popularity
        await features.domain.push([Event("3", ids[0], 5.0, datetime.now(UTC)) for _ in range(1)])
        await apoll_until(
            lambda: asyncio.sleep(0, result=table.items[table.slot_of[ids[0]]].popularity > before),
            10,
        )
    finally:
        await channel.close()
        await service.stop(0)
        await features.stop(0)


async def test_concurrent_requests_are_batched(ranker, catalog, triton):
    import tritonclient.grpc.aio as triton_aio

    stub, _, _ = ranker
    users, items = catalog
    async with triton_aio.InferenceServerClient(triton.grpc_url) as client:

        def counts(stats):
            # One entry per loaded version; sum them.
            requests = sum(
                int(s["inference_stats"]["success"].get("count", 0)) for s in stats["model_stats"]
            )
            executions = sum(int(s.get("execution_count", 0)) for s in stats["model_stats"])
            return requests, executions

        async def burst() -> tuple[int, int]:
            """64 Scores at once: (Triton requests, executions) they made."""
            before = counts(await client.get_inference_statistics("ranker", as_json=True))
            vector = [0.1] * 64
            replies = await asyncio.gather(
                *(
                    stub.Score(
                        pb.ScoreRequest(
                            user=user_message(users.iloc[i]),
                            candidates=candidates(items, 50, i),
                            user_vector=vector,
                        )
                    )
                    for i in range(64)
                )
            )
            assert all(len(r.scores) == 50 for r in replies)

            async def settled():
                # Triton updates its statistics just after sending the responses.
                now = counts(await client.get_inference_statistics("ranker", as_json=True))
                return now if now[0] - before[0] >= 64 else None

            after = await apoll_until(settled, 10)
            return after[0] - before[0], after[1] - before[1]

        # A burst that reaches Triton spread out (a very busy host) runs one
        # execution per request; batching shows in the next.
        bursts = [await burst() for _ in range(3)]
    assert all(requests == 64 for requests, _ in bursts)
    requests, executions = min(bursts, key=lambda b: b[1])
    assert executions < requests, (requests, executions)


async def test_input_limits_and_unknown_ids(ranker, catalog):
    stub, _, _ = ranker
    users, items = catalog
    user = user_message(users.iloc[0])
    too_many = candidates(items, 1) * 1001
    for request, field in [
        (pb.ScoreRequest(user=user, candidates=too_many), "candidates"),
        (pb.ScoreRequest(user=user), "candidates"),
        (
            pb.ScoreRequest(user=user, candidates=candidates(items, 3), user_vector=[1.0, 2.0]),
            "user_vector",
        ),
        (pb.ScoreRequest(user=user, candidates=[pb.Candidate()]), "candidates[0].item_id"),
    ]:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stub.Score(request)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert raised.value.details().startswith(field)
    known = candidates(items, 2)
    unknown = pb.Candidate(item_id="never-seen-item", features=fpb.ItemFeatures(year=1990))
    reply = await stub.Score(pb.ScoreRequest(user=user, candidates=[*known, unknown]))
    assert len(reply.scores) == 3 and reply.unknown_item_count == 1
    assert all(np.isfinite(reply.scores))
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.LoadModel(pb.LoadModelRequest(version="no-such-version"))
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND


def item_message(row):
    return fpb.ItemFeatures(
        item_id=row.item_id,
        year=int(row.year),
        categories=list(row.genres),
        popularity=int(row.popularity),
        mean_rating=float(row.mean_rating),
    )


async def test_embed_items_gives_the_builds_vectors_and_new_items_one(built, ranker, catalog):
    """The item tower in Triton reproduces the vectors the build indexed; an
    item it never saw is embedded from its features and its categories'
    prior, whatever its id."""
    stub, _, _ = ranker
    _, items = catalog
    known = items.iloc[:40]
    horror = [
        fpb.ItemFeatures(item_id=item_id, year=1990, categories=["Horror"])
        for item_id in ("launch-1", "launch-2")
    ]
    bare = fpb.ItemFeatures(item_id="launch-3", year=1990)
    request = pb.EmbedItemsRequest(items=[*map(item_message, known.itertuples()), *horror, bare])
    reply = await stub.EmbedItems(request)
    vectors = np.frombuffer(reply.vectors_f32, "<f4").reshape(43, reply.dimension)
    stored = pd.read_parquet(built.directory / "item_vectors.parquet").set_index("item_id")
    expected = np.stack(stored.loc[known["item_id"], "vector"].to_numpy())
    np.testing.assert_allclose(vectors[:40], expected, rtol=1e-4, atol=1e-5)
    assert reply.unknown_items == 3 and reply.model_version == built.version + "-b"
    np.testing.assert_allclose(np.linalg.norm(vectors[40:], axis=1), 1.0, atol=1e-4)
    np.testing.assert_array_equal(vectors[40], vectors[41])  # the id plays no part
    assert not np.allclose(vectors[40], vectors[42], atol=1e-3)  # the categories do
    # A version in the repository that this ranker has not loaded (a retrained
    # one whose items the retriever prepares before its rollout): loaded for it.
    other = await stub.EmbedItems(pb.EmbedItemsRequest(model_version=built.version, items=[bare]))
    assert other.model_version == built.version and other.dimension == reply.dimension
    for request, code, field in [
        (pb.EmbedItemsRequest(), grpc.StatusCode.INVALID_ARGUMENT, "items"),
        (
            pb.EmbedItemsRequest(items=[fpb.ItemFeatures()]),
            grpc.StatusCode.INVALID_ARGUMENT,
            "items[0].item_id",
        ),
        (
            pb.EmbedItemsRequest(model_version="no-such-version", items=[bare]),
            grpc.StatusCode.NOT_FOUND,
            "model version 'no-such-version'",
        ),
    ]:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stub.EmbedItems(request)
        assert raised.value.code() == code
        assert raised.value.details().startswith(field), raised.value.details()


async def test_model_reload_under_load_fails_no_request(ranker, catalog, setup, built):
    stub, _, _ = ranker
    _, _, second = setup
    users, items = catalog
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    seen: list[tuple[float, str]] = []  # (when the request started, its model version)
    failures = []

    def count(version, since=0.0):
        return sum(1 for started, v in seen if v == version and started > since)

    async def load_loop(seed):
        n = 0
        while not stop.is_set():
            started = loop.time()
            try:
                reply = await stub.Score(
                    pb.ScoreRequest(
                        user=user_message(users.iloc[(seed + n) % len(users)]),
                        candidates=candidates(items, 100, n % 50),
                    ),
                    timeout=10,
                )
                seen.append((started, reply.model_version))
            except grpc.aio.AioRpcError as exc:
                failures.append(exc.code())
            n += 1

    loops = [asyncio.create_task(load_loop(s)) for s in range(4)]
    await apoll_until(lambda: asyncio.sleep(0, count(second) >= 5), 30)
    # Switch to the previous version (a rollback) under load, then forward.
    loaded = await stub.LoadModel(pb.LoadModelRequest(version=built.version))
    assert loaded.model_version == built.version
    await apoll_until(lambda: asyncio.sleep(0, count(built.version) >= 5), 30)
    forward = await stub.LoadModel(pb.LoadModelRequest(version=second))
    switched = loop.time()
    assert forward.model_version == second
    await apoll_until(lambda: asyncio.sleep(0, count(second, since=switched) >= 5), 30)
    stop.set()
    await asyncio.gather(*loops)
    assert failures == []
    # Requests in flight during a switch finish on the version they pinned;
    # every request that started after it names the new one.
    assert {v for started, v in seen if started > switched} == {second}
    info = await stub.GetModelInfo(pb.GetModelInfoRequest())
    assert {m.version for m in info.models} >= {second, built.version}


async def test_not_serving_while_triton_is_down(setup, tmp_path):
    root, repository, _ = setup
    server = start_triton(tmp_path / "t", repository, ["user_tower", "ranker"])
    ports = server.ports
    service = channel = None
    try:
        await apoll_until(lambda: asyncio.to_thread(server.ready), 120)
        settings = RankerSettings(
            port=0,
            data_dir=root,
            triton_url=server.grpc_url,
            triton_repository=repository,
            shutdown_drain_s=0,
            health_interval_s=0.1,
        )
        service = await create_server(settings)
        await service.start()
        channel = grpc.aio.insecure_channel(service.address)
        health = health_pb2_grpc.HealthStub(channel)

        async def status_is(wanted):
            # Triton's own status: overall readiness also waits for the item
            # table, which needs a features service (the columns test covers it).
            request = health_pb2.HealthCheckRequest(service="dependency/triton")
            return (await health.Check(request)).status == wanted

        serving = health_pb2.HealthCheckResponse.SERVING
        not_serving = health_pb2.HealthCheckResponse.NOT_SERVING
        await apoll_until(lambda: status_is(serving), 60)
        server.stop()
        # Killed (as the runner stops it), it leaves no shared memory behind.
        assert not shared_memory(server.settings)
        await apoll_until(lambda: status_is(not_serving), 30)
        server = start_triton(tmp_path / "t", repository, ["user_tower", "ranker"], ports)
        await apoll_until(lambda: status_is(serving), 120)
    finally:
        # Stopped even when an assertion failed: a grpc.aio server or channel
        # left to the garbage collector in a later test's loop can hang pytest.
        if channel is not None:
            await channel.close()
        if service is not None:
            await service.stop(0)
        server.stop()


async def test_late_triton_calls_run_on_and_their_number_is_bounded(setup, triton, catalog):
    """A call past its deadline is not cancelled (Triton 2.51 can crash on
    that): it finishes in the background. Past max_abandoned_calls of those,
    new calls fail at once until Triton catches up."""
    from recserve_kit.errors import Unavailable
    from services.ranker.domain import Ranker
    from services.ranker.servicer import to_user

    root, repository, _ = setup
    users, _ = catalog
    settings = RankerSettings(
        data_dir=root,
        triton_url=triton.grpc_url,
        triton_repository=repository,
        max_abandoned_calls=3,
    )
    ranker = Ranker(settings)
    await apoll_until(ranker.models_ready, 60)
    user = to_user(user_message(users.iloc[0]))
    os.kill(triton.process.pid, signal.SIGSTOP)  # a hung Triton
    try:
        for _ in range(3):
            with pytest.raises(Unavailable, match="deadline"):
                await ranker.embed_user(user, 0.05)
        assert ranker.abandoned == 3
        with pytest.raises(Unavailable, match="behind"):
            await ranker.embed_user(user, 0.05)
    finally:
        os.kill(triton.process.pid, signal.SIGCONT)
    await apoll_until(lambda: asyncio.sleep(0, ranker.abandoned == 0), 30)
    vector, _ = await ranker.embed_user(user, 5.0)
    assert vector.shape == (64,) and triton.process.poll() is None
    await ranker.close()


async def test_the_builds_stored_user_vectors_are_what_triton_computes(built, ranker, catalog):
    """The vectors the build stores for every user (pipelines/user_vectors.py,
    served by the features service instead of an embed call) equal what the
    user tower in Triton computes for the same profiles."""
    stub, _, _ = ranker
    users, _ = catalog
    stored = pd.read_parquet(built.directory / "features" / "user_vectors.parquet")
    stored = stored.set_index("user_id")
    assert len(stored) == len(users) and set(stored["model_version"]) == {built.version}
    for row in range(0, len(users), 47):
        user = users.iloc[row]
        embedded = await stub.EmbedUser(pb.EmbedUserRequest(user=user_message(user)))
        np.testing.assert_allclose(
            np.frombuffer(embedded.vector_f32, "<f4"),
            stored.loc[user.user_id, "vector"],
            rtol=1e-5,
            atol=1e-6,
        )
