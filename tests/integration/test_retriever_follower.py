"""A read-only follower of the writer retriever (services/retriever/
follower.py), both real services on Qdrant Edge over one data folder, as
two request-path processes on one host run them: the follower serves the
writer's generation from shards of its own, takes every acknowledged write
from the change feed, follows a prepared version through its promotion or
drop and a new generation's switch, refuses writes naming the writer, and
rebuilds after a gap in the feed while it goes on serving; a killed
follower's shards go when the next starts."""

import asyncio
import dataclasses
import shutil
import subprocess

import grpc
import numpy as np
import pandas as pd
import pytest

from recserve.retriever.v1 import retriever_pb2 as pb
from recserve.retriever.v1 import retriever_pb2_grpc
from recserve_model import artifacts
from recserve_model.catalogue import CatalogueSchema
from services.retriever.config import RetrieverSettings
from services.retriever.server import create_server
from services.retriever.servicer import to_input
from tests.helpers import apoll_until, data_dir_for_versions
from tests.integration.test_retriever_prepared import prepared, rotated_artifact, started, top


async def started_follower(data_dir):
    # No look on a timer within a test: each write reaches it by the
    # kernel's notice (inotify) alone.
    settings = RetrieverSettings(
        port=0, data_dir=data_dir, shutdown_drain_s=0, follow=True, follow_interval_s=60
    )
    service = await create_server(settings)
    await service.start()
    await apoll_until(lambda: asyncio.sleep(0, service.domain.ready), 60)
    channel = grpc.aio.insecure_channel(service.address)
    return service, channel, retriever_pb2_grpc.RetrieverServiceStub(channel)


@pytest.fixture
async def pair(built, tmp_path):
    data_dir = data_dir_for_versions(tmp_path / "data", built.directory.parents[1])
    writer, writer_channel, writes = await started(data_dir)
    follower, follower_channel, reads = await started_follower(data_dir)
    try:
        yield data_dir, writer, writes, follower, reads
    finally:
        for channel in (writer_channel, follower_channel):
            await channel.close()
        await follower.stop(0)
        await writer.stop(0)


def unit(hot: int) -> np.ndarray:
    vector = np.zeros(64, np.float32)
    vector[hot] = 1.0
    return vector


async def until_top(stub, vector, item_id: str, version: str = "") -> None:
    async def found() -> bool:
        return (await top(stub, vector, version)).item_id == item_id

    await apoll_until(found, 30, 0.05)


async def test_the_follower_serves_the_writers_generation_and_each_write(pair, built):
    _, writer, writes, follower, reads = pair
    info = await writes.GetInfo(pb.GetInfoRequest())
    mirrored = await reads.GetInfo(pb.GetInfoRequest())
    assert (mirrored.generation, mirrored.model_version) == (info.generation, info.model_version)
    assert mirrored.point_count == info.point_count > 0
    frame = pd.read_parquet(built.directory / "item_vectors.parquet")
    for row in (3, 40, 700):
        assert (await top(reads, frame["vector"][row])).item_id == frame["item_id"][row]
    # Its shards are its own, in a folder the writer never opens.
    own = follower.domain.generations.state_dir
    assert follower.domain.current.path.parent == own != writer.domain.generations.state_dir
    new = pb.Item(item_id="arrived-after-the-build", vector=unit(7), active=True)
    await writes.UpsertItems(pb.UpsertItemsRequest(items=[new]))
    await until_top(reads, unit(7), new.item_id)
    soft = pb.DeleteItemsRequest(item_ids=[new.item_id], mode=pb.DELETE_MODE_SOFT)
    await writes.DeleteItems(soft)
    await until_top(reads, unit(7), (await top(writes, unit(7))).item_id)
    assert (await top(reads, unit(7))).item_id != new.item_id
    await follower.stop(0)
    assert not own.exists()  # rebuilt at each start: nothing left behind


async def test_a_write_whose_logs_failed_reaches_the_follower_with_the_next(pair, monkeypatch):
    _, writer, writes, _, reads = pair
    log = writer.domain.catalogue_log
    real, refused = log.record, []

    def disk_full_once(write):
        if not refused:
            refused.append(write)
            raise OSError(28, "No space left on device")
        return real(write)

    monkeypatch.setattr(log, "record", disk_full_once)
    first = pb.Item(item_id="applied-but-not-logged", vector=unit(9), active=True)
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await writes.UpsertItems(pb.UpsertItemsRequest(items=[first]))
    assert refused and failed.value.code() == grpc.StatusCode.INTERNAL
    # The writer's index applied it; the follower gets it too, no gap left.
    second = pb.Item(item_id="sent-after-the-disk-recovered", vector=unit(11), active=True)
    await writes.UpsertItems(pb.UpsertItemsRequest(items=[second]))
    await until_top(reads, unit(11), second.item_id)
    await until_top(reads, unit(9), first.item_id)
    assert writer.domain.feed.unwritten == []


