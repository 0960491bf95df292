"""A retrained model's items, ready before its rollout, on Qdrant Edge:
PrepareModelVersion builds the version's own generation in the background;
searches naming the version use it, writes reach both generations, a
restart keeps it, a rollback drops it, a promotion (CURRENT moved to the
version) switches to it without a rebuild. A version sharing the current
generation's item vectors (the current artifact, a rehearsal copy) needs no
generation of its own.

The "retrained" artifact here is the built one with its item vectors turned
by a random rotation: another vector space, as a retrain gives, at no
training cost."""

import asyncio
import dataclasses
import shutil
import time

import grpc
import numpy as np
import pandas as pd
import pytest

from recserve.retriever.v1 import retriever_pb2 as pb
from recserve.retriever.v1 import retriever_pb2_grpc
from recserve_delivery import state as rollout_state
from recserve_kit.errors import Unavailable
from recserve_model import artifacts
from services.retriever.config import RetrieverSettings
from services.retriever.server import create_server
from services.retriever.servicer import to_input
from tests.helpers import apoll_until, data_dir_for_versions

ROTATED = "-retrained"


def rotated_artifact(
    data_dir, version: str, suffix: str = ROTATED, seed: int = 5
) -> tuple[str, np.ndarray]:
    """A copy of ``version`` whose item vectors are turned by a rotation."""
    root = artifacts.artifacts_root(data_dir)
    target = root / f"{version}{suffix}"
    shutil.copytree((root / version).resolve(), target)
    (target / artifacts.MANIFEST).unlink()
    frame = pd.read_parquet(target / "item_vectors.parquet")
    vectors = np.stack(frame["vector"].to_numpy()).astype(np.float32)
    rotation, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((64, 64)))
    turned = (vectors @ rotation).astype(np.float32)
    frame["vector"] = list(turned)
    frame.to_parquet(target / "item_vectors.parquet", index=False)
    artifacts.write_manifest(target, target.name, {"metrics": {}})
    return target.name, turned


def copy_version(data_dir, version: str) -> str:
    root = artifacts.artifacts_root(data_dir)
    (root / f"{version}-copy").symlink_to((root / version).resolve(), target_is_directory=True)
    return f"{version}-copy"


async def started(data_dir):
    settings = RetrieverSettings(
        port=0, data_dir=data_dir, shutdown_drain_s=0, refresh_interval_s=0
    )
    service = await create_server(settings)
    await service.start()
    await apoll_until(lambda: asyncio.sleep(0, service.domain.ready), 60)
    channel = grpc.aio.insecure_channel(service.address)
    return service, channel, retriever_pb2_grpc.RetrieverServiceStub(channel)


async def prepared(stub, version: str) -> pb.PrepareModelVersionResponse:
    request = pb.PrepareModelVersionRequest(model_version=version)
    replies = []

    async def ready() -> bool:
        replies.append(await stub.PrepareModelVersion(request))
        return replies[-1].state == pb.PREPARE_STATE_READY

    await apoll_until(ready, 120, 0.1)
    return replies[-1]


async def top(stub, vector, version: str = "") -> pb.ScoredItem:
    reply = await stub.Search(pb.SearchRequest(vector=vector, k=1, model_version=version))
    return reply.items[0]


@pytest.fixture
async def retriever(built, tmp_path):
    data_dir = data_dir_for_versions(tmp_path / "data", built.directory.parents[1])
    retrained, turned = rotated_artifact(data_dir, built.version)
    service, channel, stub = await started(data_dir)
    try:
        yield data_dir, service, stub, retrained, turned
    finally:
        await channel.close()
        await service.stop(0)


