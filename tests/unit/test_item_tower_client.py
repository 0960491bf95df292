"""The retriever's side of embedding items upserted without a vector, one
module against a stand-in ranker (the real path, Triton included, is in
tests/integration/test_ranker.py and tests/e2e/test_item_upserts.py): the
missing vectors are asked for in calls the ranker takes, in order, a given
vector is kept, and the ranker's refusals become the caller's."""

import grpc
import numpy as np
import pytest

from recserve.ranker.v1 import ranker_pb2 as pb
from recserve.ranker.v1 import ranker_pb2_grpc
from recserve_kit.errors import FailedPrecondition, Unavailable
from services.retriever.checks import NO_VECTOR
from services.retriever.config import RetrieverSettings
from services.retriever.item_tower import EMBED_BATCH, ItemTower
from services.retriever.store import ItemRecord

DIM = 4


class StandInRanker(ranker_pb2_grpc.RankerServiceServicer):
    def __init__(self, refuse: grpc.StatusCode | None = None) -> None:
        self.batches: list[int] = []
        self.refuse = refuse

    async def EmbedItems(self, request, context):
        if self.refuse is not None:
            await context.abort(self.refuse, "model version 'v' is not loaded")
        self.batches.append(len(request.items))
        # Each item's vector holds the number in its id, so order shows.
        numbers = [float(i.item_id.removeprefix("new-")) for i in request.items]
        vectors = np.repeat(np.asarray(numbers, dtype="<f4")[:, None], DIM, axis=1)
        return pb.EmbedItemsResponse(vectors_f32=vectors.tobytes(), dimension=DIM)


async def tower_for(servicer):
    server = grpc.aio.server()
    ranker_pb2_grpc.add_RankerServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, ItemTower(RetrieverSettings(ranker_addr=f"127.0.0.1:{port}"))


def record(item_id, vector=NO_VECTOR):
    return ItemRecord(item_id, vector, ("Drama",), True, "", 1990, {})


async def test_missing_vectors_are_embedded_in_batches_and_a_given_one_is_kept():
    ranker = StandInRanker()
    server, tower = await tower_for(ranker)
    given = np.full(DIM, 0.5, dtype=np.float32)
    records = [record(f"new-{n}") for n in range(2 * EMBED_BATCH + 500)]
    records.insert(7, record("given", given))
    try:
        done = await tower.complete(records, "v", DIM)
    finally:
        await tower.close()
        await server.stop(0)
    assert ranker.batches == [EMBED_BATCH, EMBED_BATCH, 500]
    np.testing.assert_array_equal(done[7].vector, given)
    numbers = [r.vector[0] for r in done if r.item_id != "given"]
    assert numbers == [float(n) for n in range(2 * EMBED_BATCH + 500)]


@pytest.mark.parametrize(
    ("code", "raised"),
    [
        (grpc.StatusCode.NOT_FOUND, FailedPrecondition),
        (grpc.StatusCode.FAILED_PRECONDITION, FailedPrecondition),
        (grpc.StatusCode.INVALID_ARGUMENT, FailedPrecondition),  # not worth a retry
        (grpc.StatusCode.UNAVAILABLE, Unavailable),
        (grpc.StatusCode.DEADLINE_EXCEEDED, Unavailable),
    ],
)
async def test_the_rankers_refusal_names_the_first_vector_missing(code, raised):
    server, tower = await tower_for(StandInRanker(refuse=code))
    try:
        with pytest.raises(raised, match=r"^items\[1\]\.vector is empty"):
            await tower.complete([record("x", np.ones(DIM, np.float32)), record("new-1")], "v", 4)
    finally:
        await tower.close()
        await server.stop(0)


async def test_without_a_ranker_a_missing_vector_is_refused():
    tower = ItemTower(RetrieverSettings(ranker_addr=""))
    with pytest.raises(FailedPrecondition, match="RECSERVE_RETRIEVER_RANKER_ADDR"):
        await tower.complete([record("new-1")], "v", DIM)
    assert (await tower.complete([record("x", np.ones(DIM, np.float32))], "v", DIM))[
        0
    ].item_id == "x"