async def test_writes_sent_to_the_follower_are_refused_naming_the_writer(pair):
    reads = pair[4]
    item = pb.Item(item_id="sent-to-the-wrong-one", vector=unit(3), active=True)
    for call in (
        reads.UpsertItems(pb.UpsertItemsRequest(items=[item])),
        reads.DeleteItems(pb.DeleteItemsRequest(item_ids=["1"], mode=pb.DELETE_MODE_SOFT)),
        reads.PrepareModelVersion(pb.PrepareModelVersionRequest(model_version="v")),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await call
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "follows the retriever writing" in refused.value.details()
    assert (await reads.GetItems(pb.GetItemsRequest(item_ids=[item.item_id]))).items == []


async def test_a_prepared_version_is_followed_through_its_promotion(pair, built):
    data_dir, writer, writes, follower, reads = pair
    retrained, turned = rotated_artifact(data_dir, built.version)
    # READY only once the follower holds it too: a rollout that starts moves
    # users to the candidate on every request-path process.
    ready = await prepared(writes, retrained)
    info = await reads.GetInfo(pb.GetInfoRequest())
    assert info.prepared_generation == ready.generation != ""
    frame = pd.read_parquet(built.directory / "item_vectors.parquet")
    assert (await top(reads, turned[40], retrained)).item_id == frame["item_id"][40]
    # A write in both spaces (as the item tower gives it) reaches both of the follower's.
    item = pb.Item(item_id="launched", vector=unit(7), active=True)
    records = writer.domain.to_records([to_input(item)])
    own = [dataclasses.replace(records[0], vector=unit(9))]
    await writer.domain.upsert({built.version: records, retrained: own})
    await until_top(reads, unit(7), "launched")
    await until_top(reads, unit(9), "launched", retrained)
    # Promoted: the follower's copy of the candidate becomes current, no rebuild.
    kept = follower.domain.prepared.store
    artifacts.set_current(data_dir, retrained)
    assert await writer.domain.refresh_from_artifacts()
    await apoll_until(lambda: asyncio.sleep(0, follower.domain.current is kept), 30, 0.05)
    info = await reads.GetInfo(pb.GetInfoRequest())
    assert (info.model_version, info.prepared_model_version) == (retrained, "")
    assert (await top(reads, unit(9))).item_id == "launched"


async def rebuilt(writer, built) -> str:
    """The writer builds a new generation of the artifact's items, as a new
    build's artifact has it do."""
    schema = CatalogueSchema.load(built.directory)
    items = built.directory / "item_vectors.parquet"
    return await writer.domain.refresh(items, built.version, schema, writer.domain.items_sha256)


async def test_a_new_generation_is_rebuilt_with_every_write_and_a_gap_waits_for_the_next(
    pair, built
):
    _, writer, writes, follower, reads = pair

    def upsert(item_id: str, hot: int):
        items = [pb.Item(item_id=item_id, vector=unit(hot), active=True)]
        return writes.UpsertItems(pb.UpsertItemsRequest(items=items))

    # The writes while the writer builds are replayed into its new
    # generation, and into the follower's.
    refresh = asyncio.create_task(rebuilt(writer, built))
    await upsert("during-the-rebuild", 6)
    generation = await refresh
    await upsert("after-the-rebuild", 5)

    async def switched() -> bool:
        return (await reads.GetInfo(pb.GetInfoRequest())).generation == generation

    await apoll_until(switched, 60, 0.05)
    await until_top(reads, unit(5), "after-the-rebuild")
    assert (await top(reads, unit(6))).item_id == (await top(writes, unit(6))).item_id
    assert (await top(writes, unit(6))).item_id == "during-the-rebuild"
    # The feed loses records the follower's generation needs: it goes on
    # serving what it holds, and follows again from the writer's next one.
    serving = follower.domain.current
    feed = writer.domain.feed
    feed.close()
    shutil.rmtree(feed.directory)
    feed.directory.mkdir()
    feed.last_seq += 1  # the next record is not the one after the last read
    await upsert("after-a-gap", 8)
    await asyncio.sleep(0.3)  # a few looks at the feed
    assert follower.domain.current is serving
    assert (await top(reads, unit(5))).item_id == "after-the-rebuild"
    generation = await rebuilt(writer, built)
    await upsert("after-the-next-rebuild", 4)
    await apoll_until(switched, 60, 0.05)
    await until_top(reads, unit(4), "after-the-next-rebuild")
    assert (await top(reads, unit(8))).item_id == (await top(writes, unit(8))).item_id


async def test_a_killed_followers_shards_are_removed_when_the_next_starts(built, tmp_path):
    data_dir = data_dir_for_versions(tmp_path / "data", built.directory.parents[1])
    writer, writer_channel, _ = await started(data_dir)
    dead = subprocess.Popen(["true"])  # a pid no process has once it ended
    dead.wait()
    left = data_dir / "qdrant" / f"items.follower-{dead.pid}"
    (left / "g0001-0").mkdir(parents=True)
    follower, follower_channel, _ = await started_follower(data_dir)
    try:
        assert not left.exists()
        assert follower.domain.generations.state_dir.exists()
    finally:
        for channel in (writer_channel, follower_channel):
            await channel.close()
        await follower.stop(0)
        await writer.stop(0)
