"""The retriever over real Qdrant Edge (and qdrant-client's local mode, which
speaks the server backend's API): recall, filters, soft deletes, upserts,
bulk refresh under load, whole-batch validation, durability after kill -9."""

import asyncio
import os
import signal
import subprocess
import sys
from contextlib import asynccontextmanager

import grpc
import numpy as np
import pandas as pd
import pytest

from recserve.retriever.v1 import retriever_pb2 as pb
from recserve.retriever.v1 import retriever_pb2_grpc
from recserve_kit.jsonl_log import read_records
from recserve_model.catalogue import CatalogueSchema, changes_dir
from recserve_stack.probes import grpc_serving
from services.retriever.config import RetrieverSettings
from services.retriever.server import create_server
from tests.helpers import apoll_until, data_dir_with_artifacts, free_port, poll_until


@pytest.fixture(scope="module")
def items(built):
    frame = pd.read_parquet(built.directory / "item_vectors.parquet")
    return frame, np.stack(frame["vector"].to_numpy()).astype(np.float32)


@asynccontextmanager
async def serving_retriever(built, tmp_path, store: str, **overrides):
    """A started retriever over Qdrant Edge ("edge") or qdrant-client's local
    mode ("memory"), ready, with a channel to it."""
    data_dir = data_dir_with_artifacts(tmp_path / "data", built.directory.parents[1])
    settings = RetrieverSettings(
        port=0,
        data_dir=data_dir,
        shutdown_drain_s=0,
        refresh_interval_s=0,
        qdrant_url="" if store == "edge" else ":memory:",
        **overrides,
    )
    service = await create_server(settings)
    await service.start()
    await apoll_until(lambda: asyncio.sleep(0, service.domain.ready), 60)
    channel = grpc.aio.insecure_channel(service.address)
    try:
        yield retriever_pb2_grpc.RetrieverServiceStub(channel), service
    finally:
        await channel.close()
        await service.stop(0)


@pytest.fixture(params=["edge", "memory"])
async def retriever(request, built, tmp_path):
    async with serving_retriever(built, tmp_path, request.param) as (stub, service):
        yield stub, service


def exact_top(vectors, query, k, mask=None):
    scores = vectors @ (query / np.linalg.norm(query))
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    return np.argsort(-scores, kind="stable")[:k]


async def test_hnsw_recall_against_exact_search(retriever, items):
    stub, _ = retriever
    frame, vectors = items
    info = await stub.GetInfo(pb.GetInfoRequest())
    assert info.point_count == len(vectors) and info.dimension == vectors.shape[1]
    if info.backend == "qdrant-edge":
        assert info.index_state == "indexed"  # the HNSW graph, not a full scan
    rng = np.random.default_rng(0)
    recalls = []
    for _ in range(50):
        query = vectors[rng.integers(len(vectors))] + 0.3 * rng.standard_normal(vectors.shape[1])
        reply = await stub.Search(pb.SearchRequest(vector=query.astype(np.float32), k=100))
        got = {i.item_id for i in reply.items}
        expected = set(frame["item_id"].iloc[exact_top(vectors, query, 100)])
        recalls.append(len(got & expected) / 100)
    assert np.mean(recalls) >= 0.95


async def test_filters_are_always_respected(retriever, items):
    stub, _ = retriever
    frame, vectors = items
    categories = dict(zip(frame["item_id"], frame["categories"], strict=True))
    rng = np.random.default_rng(1)
    for wanted in (["Documentary"], ["Western", "Film-Noir"], ["Horror"]):
        query = vectors[rng.integers(len(vectors))]
        excluded = list(frame["item_id"].iloc[exact_top(vectors, query, 5)])
        reply = await stub.Search(
            pb.SearchRequest(
                vector=query,
                k=50,
                filter=pb.SearchFilter(categories=wanted, exclude_item_ids=excluded),
            )
        )
        assert reply.items
        for item in reply.items:
            assert set(categories[item.item_id]) & set(wanted)
            assert item.item_id not in excluded