async def test_a_retrained_version_searches_its_own_generation_once_prepared(retriever, built):
    _, service, stub, retrained, turned = retriever
    current = (await stub.GetInfo(pb.GetInfoRequest())).generation
    for same in (built.version, copy_version(service.domain.settings.data_dir, built.version)):
        reply = await stub.PrepareModelVersion(pb.PrepareModelVersionRequest(model_version=same))
        assert reply.state == pb.PREPARE_STATE_READY and not reply.own_generation
        assert reply.generation == current
    first = await stub.PrepareModelVersion(pb.PrepareModelVersionRequest(model_version=retrained))
    assert first.state == pb.PREPARE_STATE_BUILDING and first.own_generation
    ready = await prepared(stub, retrained)
    assert ready.own_generation and ready.generation not in ("", current)
    info = await stub.GetInfo(pb.GetInfoRequest())
    assert info.generation == current and info.model_version == built.version
    assert (info.prepared_model_version, info.prepared_generation) == (retrained, ready.generation)
    frame = pd.read_parquet(built.directory / "item_vectors.parquet")
    for row in (3, 40, 700):
        item_id = frame["item_id"][row]
        hit = await top(stub, turned[row], retrained)
        assert hit.item_id == item_id and hit.score == pytest.approx(1.0, abs=1e-3)
        # Naming no version (or another): the current generation, the build's space.
        assert (await top(stub, frame["vector"][row])).item_id == item_id
        assert (await top(stub, frame["vector"][row], "some-other-version")).item_id == item_id


async def test_writes_reach_the_prepared_generation_and_a_restart_keeps_it(retriever, built):
    data_dir, service, stub, retrained, turned = retriever
    await prepared(stub, retrained)
    vector = np.zeros(64, np.float32)
    vector[7] = 1.0
    item = pb.Item(item_id="launched-during-rollout", vector=vector, active=True)
    # The caller's vector is of the current space; the retrained version's
    # needs its item tower, and this retriever has none: refused whole.
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.UpsertItems(pb.UpsertItemsRequest(items=[item]))
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert retrained in refused.value.details()
    assert (await stub.GetItems(pb.GetItemsRequest(item_ids=[item.item_id]))).items == []
    # With the item in each generation's space (as the servicer has the item
    # tower give it), it reaches both.
    records = service.domain.to_records([to_input(item)])
    own_space = np.zeros(64, np.float32)
    own_space[9] = 1.0
    await service.domain.upsert(
        {built.version: records, retrained: [dataclasses.replace(records[0], vector=own_space)]}
    )
    hidden = pd.read_parquet(built.directory / "item_vectors.parquet")["item_id"][3]
    await stub.DeleteItems(pb.DeleteItemsRequest(item_ids=[hidden], mode=pb.DELETE_MODE_SOFT))
    for version, query in (("", vector), (retrained, own_space)):
        assert (await top(stub, query, version)).item_id == "launched-during-rollout"
    # Items embedded for the current generation only (the version was
    # prepared meanwhile): refused whole, to be sent again.
    late = service.domain.to_records([to_input(pb.Item(item_id="late", vector=vector))])
    with pytest.raises(Unavailable, match=retrained):
        await service.domain.upsert({built.version: late})
    assert (await stub.GetItems(pb.GetItemsRequest(item_ids=["late"]))).items == []
    assert (await top(stub, turned[3], retrained)).item_id != hidden
    await service.stop(0)
    again, channel, restarted = await started(data_dir)
    try:
        info = await restarted.GetInfo(pb.GetInfoRequest())
        assert info.prepared_model_version == retrained
        assert (await top(restarted, own_space, retrained)).item_id == "launched-during-rollout"
        assert (await top(restarted, turned[3], retrained)).item_id != hidden
    finally:
        await channel.close()
        await again.stop(0)


def ended_rollout(data_dir, stable: str, candidate: str, status: str) -> None:
    state = rollout_state.RolloutState(
        stable=stable, candidate=candidate, status=status, ended_at=time.time()
    )
    rollout_state.save(data_dir, state)


async def test_a_rolled_back_version_is_dropped_and_a_promoted_one_switched_to(retriever, built):
    data_dir, service, stub, retrained, turned = retriever
    preparer = service.domain.preparer
    await prepared(stub, retrained)
    ended_rollout(data_dir, built.version, retrained, "rolled_back")
    await preparer.follow_rollout()
    info = await stub.GetInfo(pb.GetInfoRequest())
    assert info.prepared_model_version == "" and info.prepared_generation == ""
    # Its users' vectors are of another space than the current generation's:
    # refused (the gateway answers with its fallback), never searched there.
    with pytest.raises(grpc.aio.AioRpcError) as dropped:
        await top(stub, turned[3], retrained)
    assert dropped.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert dropped.value.details().startswith("model_version")
    # Prepared again after that rollout ended: it is not dropped for it.
    again = await prepared(stub, retrained)
    assert (await top(stub, turned[3], retrained)).score == pytest.approx(1.0, abs=1e-3)
    await preparer.follow_rollout()
    assert (await stub.GetInfo(pb.GetInfoRequest())).prepared_model_version == retrained
    # Promoted: CURRENT names it (artifacts.promote), and its generation serves.
    artifacts.set_current(data_dir, retrained)
    assert await service.domain.refresh_from_artifacts()
    info = await stub.GetInfo(pb.GetInfoRequest())
    assert info.generation == again.generation and info.model_version == retrained
    assert info.prepared_model_version == ""
    assert (await top(stub, turned[3])).score == pytest.approx(1.0, abs=1e-3)


