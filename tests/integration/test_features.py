"""The features service with the real Feast stores (SQLite, and Redis from a
real redis-server the test starts): served values equal the parquet source,
pushes are visible at once and update the cache, stores agree, bad input is
refused whole, and watchers get the catalogue and every pushed change."""

import asyncio
import logging
import shutil
from datetime import UTC, datetime

import grpc
import numpy as np
import pandas as pd
import pytest
import redis
from google.protobuf.timestamp_pb2 import Timestamp

from recserve.features.v1 import features_pb2 as pb
from recserve.features.v1 import features_pb2_grpc
from recserve.ranker.v1 import ranker_pb2 as rpb
from recserve.ranker.v1 import ranker_pb2_grpc
from recserve_kit.item_watch import ItemWatch
from recserve_model import artifacts
from services.features.config import FeaturesSettings
from services.features.server import create_server
from tests.helpers import apoll_until, data_dir_for_versions, data_dir_with_artifacts


@pytest.fixture(scope="module")
def tables(built):
    f = built.directory / "features"
    return {
        name: pd.read_parquet(f / f"{name}.parquet")
        for name in ("user_profile", "user_activity", "item_profile", "item_stats")
    }


async def start(built, tmp_path, redis_url=""):
    if redis_url:
        host, port = redis_url.split(":")
        redis.Redis(host=host, port=int(port)).flushall()  # a fresh store per test
    data_dir = data_dir_with_artifacts(tmp_path / "data", built.directory.parents[1])
    settings = FeaturesSettings(
        port=0, data_dir=data_dir, redis_url=redis_url, shutdown_drain_s=0, refresh_interval_s=0
    )
    service = await create_server(settings)
    await service.start()
    channel = grpc.aio.insecure_channel(service.address)
    return service, channel, features_pb2_grpc.FeatureServiceStub(channel)


@pytest.fixture(params=["sqlite", "redis"])
async def features(request, built, tmp_path):
    url = request.getfixturevalue("redis_url") if request.param == "redis" else ""
    service, channel, stub = await start(built, tmp_path, url)
    yield stub, service
    await channel.close()
    await service.stop(0)


async def test_served_values_equal_the_parquet_source(features, tables):
    stub, _ = features
    profile = tables["user_profile"].set_index("user_id")
    activity = tables["user_activity"].set_index("user_id")
    for user_id in ["1", "42", "943"]:
        user = (await stub.GetUserFeatures(pb.GetUserFeaturesRequest(user_id=user_id))).user
        assert user.found
        assert (user.age, user.gender, user.occupation) == tuple(
            profile.loc[user_id, ["age", "gender", "occupation"]]
        )
        assert user.rating_count == activity.loc[user_id, "rating_count"]
        assert user.mean_rating == pytest.approx(activity.loc[user_id, "mean_rating"], rel=1e-6)
        assert list(user.recent_item_ids) == list(activity.loc[user_id, "recent_item_ids"])
        assert list(user.seen_item_ids) == list(activity.loc[user_id, "seen_item_ids"])
        assert len(user.seen_item_ids) == user.rating_count
    items = tables["item_profile"].merge(tables["item_stats"], on="item_id").set_index("item_id")
    ids = [str(i) for i in range(1, 201)]
    reply = await stub.GetItemFeatures(pb.GetItemFeaturesRequest(item_ids=ids))
    assert [i.item_id for i in reply.items] == ids
    for item in reply.items:
        row = items.loc[item.item_id]
        assert item.found and item.title == row.title and item.year == row.year
        assert list(item.categories) == list(row.genres)
        assert item.popularity == row.popularity
        assert item.mean_rating == pytest.approx(row.mean_rating, rel=1e-6)


async def test_unknown_entities_get_defaults_not_errors(features):
    stub, _ = features
    user = (await stub.GetUserFeatures(pb.GetUserFeaturesRequest(user_id="no-such-user"))).user
    assert user.user_id == "no-such-user" and not user.found and user.age == 0
    reply = await stub.GetItemFeatures(pb.GetItemFeaturesRequest(item_ids=["1", "nope", "2"]))
    assert [(i.item_id, i.found) for i in reply.items] == [
        ("1", True),
        ("nope", False),
        ("2", True),
    ]


