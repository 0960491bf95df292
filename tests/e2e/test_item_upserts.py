"""Items upserted without a vector, through Envoy's admin route: the stack
embeds each with the item tower (the ranker's EmbedItems, in Triton), so a
new product is found by SimilarItems and by a Recommend it fits at once, and
it is still there after the retriever restarts. A vector the caller gives
is used as it is."""

import time

import grpc
import numpy as np
import pandas as pd
import pytest

from recserve.recommend.v1 import recommend_pb2 as pb
from recserve.recommend.v1 import recommend_pb2_grpc
from recserve.retriever.v1 import retriever_pb2 as rpb
from recserve.retriever.v1 import retriever_pb2_grpc
from tests.e2e.test_events import token
from tests.helpers import full_answer, poll_until

ADDED = ["launch-1", "launch-2", "launch-3"]
# No item of the demo's catalogue is from after 1998.
LAUNCHED = pb.ItemFilter(attributes=[pb.AttributeFilter(name="year", min=2020)])


@pytest.fixture(scope="module")
def admin(stack):
    return [("authorization", f"Bearer {token(stack, 'admin')}")]


@pytest.fixture(scope="module", autouse=True)
def removed_afterwards(channel, admin):
    """The items these tests add are hard-deleted after them: the stack is
    shared, and later tests check answers against the built catalogue."""
    yield
    retriever = retriever_pb2_grpc.RetrieverServiceStub(channel)
    request = rpb.DeleteItemsRequest(item_ids=ADDED, mode=rpb.DELETE_MODE_HARD)
    retriever.DeleteItems(request, metadata=admin, timeout=30)


def similar(channel, item_id, k=10, **fields):
    """A full SimilarItems answer (a busy host may degrade one; a gateway
    whose retriever follows the writer's may not have the item for the
    milliseconds its change feed takes to reach it)."""
    stub = recommend_pb2_grpc.RecommendServiceStub(channel)

    def attempt():
        try:
            request = pb.SimilarItemsRequest(item_id=item_id, k=k, **fields)
            reply = stub.SimilarItems(request, timeout=2)
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.NOT_FOUND:
                raise
            return None
        return None if reply.degraded else reply

    return poll_until(attempt, 60, 0.2, f"a full SimilarItems answer for {item_id}")


def test_an_item_without_a_vector_is_served_at_once_and_survives_a_restart(stack, channel, admin):
    retriever = retriever_pb2_grpc.RetrieverServiceStub(channel)
    stub = recommend_pb2_grpc.RecommendServiceStub(channel)
    item = rpb.Item(
        item_id="launch-1",
        title="A film launched today",
        categories=["Comedy"],
        year=2026,
        active=True,
        attributes={"year": rpb.AttributeValue(number=2026)},
    )
    started = time.monotonic()
    reply = retriever.UpsertItems(rpb.UpsertItemsRequest(items=[item]), metadata=admin, timeout=30)
    assert reply.upserted == 1
    neighbours = similar(channel, "launch-1")
    answer = full_answer(stub, "42", k=5, filter=LAUNCHED)
    print(f"upsert to served: {time.monotonic() - started:.3f} s")  # measured, not asserted
    assert len(neighbours.items) == 10 and "launch-1" not in {i.item_id for i in neighbours.items}
    assert [i.item_id for i in answer.items] == ["launch-1"]
    # Its title and categories come from the retriever that stores them (the
    # features service knows the item only from the next build).
    assert (answer.items[0].title, list(answer.items[0].categories)) == (item.title, ["Comedy"])

    retriever = stack.process_of("services.retriever")
    before = stack.component_pid(retriever)
    stack.kill(retriever)

    def restarted():
        pids = stack.component_pids(retriever)
        return pids and all(pids) and before not in pids

    poll_until(restarted, 60, 0.2, "the runner to restart the retriever")
    stack.wait_whole()
    # Warm again before asserting, and before the tests after these: a just
    # restarted retriever answers its first searches late on a busy host.
    poll_until(
        lambda: all(not stub.Recommend(pb.RecommendRequest(user_id=u, k=10), timeout=2).degraded
                    for u in ("1", "2", "3", "4", "5")),
        60, 0.2, "five full answers in a row after the restart",
    )  # fmt: skip
    again = similar(channel, "launch-1")
    assert [i.item_id for i in again.items] == [i.item_id for i in neighbours.items]
    after = full_answer(stub, "42", k=5, filter=LAUNCHED).items
    assert [(i.item_id, i.title) for i in after] == [("launch-1", item.title)]


def test_a_vector_the_caller_gives_wins(stack, built, channel, admin):
    """The same item twice, once with item 1's stored vector: its nearest
    neighbour is item 1 itself, at a similarity of 1."""
    stored = pd.read_parquet(built.directory / "item_vectors.parquet").set_index("item_id")
    vector = np.asarray(stored.loc["1", "vector"], dtype=np.float32)
    retriever = retriever_pb2_grpc.RetrieverServiceStub(channel)
    item = rpb.Item(
        item_id="launch-2", vector=vector, categories=["Horror"], year=1950, active=True
    )
    retriever.UpsertItems(rpb.UpsertItemsRequest(items=[item]), metadata=admin, timeout=30)
    top = similar(channel, "launch-2", k=1).items[0]
    assert top.item_id == "1" and top.score == pytest.approx(1.0, abs=1e-4)


def test_a_bad_item_without_a_vector_is_refused_whole(stack, channel, admin):
    retriever = retriever_pb2_grpc.RetrieverServiceStub(channel)
    good = rpb.Item(item_id="launch-3", categories=["Drama"], active=True)
    bad = rpb.Item(item_id="launch 4", categories=["Drama"], active=True)
    with pytest.raises(grpc.RpcError) as refused:
        retriever.UpsertItems(rpb.UpsertItemsRequest(items=[good, bad]), metadata=admin, timeout=30)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "items[1].item_id" in refused.value.details()
    stub = recommend_pb2_grpc.RecommendServiceStub(channel)

    def refused_as_unknown() -> grpc.StatusCode | None:
        """NOT_FOUND once the retriever answers in time (a late one degrades)."""
        try:
            reply = stub.SimilarItems(pb.SimilarItemsRequest(item_id="launch-3", k=5), timeout=5)
        except grpc.RpcError as missing:
            return missing.code()
        assert reply.degraded, "launch-3 was written"
        return None

    assert poll_until(refused_as_unknown, 30, 0.2, "launch-3 unknown") == grpc.StatusCode.NOT_FOUND
