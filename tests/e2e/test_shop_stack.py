"""A marketplace served end to end, through Envoy: a generated shop (brands,
prices, inactive products, shoppers with a region and nothing else; views,
clicks, carts, purchases; staples bought again, ``repeat: true``) built
through the same pipeline, through the quality gate (its list beats
popularity, item-kNN, EASE and "buy again by frequency" on the split), and
served by the same runner as `make run`: live, at least as good as the
best baseline, the shopper's own staples among the candidates. Recommend and
SimilarItems filtered on brand and a price range return only matching
products; a new shopper's declared region picks their list; bad filters
name the field."""

import json

import grpc
import numpy as np
import pandas as pd
import pytest

from bench.quality import compare
from recserve.features.v1 import features_pb2 as fpb
from recserve.features.v1 import features_pb2_grpc
from recserve.ranker.v1 import ranker_pb2 as rpb
from recserve.ranker.v1 import ranker_pb2_grpc
from recserve.recommend.v1 import recommend_pb2 as pb
from recserve.recommend.v1 import recommend_pb2_grpc
from recserve_data import load
from recserve_model import artifacts
from recserve_model import segments as segment
from recserve_model.encoding import EncodingSpec
from tests.helpers import (
    a_shopper,
    brand_and_price,
    built_shop,
    cold_start_answer,
    full_answer,
    poll_until,
)
from tests.stack import running_stack

pytestmark = pytest.mark.local_stack_only


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    dataset, data_dir = built_shop(tmp_path_factory.mktemp("shop-stack"), seed=3)
    with running_stack(data_dir) as stack:
        channel = grpc.insecure_channel(stack.envoy_address)
        yield stack, recommend_pb2_grpc.RecommendServiceStub(channel), load(dataset)
        channel.close()


def test_recommend_filtered_on_brand_and_price_returns_only_matching_products(shop):
    _, stub, source = shop
    item_filter, meets = brand_and_price(source)
    user = a_shopper(source)
    unfiltered = full_answer(stub, user, k=10)
    assert len(unfiltered.items) == 10 and all(i.title for i in unfiltered.items)
    assert not all(meets(i.item_id) for i in unfiltered.items)  # the filter has work to do
    filtered = full_answer(stub, user, k=10, filter=item_filter)
    assert filtered.items and all(meets(i.item_id) for i in filtered.items)
    assert filtered.model_version.startswith("shop-")
    inactive = set(source.items.loc[~source.items["active"], "item_id"])
    assert not inactive & {i.item_id for i in unfiltered.items}


def test_a_shoppers_staples_come_back_in_their_list(shop):
    """Items are bought again here: the shopper's own items are candidates
    (the repeat source), so the heaviest shopper's list holds some of what
    they bought; a filter that rules those out rules them out."""
    _, stub, source = shop
    user = a_shopper(source)
    events = source.interactions
    bought = set(
        events.loc[(events["user_id"] == user) & (events["event_type"] != "view"), "item_id"]
    )
    listed = [i.item_id for i in full_answer(stub, user, k=20).items]
    again = [item for item in listed if item in bought]
    assert again, listed
    excluded = full_answer(stub, user, k=20, filter=pb.ItemFilter(exclude_item_ids=again))
    assert not set(again) & {i.item_id for i in excluded.items}


def test_similar_items_filtered_on_brand_and_price(shop):
    _, stub, source = shop
    item_filter, meets = brand_and_price(source)
    seed_item = str(source.interactions["item_id"].value_counts().index[0])
    request = pb.SimilarItemsRequest(item_id=seed_item, k=10, filter=item_filter)

    def full():
        reply = stub.SimilarItems(request, timeout=2)
        assert all(meets(i.item_id) for i in reply.items)  # degraded or not
        return None if reply.degraded else reply

    reply = poll_until(full, 30, 0.2, "a full SimilarItems answer")
    assert reply.items and seed_item not in {i.item_id for i in reply.items}


