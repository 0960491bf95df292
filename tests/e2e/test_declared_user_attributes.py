"""A new user's declared attributes, by name, through Envoy (gRPC and JSON):
whatever user attributes the dataset declares pick the segment list
(cold_start.json), any subset of them given; a name the dataset does not
declare, or a value not of its kind, is INVALID_ARGUMENT naming the field."""

import json

import grpc
import pytest

from recserve.recommend.v1 import recommend_pb2 as pb
from recserve_model import artifacts
from recserve_model import segments as segment
from tests.e2e.test_recommend import post_json
from tests.helpers import asked_until, cold_start_answer

SOURCE = "FALLBACK_SOURCE_ATTRIBUTES"
COLD_START = "DEGRADED_REASON_COLD_START"


@pytest.fixture(scope="module")
def cold_start(stack):
    return json.loads((artifacts.current(stack.data_dir) / segment.FILE).read_text())


def new_user(stub, values, user_id="new-user-declared"):
    attributes = pb.UserAttributes(values=values)
    request = pb.RecommendRequest(user_id=user_id, k=10, attributes=attributes)
    return cold_start_answer(stub, request)


def ids(reply):
    return [i.item_id for i in reply.items]


def test_declared_attributes_pick_the_segment_list(stub, cold_start):
    lists = cold_start["lists"]
    assert [a["name"] for a in cold_start["attributes"]] == ["gender", "age", "occupation"]
    full = new_user(stub, {"gender": "F", "age": "22", "occupation": "student"})
    assert pb.FallbackSource.Name(full.fallback_source) == SOURCE
    assert ids(full) == lists[segment.key("F", 22, "student")][:10]
    typed = pb.UserAttributes(age=22, gender="F", occupation="student")
    same = cold_start_answer(
        stub, pb.RecommendRequest(user_id="new-user-declared", k=10, attributes=typed)
    )
    assert ids(same) == ids(full)  # the typed fields are the same three attributes
    # Any subset: the occupation alone has its own list, not the popular one.
    alone = new_user(stub, {"occupation": "retired"})
    assert pb.FallbackSource.Name(alone.fallback_source) == SOURCE
    assert ids(alone) == lists["||retired"][:10]
    plain = cold_start_answer(stub, pb.RecommendRequest(user_id="new-user-declared", k=10))
    assert ids(alone) != ids(plain)
    # A value no training user had is not given: the rest decide.
    assert ids(new_user(stub, {"gender": "M", "occupation": "astronaut"})) == lists["M||other"][:10]


def test_declared_attributes_through_json(stack, stub, cold_start):
    body = {
        "user_id": "new-user-declared-json",
        "k": 10,
        "attributes": {"values": {"gender": "M", "age": "60"}},
    }
    status, reply = asked_until(
        lambda: post_json(stack, "/v1/recommend", body),
        lambda answer: answer[0] != 200 or answer[1].get("degraded_reason") == COLD_START,
        "a cold-start answer",
    )
    assert status == 200, reply
    assert reply["fallback_source"] == SOURCE
    assert [i["item_id"] for i in reply["items"]] == cold_start["lists"]["M|6|"][:10]


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"planet": "mars"}, 'attributes.values["planet"]'),
        ({"age": "old"}, 'attributes.values["age"]'),
        ({"gender": "x" * 65}, 'attributes.values["gender"]'),
    ],
)
def test_bad_declared_attributes_are_invalid_argument(stub, values, field):
    with pytest.raises(grpc.RpcError) as raised:
        new_user(stub, values)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.details().startswith(field)