async def test_soft_delete_hides_at_once_and_upsert_restores(retriever, items):
    stub, _ = retriever
    frame, vectors = items
    query = vectors[10]
    top = [i.item_id for i in (await stub.Search(pb.SearchRequest(vector=query, k=5))).items]
    assert top[0] == frame["item_id"].iloc[10]
    reply = await stub.DeleteItems(
        pb.DeleteItemsRequest(item_ids=top[:2], mode=pb.DELETE_MODE_SOFT)
    )
    assert reply.deleted == 2
    after = [i.item_id for i in (await stub.Search(pb.SearchRequest(vector=query, k=50))).items]
    assert not set(top[:2]) & set(after)
    similar = await stub.SimilarItems(pb.SimilarItemsRequest(item_id=top[2], k=50))
    assert not set(top[:2]) & {i.item_id for i in similar.items}
    shown = await stub.Search(
        pb.SearchRequest(vector=query, k=5, filter=pb.SearchFilter(include_inactive=True))
    )
    assert shown.items[0].item_id == top[0]
    row = frame.iloc[10]
    await stub.UpsertItems(
        pb.UpsertItemsRequest(
            items=[
                pb.Item(
                    item_id=row.item_id,
                    vector=vectors[10],
                    categories=list(row.categories),
                    active=True,
                    title=row.title,
                    year=int(row.year),
                )
            ]
        )
    )
    again = await stub.Search(pb.SearchRequest(vector=query, k=1))
    assert again.items[0].item_id == row.item_id


async def test_upsert_is_visible_to_the_next_search_and_hard_delete_removes(retriever, items):
    stub, service = retriever
    _, vectors = items
    vector = np.zeros(vectors.shape[1], dtype=np.float32)
    vector[:3] = [0.6, -0.8, 0.01]
    await stub.UpsertItems(
        pb.UpsertItemsRequest(
            items=[
                pb.Item(
                    item_id="sku-new", vector=vector, categories=["Drama"], active=True, title="New"
                )
            ]
        )
    )
    reply = await stub.Search(pb.SearchRequest(vector=vector, k=1))
    assert reply.items[0].item_id == "sku-new"
    assert (
        await stub.DeleteItems(
            pb.DeleteItemsRequest(item_ids=["sku-new", "never-existed"], mode=pb.DELETE_MODE_HARD)
        )
    ).deleted == 1
    reply = await stub.Search(
        pb.SearchRequest(vector=vector, k=1, filter=pb.SearchFilter(include_inactive=True))
    )
    assert reply.items[0].item_id != "sku-new"
    # Both changes are on disk for the next build's dataset (pipelines snapshot).
    changes = list(read_records(changes_dir(service.domain.settings.data_dir)))
    assert [(c["op"], c["item_id"]) for c in changes] == [
        ("upsert", "sku-new"),
        ("hard", "sku-new"),
        ("hard", "never-existed"),
    ]
    assert changes[0]["title"] == "New" and changes[0]["categories"] == ["Drama"]


WIDE_9000000042 = "".join(chr(0xFF10 + int(d)) for d in "9000000042")