def test_a_new_shoppers_region_picks_their_list(shop):
    stack, stub, _ = shop
    document = json.loads((artifacts.current(stack.data_dir) / segment.FILE).read_text())
    assert [a["name"] for a in document["attributes"]] == ["region"]
    for region in ("north", "south"):
        attributes = pb.UserAttributes(values={"region": region})
        reply = cold_start_answer(
            stub, pb.RecommendRequest(user_id=f"new-shopper-{region}", k=10, attributes=attributes)
        )
        assert pb.FallbackSource.Name(reply.fallback_source) == "FALLBACK_SOURCE_ATTRIBUTES"
        assert [i.item_id for i in reply.items] == document["lists"][region][:10]
    with pytest.raises(grpc.RpcError) as raised:
        stub.Recommend(
            pb.RecommendRequest(
                user_id="new-shopper", k=10, attributes=pb.UserAttributes(values={"age": "30"})
            ),
            timeout=2,
        )
    assert raised.value.details().startswith('attributes.values["age"]')  # the shop has none


def test_the_live_lists_equal_the_offline_ones_with_the_declared_attributes(shop):
    """The towers and the ranker read brand, price and region; the live
    stack's lists equal the offline evaluation's (within 1%) only if those
    reach the ranker the way the build encoded them: each product's from
    the features service's catalogue, each shopper's with their features."""
    stack, _, _ = shop
    result = compare(stack.envoy_address, stack.data_dir)
    assert result["users"] > 250 and result["degraded_answers"] == 0
    for metric, difference in result["relative_difference"].items():
        assert abs(difference) <= 0.01, (metric, result["offline"], result["live"])
    # A young shop is served a list no count beats: live, on the same users.
    assert set(result["baselines"]) >= {"popularity", "item_knn", "ease", "buy_again"}
    for name, figures in result["baselines"].items():
        assert result["live"]["ndcg@10"] >= figures["ndcg@10"], (name, result["live"], figures)
    spec = EncodingSpec.load(artifacts.current(stack.data_dir) / "encoding.json")
    assert [a["name"] for a in spec.user_attributes] == ["region"]


def test_the_ranker_reads_the_declared_attributes_from_the_live_features(shop):
    """A shopper's region comes with their features; each product's brand
    and price reach the ranker's catalogue from the features service, so a
    known product sent bare to the item tower is embedded as the build
    indexed it, and under another brand it is not."""
    stack, _, source = shop
    shopper = a_shopper(source)
    features = features_pb2_grpc.FeatureServiceStub(stack.internal_channel("features"))
    user = features.GetUserFeatures(fpb.GetUserFeaturesRequest(user_id=shopper), timeout=5).user
    assert dict(user.attributes) == {
        "region": source.users.set_index("user_id").loc[shopper, "region"]
    }
    indexed = pd.read_parquet(artifacts.current(stack.data_dir) / "item_vectors.parquet")
    row = indexed.iloc[0]
    ranker = ranker_pb2_grpc.RankerServiceStub(stack.internal_channel("ranker"))
    bare = fpb.ItemFeatures(item_id=row["item_id"], categories=list(row["categories"]), found=True)
    moved = fpb.ItemFeatures()
    moved.CopyFrom(bare)
    moved.attributes["brand"] = "another-brand"
    moved.attributes["price"] = "99999"
    reply = ranker.EmbedItems(rpb.EmbedItemsRequest(items=[bare, moved]), timeout=5)
    own, other = np.frombuffer(reply.vectors_f32, "<f4").reshape(2, reply.dimension)
    np.testing.assert_allclose(own, row["vector"], atol=1e-4)
    assert np.abs(own - other).max() > 1e-3


@pytest.mark.parametrize(
    ("condition", "field"),
    [
        (pb.AttributeFilter(name="colour", any_of=["red"]), "filter.attributes[0].name"),
        (pb.AttributeFilter(name="brand", min=1), "filter.attributes[0]"),
        (pb.AttributeFilter(name="price", any_of=["cheap"]), "filter.attributes[0]"),
    ],
)
def test_bad_filters_on_the_shops_attributes_name_the_field(shop, condition, field):
    _, stub, source = shop
    request = pb.RecommendRequest(
        user_id=a_shopper(source), k=5, filter=pb.ItemFilter(attributes=[condition])
    )
    with pytest.raises(grpc.RpcError) as raised:
        stub.Recommend(request, timeout=2)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.details().startswith(field)