async def test_with_the_refresh_off_an_ended_rollouts_generation_still_goes(retriever, built):
    """Kubernetes runs retrievers with the refresh off (the init Job loads):
    they still look at the rollout, so a rolled-back candidate's generation
    is dropped by the service itself, not held until the next preparation."""
    data_dir, service, stub, retrained, _ = retriever
    assert service.domain.settings.refresh_interval_s == 0
    ready = await prepared(stub, retrained)
    ended_rollout(data_dir, built.version, retrained, "rolled_back")

    async def dropped() -> bool:
        info = await stub.GetInfo(pb.GetInfoRequest())
        return info.prepared_model_version == ""

    await apoll_until(dropped, 30, 0.2)
    assert not service.domain.generations.prepared()
    assert ready.generation not in {p.name for p in (data_dir / "qdrant" / "items").iterdir()}


async def test_preparing_an_unknown_or_malformed_version_is_refused(retriever):
    _, _, stub, _, _ = retriever
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await stub.PrepareModelVersion(pb.PrepareModelVersionRequest(model_version="nope-1"))
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as malformed:
        await stub.PrepareModelVersion(pb.PrepareModelVersionRequest(model_version="../x"))
    assert malformed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert malformed.value.details().startswith("model_version")


async def test_a_version_held_for_a_running_rollout_stays_until_that_rollout_ends(retriever, built):
    data_dir, service, stub, retrained, _ = retriever
    await prepared(stub, retrained)
    # Asked again (rollout start asks once a second), it answers from what it
    # holds: its files are not hashed again (here they no longer match).
    items = artifacts.artifacts_root(data_dir) / retrained / "item_vectors.parquet"
    items.write_bytes(b"changed after it was prepared")
    again = await stub.PrepareModelVersion(pb.PrepareModelVersionRequest(model_version=retrained))
    assert again.state == pb.PREPARE_STATE_READY and again.own_generation
    # An experiment runs with it as its second arm: preparing another
    # retrained version would take its users' items away, so it is refused.
    other, _ = rotated_artifact(data_dir, built.version, "-retrained-again", seed=6)
    copy = copy_version(data_dir, built.version)
    state = rollout_state.RolloutState(
        stable=built.version, candidate=copy, more_candidates=[retrained], status="running"
    )
    rollout_state.save(data_dir, state)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.PrepareModelVersion(pb.PrepareModelVersionRequest(model_version=other))
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert retrained in refused.value.details()
    assert (await stub.GetInfo(pb.GetInfoRequest())).prepared_model_version == retrained
    # The experiment concludes: its second arm's generation is dropped too.
    state.status, state.ended_at = "concluded", time.time()
    rollout_state.save(data_dir, state)
    await service.domain.preparer.follow_rollout()
    assert (await stub.GetInfo(pb.GetInfoRequest())).prepared_model_version == ""


async def test_writes_while_the_preparation_waits_for_its_turn_reach_it(retriever, built):
    """A refresh in progress holds the build's turn: a delete made after the
    preparation was asked for, before its build began, is in it."""
    _, service, stub, retrained, turned = retriever
    hidden = pd.read_parquet(built.directory / "item_vectors.parquet")["item_id"][3]
    async with service.domain._refresh_lock:  # as a long refresh would
        first = await stub.PrepareModelVersion(
            pb.PrepareModelVersionRequest(model_version=retrained)
        )
        assert first.state == pb.PREPARE_STATE_BUILDING
        await stub.DeleteItems(pb.DeleteItemsRequest(item_ids=[hidden], mode=pb.DELETE_MODE_HARD))
    await prepared(stub, retrained)
    assert (await top(stub, turned[3], retrained)).item_id != hidden