async def test_bad_input_is_rejected_whole_with_the_field_named(retriever, items):
    stub, service = retriever
    _, vectors = items
    kept = pb.Item(item_id="9000000042", vector=vectors[1], active=True)
    await stub.UpsertItems(pb.UpsertItemsRequest(items=[kept]))
    good = pb.Item(item_id="ok-1", vector=vectors[0], active=True)
    bad = pb.Item(item_id="bad-1", vector=vectors[0][:10], active=True)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.UpsertItems(pb.UpsertItemsRequest(items=[good, bad]))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "items[1].vector" in raised.value.details()
    reply = await stub.Search(pb.SearchRequest(vector=vectors[0], k=3))
    assert "ok-1" not in {i.item_id for i in reply.items}
    cases = [
        (stub.Search, pb.SearchRequest(vector=vectors[0], k=0), "k"),
        (stub.Search, pb.SearchRequest(vector=vectors[0], k=1001), "k"),
        (stub.Search, pb.SearchRequest(vector=[1.0, 2.0], k=5), "vector"),
        (stub.Search, pb.SearchRequest(vector=[float("nan")] * vectors.shape[1], k=5), "vector"),
        (stub.DeleteItems, pb.DeleteItemsRequest(item_ids=["1"]), "mode"),
        (stub.DeleteItems, pb.DeleteItemsRequest(mode=pb.DELETE_MODE_SOFT), "item_ids"),
        (stub.UpsertItems, pb.UpsertItemsRequest(items=[good, good]), "items[1].item_id"),
        # Wide digits once deleted item 9000000042; "\u2460" crashed.
        (
            stub.DeleteItems,
            pb.DeleteItemsRequest(item_ids=[WIDE_9000000042], mode=pb.DELETE_MODE_HARD),
            "item_ids[0]",
        ),
        (stub.SimilarItems, pb.SimilarItemsRequest(item_id="\u2460", k=5), "item_id"),
    ]
    for call, request, field in cases:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await call(request)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT, field
        assert raised.value.details().startswith(field), raised.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.SimilarItems(pb.SimilarItemsRequest(item_id="no-such-item", k=5))
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    # A refused call records no change for the next build's dataset: only
    # the one upsert that was taken is there.
    changes = list(read_records(changes_dir(service.domain.settings.data_dir)))
    assert [(c["op"], c["item_id"]) for c in changes] == [("upsert", "9000000042")]
    # Nothing was deleted by the refused wide-digit id, and a Unicode exclusion
    # cannot crash a search (it never matches a decimal point id).
    similar = await stub.SimilarItems(pb.SimilarItemsRequest(item_id="9000000042", k=3))
    assert len(similar.items) == 3
    odd = pb.SearchFilter(exclude_item_ids=["\u00b2", "\u0664\u0662"])
    assert len((await stub.Search(pb.SearchRequest(vector=vectors[0], k=5, filter=odd))).items) == 5


async def test_an_item_without_a_vector_and_no_item_tower_is_refused_whole(retriever, items):
    """Without a ranker to embed with (RECSERVE_RETRIEVER_RANKER_ADDR unset),
    a vector-less item is FAILED_PRECONDITION and nothing of its batch is kept."""
    stub, _ = retriever
    _, vectors = items
    good = pb.Item(item_id="with-vector", vector=vectors[0], active=True)
    bare = pb.Item(item_id="no-vector", categories=["Drama"], active=True)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.UpsertItems(pb.UpsertItemsRequest(items=[good, bare]))
    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert raised.value.details().startswith("items[1].vector is empty")
    for item_id in ("with-vector", "no-vector"):
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await stub.SimilarItems(pb.SimilarItemsRequest(item_id=item_id, k=1))
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND


async def test_similar_items_exclude_the_item_itself(retriever, items):
    stub, _ = retriever
    frame, _ = items
    reply = await stub.SimilarItems(pb.SimilarItemsRequest(item_id=frame["item_id"].iloc[0], k=10))
    assert len(reply.items) == 10
    assert frame["item_id"].iloc[0] not in {i.item_id for i in reply.items}


async def test_bulk_refresh_under_concurrent_searches_causes_no_error(retriever, items, built):
    stub, service = retriever
    _, vectors = items
    before = (await stub.GetInfo(pb.GetInfoRequest())).generation
    stop = asyncio.Event()
    counts = {"searches": 0}
    written = []

    async def search_loop(seed):
        rng = np.random.default_rng(seed)
        while not stop.is_set():
            reply = await stub.Search(
                pb.SearchRequest(vector=vectors[rng.integers(len(vectors))], k=20)
            )
            assert len(reply.items) == 20
            counts["searches"] += 1

    async def upsert_loop():
        n = 0
        while not stop.is_set():
            item_id = f"during-refresh-{n}"
            await stub.UpsertItems(
                pb.UpsertItemsRequest(
                    items=[pb.Item(item_id=item_id, vector=vectors[n], active=True)]
                )
            )
            written.append(item_id)
            n += 1
            await asyncio.sleep(0.005)

    loops = [asyncio.create_task(search_loop(s)) for s in range(4)] + [
        asyncio.create_task(upsert_loop())
    ]
    schema = CatalogueSchema.load(built.directory)
    await service.domain.refresh(built.directory / "item_vectors.parquet", built.version, schema)
    stop.set()
    await asyncio.gather(*loops)
    info = await stub.GetInfo(pb.GetInfoRequest())
    assert info.generation != before
    assert counts["searches"] > 0 and written
    assert info.point_count == len(vectors) + len(written)