async def test_item_cache_serves_repeats_and_a_push_caches_what_it_wrote(features):
    stub, _ = features
    ids = ["10", "11", "12"]
    _, service = features
    service.domain.invalidate_items(ids)  # the catalogue was preloaded at start
    first = await stub.GetItemFeatures(pb.GetItemFeaturesRequest(item_ids=ids))
    second = await stub.GetItemFeatures(pb.GetItemFeaturesRequest(item_ids=ids))
    assert first.cache_hits == 0 and second.cache_hits == 3
    before = (await stub.GetUserFeatures(pb.GetUserFeaturesRequest(user_id="7"))).user
    when = Timestamp()
    when.FromDatetime(datetime.now(UTC))
    await stub.PushUserEvents(
        pb.PushUserEventsRequest(
            events=[
                pb.UserEvent(user_id="7", item_id="11", rating=5.0, event_time=when),
                pb.UserEvent(user_id="7", item_id="1500", rating=0, event_time=when),
            ]
        )
    )
    after = (await stub.GetUserFeatures(pb.GetUserFeaturesRequest(user_id="7"))).user
    assert after.rating_count == before.rating_count + 2
    assert set(after.recent_item_ids[:2]) == {"11", "1500"}
    assert set(after.seen_item_ids[:2]) == {"11", "1500"}
    assert len(after.seen_item_ids) == len(set(before.seen_item_ids) | {"11", "1500"})
    expected_mean = (before.mean_rating * before.rating_count + 5.0) / (before.rating_count + 1)
    assert after.mean_rating == pytest.approx(expected_mean, rel=1e-5)
    third = await stub.GetItemFeatures(pb.GetItemFeaturesRequest(item_ids=ids))
    # Item 11 changed: the cache holds what the push wrote, not the old value.
    assert third.cache_hits == 3
    assert third.items[1].popularity == second.items[1].popularity + 1
    # And that is what the online store holds: read again past the cache.
    service.domain.invalidate_items(["11"])
    fourth = await stub.GetItemFeatures(pb.GetItemFeaturesRequest(item_ids=ids))
    assert fourth.cache_hits == 2 and fourth.items[1] == third.items[1]


async def test_bad_input_is_refused_whole_with_the_field_named(features):
    stub, _ = features
    before = (await stub.GetUserFeatures(pb.GetUserFeaturesRequest(user_id="8"))).user
    when = Timestamp()
    when.FromDatetime(datetime.now(UTC))
    cases = [
        (stub.GetUserFeatures, pb.GetUserFeaturesRequest(user_id=""), "user_id"),
        (stub.GetItemFeatures, pb.GetItemFeaturesRequest(item_ids=["1"] * 1001), "item_ids"),
        (stub.GetItemFeatures, pb.GetItemFeaturesRequest(item_ids=["1", ""]), "item_ids[1]"),
        (stub.PushUserEvents, pb.PushUserEventsRequest(), "events"),
        (
            stub.PushUserEvents,
            pb.PushUserEventsRequest(
                events=[
                    pb.UserEvent(user_id="8", item_id="1", rating=4, event_time=when),
                    pb.UserEvent(user_id="8", item_id="2", rating=9, event_time=when),
                ]
            ),
            "events[1].rating",
        ),
        (
            stub.PushUserEvents,
            pb.PushUserEventsRequest(
                events=[
                    pb.UserEvent(user_id="8", item_id="1", rating=4),
                ]
            ),
            "events[0].event_time",
        ),
        (  # out of Timestamp's range was once answered INTERNAL
            stub.PushUserEvents,
            pb.PushUserEventsRequest(
                events=[
                    pb.UserEvent(user_id="8", item_id="1", rating=4, event_time=when),
                    pb.UserEvent(
                        user_id="8", item_id="1", rating=4, event_time=Timestamp(seconds=10**12)
                    ),
                ]
            ),
            "events[1].event_time",
        ),
        (  # finding 3: Unicode digits are not ids
            stub.PushUserEvents,
            pb.PushUserEventsRequest(
                events=[
                    pb.UserEvent(user_id="8", item_id="\u0664\u0662", rating=4, event_time=when)
                ]
            ),
            "events[0].item_id",
        ),
        (stub.GetUserFeatures, pb.GetUserFeaturesRequest(user_id="\u00b2"), "user_id"),
    ]
    for call, request, field in cases:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await call(request)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT, field
        assert raised.value.details().startswith(field + ":"), raised.value.details()
    after = (await stub.GetUserFeatures(pb.GetUserFeaturesRequest(user_id="8"))).user
    assert after == before  # nothing of the refused batch was written


