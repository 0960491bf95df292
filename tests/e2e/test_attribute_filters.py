"""Filters on the catalogue's declared attributes, through Envoy: the demo
dataset declares `year` (numeric, filterable); every answer, full or
degraded, holds only items that meet the filter, and a bad filter is
INVALID_ARGUMENT naming the field."""

import grpc
import pandas as pd
import pytest

from recserve.recommend.v1 import recommend_pb2 as pb
from tests.e2e.test_recommend import post_json
from tests.helpers import full_answer, poll_until

NINETIES = pb.AttributeFilter(name="year", min=1990, max=1995)


@pytest.fixture(scope="module")
def year_of(built):
    items = pd.read_parquet(built.directory / "item_vectors.parquet")
    return dict(zip(items["item_id"], items["year"], strict=True))


def in_nineties(year_of, items):
    return all(1990 <= year_of[i.item_id] <= 1995 for i in items)


def test_recommend_and_similar_items_return_only_matching_items(stub, year_of):
    reply = full_answer(stub, "42", filter=pb.ItemFilter(attributes=[NINETIES]))
    assert len(reply.items) == 20 and in_nineties(year_of, reply.items)
    unfiltered = full_answer(stub, "42")
    assert not in_nineties(year_of, unfiltered.items)  # the filter changed the answer
    both = full_answer(
        stub, "42", filter=pb.ItemFilter(categories=["Comedy"], attributes=[NINETIES])
    )
    assert both.items and in_nineties(year_of, both.items)
    assert all("Comedy" in i.categories for i in both.items)
    old = pb.AttributeFilter(name="year", max=1960)
    request = pb.SimilarItemsRequest(item_id="1", k=10, filter=pb.ItemFilter(attributes=[old]))

    def full_similar():
        reply = stub.SimilarItems(request, timeout=2)
        # A degraded answer (a stage late on a busy host) honours the filter too.
        assert all(year_of[i.item_id] <= 1960 for i in reply.items)
        return None if reply.degraded else reply

    similar = poll_until(full_similar, 30, 0.2, "a full SimilarItems answer")
    assert len(similar.items) == 10


def test_a_degraded_answer_honours_the_filter_too(stub, year_of):
    new_user = pb.RecommendRequest(
        user_id="new-user-filtered", k=10, filter=pb.ItemFilter(attributes=[NINETIES])
    )
    cold = stub.Recommend(new_user, timeout=2)
    assert cold.degraded and cold.items and in_nineties(year_of, cold.items)
    new_user.attributes.CopyFrom(pb.UserAttributes(age=30, gender="F", occupation="writer"))
    listed = stub.Recommend(new_user, timeout=2)
    assert listed.degraded and listed.items and in_nineties(year_of, listed.items)


@pytest.mark.parametrize(
    ("condition", "field", "words"),
    [
        (pb.AttributeFilter(name="brand", any_of=["acme"]), "name", "not a filterable attribute"),
        (pb.AttributeFilter(name="year", any_of=["1995"]), "any_of", "year is numeric"),
        (pb.AttributeFilter(name="year"), "min", "give min, max or both"),
        (pb.AttributeFilter(name="year", min=2000, max=1990), "max", "below min"),
    ],
)
def test_a_bad_attribute_filter_is_invalid_argument_naming_the_field(stub, condition, field, words):
    request = pb.RecommendRequest(
        user_id="42", k=5, filter=pb.ItemFilter(attributes=[NINETIES, condition])
    )
    with pytest.raises(grpc.RpcError) as raised:
        stub.Recommend(request, timeout=2)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.details().startswith(f"filter.attributes[1].{field}:")
    assert words in raised.value.details()


def test_a_json_caller_filters_on_attributes(stack, stub, year_of):
    full_answer(stub)
    body = {"user_id": "42", "k": 10, "filter": {"attributes": [{"name": "year", "max": 1970}]}}

    def answered():
        status, reply = post_json(stack, "/v1/recommend", body)
        assert status == 200, reply
        return None if reply.get("degraded") else reply

    reply = poll_until(answered, 30, 0.2, "a full JSON answer")
    assert len(reply["items"]) == 10
    assert all(year_of[i["item_id"]] <= 1970 for i in reply["items"])
