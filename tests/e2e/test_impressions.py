"""Every answer through Envoy carries a recommendation_id, and what it showed
lands in the impression log under it: items in order, model version, arm,
surface, degraded or not."""

import re

import grpc
import pytest

from recserve.recommend.v1 import recommend_pb2 as pb
from recserve_kit.jsonl_log import read_records
from tests.helpers import cold_start_answer, full_answer, poll_until

# The log is under the local stack's data directory (Compose keeps it in its volume).
pytestmark = pytest.mark.local_stack_only


def impression(stack, recommendation_id):
    directory = stack.data_dir / "events" / "impressions"

    def found():
        if not directory.exists():
            return None
        matching = [
            r for r in read_records(directory) if r["recommendation_id"] == recommendation_id
        ]
        assert len(matching) <= 1
        return matching[0] if matching else None

    return poll_until(found, 10, 0.1, f"the impression of {recommendation_id}")


def test_a_full_answer_is_recorded_as_shown(stack, stub):
    reply = full_answer(stub, "42", k=10, surface="home")
    assert re.fullmatch(r"[0-9a-f]{32}", reply.recommendation_id)
    shown = impression(stack, reply.recommendation_id)
    assert shown["items"] == [i.item_id for i in reply.items]
    assert shown["kind"] == "recommend" and shown["user_id"] == "42"
    assert shown["surface"] == "home" and shown["model_version"] == reply.model_version
    assert shown["degraded"] is False and shown["arm"] == ""  # no rollout running
    again = full_answer(stub, "42", k=10)
    assert again.recommendation_id != reply.recommendation_id
    assert impression(stack, again.recommendation_id)["surface"] == "default"


def test_similar_items_and_degraded_answers_are_recorded_too(stack, stub):
    similar = stub.SimilarItems(pb.SimilarItemsRequest(item_id="1", k=5), timeout=2)
    shown = impression(stack, similar.recommendation_id)
    assert shown["kind"] == "similar" and shown["item_id"] == "1"
    assert shown["items"] == [i.item_id for i in similar.items]
    cold = cold_start_answer(stub, pb.RecommendRequest(user_id="impression-new-user", k=5))
    shown = impression(stack, cold.recommendation_id)
    assert shown["degraded"] is True and shown["degraded_reason"] == "COLD_START"
    assert shown["fallback_source"] == "POPULAR" and len(shown["items"]) == 5


def test_a_bad_surface_is_invalid_argument(stub):
    with pytest.raises(grpc.RpcError) as raised:
        stub.Recommend(pb.RecommendRequest(user_id="42", k=5, surface="home page"), timeout=2)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.details().startswith("surface:")