async def test_sqlite_and_redis_give_identical_answers(built, tmp_path, redis_url):
    answers = []
    for url in ("", redis_url):
        service, channel, stub = await start(built, tmp_path / (url or "sqlite"), url)
        users = [
            (await stub.GetUserFeatures(pb.GetUserFeaturesRequest(user_id=str(u)))).user
            for u in (1, 500, 943, 99999)
        ]
        items = (
            await stub.GetItemFeatures(
                pb.GetItemFeaturesRequest(item_ids=[str(i) for i in range(1, 300)] + ["x"])
            )
        ).items
        answers.append(
            ([u.SerializeToString() for u in users], [i.SerializeToString() for i in items])
        )
        await channel.close()
        await service.stop(0)
    assert answers[0] == answers[1]


async def test_direct_user_read_equals_the_sdk_read(features):
    """The hot path's online_read gives exactly what get_online_features gives."""
    _, service = features
    users = service.domain.user_reader
    ids = [str(i) for i in range(1, 944)] + ["no-such-user"]
    refs = [
        f"{projection.name_to_use()}:{feature.name}"
        for projection in users.user_service.feature_view_projections
        for feature in projection.features
    ]
    entities = [{"user_id": u} for u in ids]
    rows = users.store.get_online_features(features=refs, entity_rows=entities).to_dict()
    rows["item_ids"] = rows["run_id"] = [None] * len(ids)  # no re-scoring run published here
    assert users.read(ids) == users._records(ids, rows, None)


async def test_live_writes_and_item_reads_below_the_sdk_agree_with_the_sdk(features):
    """Events are written, and items read, through Feast's online store
    interface below its SDK: what a push wrote, the SDK reads back as the
    service serves it (a new user included), and item reads equal the SDK's."""
    stub, service = features
    when = Timestamp()
    when.FromDatetime(datetime.now(UTC))
    events = [
        pb.UserEvent(user_id="7", item_id="11", rating=4.0, event_time=when),
        pb.UserEvent(user_id="not-in-the-export", item_id="12", rating=0, event_time=when),
    ]
    await stub.PushUserEvents(pb.PushUserEventsRequest(events=events))
    store = service.domain.store
    ids = ["7", "not-in-the-export"]
    names = ["rating_count", "mean_rating", "recent_item_ids", "seen_item_ids"]
    sdk = store.get_online_features(
        features=[f"user_activity:{n}" for n in names], entity_rows=[{"user_id": u} for u in ids]
    ).to_dict()
    for n, user_id in enumerate(ids):
        served = (await stub.GetUserFeatures(pb.GetUserFeaturesRequest(user_id=user_id))).user
        assert sdk["rating_count"][n] == served.rating_count
        assert sdk["mean_rating"][n] == pytest.approx(served.mean_rating)
        assert sdk["recent_item_ids"][n] == list(served.recent_item_ids)
        assert sdk["seen_item_ids"][n] == list(served.seen_item_ids)
    assert sdk["recent_item_ids"][1] == ["12"] and sdk["rating_count"][1] == 1
    item_ids = ["11", "12", "300", "no-such-item"]
    rows = store.get_online_features(
        features=store.get_feature_service("item_features"),
        entity_rows=[{"item_id": i} for i in item_ids],
    ).to_dict()
    read = service.domain.item_reader.read(item_ids)
    assert [r.popularity for r in read[:3]] == rows["popularity"][:3]
    assert [r.title for r in read[:3]] == rows["title"][:3]
    assert [list(r.categories) for r in read[:3]] == rows["genres"][:3]
    assert [r.mean_rating for r in read[:3]] == pytest.approx(rows["mean_rating"][:3])
    assert not read[3].found and rows["popularity"][3] is None