async def test_a_build_that_was_killed_does_not_block_the_next(retriever, built):
    """What a killed bulk build leaves (the next generation's store, never
    published) is cleared by the next refresh, which then succeeds."""
    stub, service = retriever
    domain = service.domain
    before = (await stub.GetInfo(pb.GetInfoRequest())).generation
    leftover = domain.generations.create(domain.generations.next_name(), domain.dimension)
    leftover.close()  # as a SIGKILL mid-build leaves it: on disk, unpublished
    schema = CatalogueSchema.load(built.directory)
    name = await domain.refresh(built.directory / "item_vectors.parquet", built.version, schema)
    info = await stub.GetInfo(pb.GetInfoRequest())
    assert info.generation == name != before and info.point_count > 0


def test_acknowledged_writes_survive_kill_9(built, tmp_path):
    data_dir = data_dir_with_artifacts(tmp_path / "data", built.directory.parents[1])
    port = free_port()
    env = {
        **os.environ,
        "RECSERVE_RETRIEVER_PORT": str(port),
        "RECSERVE_RETRIEVER_DATA_DIR": str(data_dir),
    }
    address = f"127.0.0.1:{port}"

    def start():
        process = subprocess.Popen(
            [sys.executable, "-m", "services.retriever"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        poll_until(lambda: asyncio.run(grpc_serving(address)), 120, 0.1, "retriever SERVING")
        return process

    process = start()
    vector = np.zeros(64, dtype=np.float32)
    vector[5] = 1.0
    with grpc.insecure_channel(address) as channel:
        stub = retriever_pb2_grpc.RetrieverServiceStub(channel)
        stub.UpsertItems(
            pb.UpsertItemsRequest(items=[pb.Item(item_id="durable", vector=vector, active=True)])
        )
        stub.DeleteItems(pb.DeleteItemsRequest(item_ids=["1"], mode=pb.DELETE_MODE_SOFT))
    process.send_signal(signal.SIGKILL)
    process.wait()
    process = start()
    try:
        with grpc.insecure_channel(address) as channel:
            stub = retriever_pb2_grpc.RetrieverServiceStub(channel)
            assert stub.Search(pb.SearchRequest(vector=vector, k=1)).items[0].item_id == "durable"
            hidden = stub.SimilarItems(pb.SimilarItemsRequest(item_id="2", k=1000)).items
            assert "1" not in {i.item_id for i in hidden}
    finally:
        process.terminate()
        process.wait(30)


def test_the_index_step_loads_once_and_leaves_a_running_retrievers_shard_alone(built, tmp_path):
    """`python -m services.retriever index` (compose.local.yaml's first step) builds
    the Edge shard the retriever then opens; run again while a retriever
    holds the shard (its WAL is locked), it must find the artifact current
    and not open it: a second `docker-compose up` failed that way."""
    from services.retriever.domain import Retriever
    from services.retriever.server import generations_for

    data_dir = data_dir_with_artifacts(tmp_path / "data", built.directory.parents[1])
    command = [sys.executable, "-m", "services.retriever", "index", "--data-dir", str(data_dir)]
    first = subprocess.run(command, capture_output=True, text=True, check=True)
    assert f"loaded ({built.version})" in first.stderr
    settings = RetrieverSettings(data_dir=data_dir)
    running = Retriever(settings, generations_for(settings))
    assert running.open_current() and running.artifact_version == built.version
    try:
        again = subprocess.run(command, capture_output=True, text=True)
        assert again.returncode == 0, again.stderr
        assert f"already current ({built.version})" in again.stderr
        assert running.info().point_count > 0  # still serving its shard
    finally:
        running.close()
