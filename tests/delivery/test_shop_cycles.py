"""A generated shop's stack through two nightly cycles in a row, each
promoted by the guardrail: on the first night a shopper who was in no
export buys products through Envoy, one of them a product upserted with
the shop's own attributes and no vector; on the second night another
newcomer arrives. Each cycle snapshots the shop (not the demo), builds a
candidate through the shop's gate, rolls it out under simulated shoppers
clicking in the shop's own event type, and promotes it; after the second,
both newcomers have stored vectors of the newest version, the upserted
product keeps its learned row and its attributes, and every report beside
its artifact says what was learned from the start."""

from __future__ import annotations

import json

import grpc
import pandas as pd
import pytest

from bench.simulate import held_out_futures, rating_type
from pipelines.build import build
from pipelines.dataset import artifact_dataset
from pipelines.shop import ShopSize, write_shop
from recserve.retriever.v1 import retriever_pb2 as rpb
from recserve.retriever.v1 import retriever_pb2_grpc
from recserve_data import load
from recserve_model import artifacts
from recserve_model.encoding import EncodingSpec
from tests.delivery.cycles import GUARDED, newcomer_events, retrain, users_until_it_ends
from tests.e2e.test_events import token
from tests.helpers import a_shopper
from tests.stack import running_stack

pytestmark = [pytest.mark.long, pytest.mark.usefixtures("no_cycle_left")]
PURCHASE = ("purchase", 0.0)
UPSERTED = "night-one-product"
NOISE = 0.1  # each other product shown is clicked with this chance


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    root = tmp_path_factory.mktemp("shop-cycles")
    size = ShopSize(items=400, users=300, events=60_000)
    dataset = write_shop(root / "dataset", size, seed=11)
    data_dir = root / "data"
    build(data_dir, dataset_dir=dataset)  # through the gate, or QualityGateError
    with running_stack(data_dir) as stack:
        yield stack, load(dataset), dataset


@pytest.fixture
def stack(shop):
    return shop[0]


def upsert_a_product(stack, source, item_id: str) -> rpb.Item:
    """A product with the shop's attributes (a brand it sells, a price) and
    no vector, through Envoy's admin route."""
    row = source.items[source.items["active"]].iloc[0]
    item = rpb.Item(
        item_id=item_id, title="A product the export never had",
        categories=list(row["categories"]), active=True,
        attributes={"brand": rpb.AttributeValue(keyword=str(row["brand"])),
                    "price": rpb.AttributeValue(number=4.5)},
    )  # fmt: skip
    admin = [("authorization", f"Bearer {token(stack, 'admin')}")]
    with grpc.insecure_channel(stack.envoy_address) as channel:
        retriever = retriever_pb2_grpc.RetrieverServiceStub(channel)
        request = rpb.UpsertItemsRequest(items=[item])
        assert retriever.UpsertItems(request, metadata=admin, timeout=30).upserted == 1
    return item


def night(stack) -> dict:
    """One cycle under simulated shoppers; its report, once promoted."""
    current = artifacts.current(stack.data_dir)
    futures = held_out_futures(stack.data_dir / "raw", artifact_dataset(current))
    cycle = retrain(stack, *GUARDED)
    # A shopper's future here is a few products, soon bought and then never
    # shown again: without other clicks both arms' conversion falls to a few
    # percent, where the guardrail's plan (a 50% baseline) cannot decide.
    _, report = users_until_it_ends(
        stack, futures, cycle, event=rating_type(current), p_noise=NOISE
    )
    assert report["outcome"] == "promoted", report
    assert report["version"] != current.name
    assert artifacts.current(stack.data_dir).name == report["version"]
    beside = artifacts.artifacts_root(stack.data_dir) / report["version"] / "retrain.json"
    assert json.loads(beside.read_text()) == report
    return report


def stored_vector_versions(stack, version: str) -> dict[str, str]:
    directory = artifacts.artifacts_root(stack.data_dir) / version
    vectors = pd.read_parquet(directory / "features" / "user_vectors.parquet")
    return dict(zip(vectors["user_id"], vectors["model_version"], strict=True))


def test_two_nights_in_a_row_learn_the_shops_newcomers_and_are_promoted(shop):
    stack, source, export_dir = shop
    export = artifacts.current(stack.data_dir).name
    assert export.startswith("shop-")
    products = sorted(source.items.loc[source.items["active"], "item_id"])
    upserted = upsert_a_product(stack, source, UPSERTED)
    newcomer_events(stack, "night-one-shopper", products[:20], (UPSERTED,), PURCHASE)

    first = night(stack)
    learned = first["learned"]
    assert learned["new_users"] == 1 and learned["new_items"] == 1, learned
    assert first["gate"]["ranked"]["ndcg@10"] > 0
    assert set(first["steps"]) == {"compact", "snapshot", "build", "rollout"}, first["steps"]
    assert learned["export"] == str(export_dir), learned  # the shop's, not the demo's
    built_from = artifact_dataset(artifacts.current(stack.data_dir))
    assert built_from is not None and built_from.parent == stack.data_dir / "snapshots"
    versions = stored_vector_versions(stack, first["version"])
    assert versions["night-one-shopper"] == first["version"]

    newcomer_events(stack, "night-two-shopper", products[20:40], event=PURCHASE)
    second = night(stack)
    assert second["version"] not in (export, first["version"])
    # Counted from the export: both nights' newcomers, the first night's product.
    learned = second["learned"]
    assert learned["new_users"] == 2 and learned["new_items"] == 1, learned
    assert learned["events_used"] > first["learned"]["events_used"], (first, second)
    versions = stored_vector_versions(stack, second["version"])
    assert versions["night-one-shopper"] == versions["night-two-shopper"] == second["version"]
    assert versions[a_shopper(source)] == second["version"]
    directory = artifacts.artifacts_root(stack.data_dir) / second["version"]
    assert UPSERTED in EncodingSpec.load(directory / "encoding.json").item_ids
    listed = pd.read_parquet(directory / "item_vectors.parquet").set_index("item_id")
    assert listed.loc[UPSERTED, "active"]
    snapshot = load(artifact_dataset(directory))
    kept = snapshot.items.set_index("item_id").loc[UPSERTED]
    assert kept["brand"] == upserted.attributes["brand"].keyword and kept["price"] == 4.5