async def test_watch_lists_the_catalogue_then_streams_pushed_changes(features, tables):
    stub, service = features
    table: dict[str, pb.ItemFeatures] = {}
    changes: list[list[str]] = []

    def listing(items, version):
        table.clear()
        table.update({i.item_id: i for i in items})

    def changed(items):
        table.update({i.item_id: i for i in items})
        changes.append([i.item_id for i in items])

    channel = grpc.aio.insecure_channel(service.address)
    watch = ItemWatch(channel, listing, changed)
    task = asyncio.create_task(watch.run())
    try:
        await apoll_until(watch.healthy, 30)
        assert set(table) == set(tables["item_profile"]["item_id"])
        assert watch.version == service.domain.catalogue.version != ""
        before = table["11"].popularity
        when = Timestamp()
        when.FromDatetime(datetime.now(UTC))
        event = pb.UserEvent(user_id="7", item_id="11", rating=4.0, event_time=when)
        await stub.PushUserEvents(pb.PushUserEventsRequest(events=[event]))
        await apoll_until(lambda: asyncio.sleep(0, result=bool(changes)), 10)
        assert changes == [["11"]] and table["11"].popularity == before + 1
        assert table["11"].title and table["12"].popularity > 0
    finally:
        task.cancel()
        await channel.close()


async def test_a_clean_stop_with_a_watcher_connected_logs_no_error(built, tmp_path, caplog):
    """SIGTERM's path (drain, stop) ends the catalogue streams itself: a
    stream the grace period had to cancel was logged as an unhandled error."""
    service, channel, stub = await start(built, tmp_path)
    call = stub.WatchItemFeatures(pb.WatchItemFeaturesRequest())
    async for message in call:
        if message.synced:
            break
    with caplog.at_level(logging.WARNING):
        await service.stop(None)
        assert await call.code() == grpc.StatusCode.OK  # the stream finished, not cancelled
    await channel.close()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


class StandInRanker(ranker_pb2_grpc.RankerServiceServicer):
    """EmbedUsers only: vectors that say which profile they were asked for."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def EmbedUsers(self, request, context):
        self.asked += [u.user_id for u in request.users]
        return rpb.EmbedUsersResponse(
            users=[
                rpb.EmbeddedUser(
                    user_id=u.user_id,
                    vector_f32=np.full(64, float(u.rating_count), dtype="<f4").tobytes(),
                    model_version="stand-in",
                )
                for u in request.users
            ]
        )


async def test_a_users_stored_vector_is_served_only_for_its_profile_and_recomputed_after_an_event(
    built, tmp_path
):
    """The build stores every user's vector with the profile it was computed
    for: GetUserFeatures carries it while the profile is unchanged; an event
    changes the profile, the stale vector is not served, and the user's
    vector is computed again (the ranker's EmbedUsers, here a stand-in) and
    served with the new profile."""
    stored = pd.read_parquet(built.directory / "features" / "user_vectors.parquet")
    stored = stored.set_index("user_id")
    ranker = grpc.aio.server()
    stand_in = StandInRanker()
    ranker_pb2_grpc.add_RankerServiceServicer_to_server(stand_in, ranker)
    port = ranker.add_insecure_port("127.0.0.1:0")
    await ranker.start()
    data_dir = data_dir_with_artifacts(tmp_path / "data", built.directory.parents[1])
    settings = FeaturesSettings(
        port=0, data_dir=data_dir, shutdown_drain_s=0, refresh_interval_s=0,
        ranker_addr=f"127.0.0.1:{port}",
    )  # fmt: skip
    service = await create_server(settings)
    await service.start()
    channel = grpc.aio.insecure_channel(service.address)
    stub = features_pb2_grpc.FeatureServiceStub(channel)
    try:
        for user_id in ("1", "42", "943"):
            user = (await stub.GetUserFeatures(pb.GetUserFeaturesRequest(user_id=user_id))).user
            assert user.vector_version == built.version
            np.testing.assert_array_equal(
                np.frombuffer(user.vector_f32, "<f4"), stored.loc[user_id, "vector"]
            )
        when = Timestamp()
        when.FromDatetime(datetime.now(UTC))
        event = pb.UserEvent(user_id="42", item_id="11", rating=4.0, event_time=when)
        await stub.PushUserEvents(pb.PushUserEventsRequest(events=[event]))
        changed = (await stub.GetUserFeatures(pb.GetUserFeaturesRequest(user_id="42"))).user
        # At once: the build's vector, computed for the profile before, is not served.
        assert changed.vector_version != built.version

        async def recomputed() -> bool:
            user = (await stub.GetUserFeatures(pb.GetUserFeaturesRequest(user_id="42"))).user
            return user.vector_version == "stand-in"

        await apoll_until(recomputed, 10, 0.05)
        user = (await stub.GetUserFeatures(pb.GetUserFeaturesRequest(user_id="42"))).user
        vector = np.frombuffer(user.vector_f32, "<f4")
        assert vector[0] == user.rating_count  # computed for the profile after the event
        assert stand_in.asked == ["42"]
        other = (await stub.GetUserFeatures(pb.GetUserFeaturesRequest(user_id="1"))).user
        assert other.vector_version == built.version  # untouched
    finally:
        await channel.close()
        await service.stop(0)
        await ranker.stop(0)


async def test_an_artifact_published_while_running_serves_the_views_it_adds(
    built, tmp_path, monkeypatch
):
    """Started on an artifact built before stored user vectors, the service
    publishes a newer one that stores them when CURRENT moves to it, and
    serves them without a restart (the feature sets Feast's registry now
    has, not the ones read at start). Its files are hashed when it is
    published, not at every look for a new one."""
    from services.features import server

    looks, verified = [], []
    real_verify, real_published = artifacts.verify, server.published_version
    monkeypatch.setattr(artifacts, "verify", lambda d: (verified.append(d.name), real_verify(d))[1])
    monkeypatch.setattr(
        server, "published_version", lambda *a: (looks.append(1), real_published(*a))[1]
    )
    data_dir = data_dir_for_versions(tmp_path / "data", built.directory.parents[1])
    root = artifacts.artifacts_root(data_dir)
    older = root / f"{built.version}-older"
    shutil.copytree((root / built.version).resolve(), older)
    (older / "features" / "user_vectors.parquet").unlink()
    (older / artifacts.MANIFEST).unlink()
    artifacts.write_manifest(older, older.name, {"metrics": {}})
    artifacts.set_current(data_dir, older.name)
    settings = FeaturesSettings(
        port=0, data_dir=data_dir, shutdown_drain_s=0, refresh_interval_s=0.2
    )
    service = await create_server(settings)
    await service.start()
    channel = grpc.aio.insecure_channel(service.address)
    stub = features_pb2_grpc.FeatureServiceStub(channel)
    try:
        user = (await stub.GetUserFeatures(pb.GetUserFeaturesRequest(user_id="42"))).user
        assert (
            user.found
            and user.vector_f32 == b""
            and not service.domain.user_reader.stores_vectors()
        )
        at_start = list(verified)
        looked = len(looks)

        async def a_few_looks() -> bool:
            return len(looks) >= looked + 5

        await apoll_until(a_few_looks, 30, 0.1)
        assert verified == at_start and set(at_start) == {older.name}  # nothing new: no hashing
        artifacts.set_current(data_dir, built.version)

        async def vector_served() -> bool:
            reply = await stub.GetUserFeatures(pb.GetUserFeaturesRequest(user_id="42"))
            return reply.user.vector_version == built.version

        await apoll_until(vector_served, 180, 0.5)
        assert service.domain.user_reader.stores_vectors()
        assert set(verified[len(at_start) :]) == {built.version}
    finally:
        await channel.close()
        await service.stop(0)
