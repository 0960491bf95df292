"""Filters on a catalogue's declared attributes, over real Qdrant Edge and
qdrant-client's local mode: a shop's catalogue (brand, price, tags, on sale)
loaded as a generation with a payload index per attribute; every filtered
answer checked against the items' values; upserts with attributes; bad
filters and values refused naming the field; the schema survives a restart."""

import json

import grpc
import numpy as np
import pandas as pd
import pytest

from recserve.retriever.v1 import retriever_pb2 as pb
from recserve_model.catalogue import AttributeFilter, CatalogueSchema
from services.retriever.config import RetrieverSettings
from services.retriever.domain import Retriever
from services.retriever.server import generations_for
from services.retriever.store import SearchFilter
from tests.helpers import data_dir_with_artifacts
from tests.integration.test_retriever import serving_retriever

SCHEMA = CatalogueSchema(
    {"brand": "categorical", "price": "numeric", "tags": "tags", "on_sale": "boolean"}
)
BRANDS = ("acme", "zeta", "orbit", "nova")
TAGS = ("eco", "new", "sale")
ITEMS = 400
DIM = 16


def shop(path):
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((ITEMS, DIM)).astype(np.float32)
    rows = []
    for n in range(ITEMS):
        values = {
            "brand": BRANDS[n % 4],
            "price": float(n % 50),
            "tags": [t for j, t in enumerate(TAGS) if (n >> j) & 1],
            "on_sale": n % 3 == 0,
        }
        if n % 10 == 0:
            del values["price"]  # some items have no price
        rows.append(SCHEMA.stored(values))
    frame = pd.DataFrame(
        {
            "item_id": [f"sku-{n}" for n in range(ITEMS)],
            "vector": list(vectors),
            "categories": [["shoes"] if n % 2 else ["bags"] for n in range(ITEMS)],
            "active": True,
            "title": [f"item {n}" for n in range(ITEMS)],
            "year": 0,
            "attributes": [json.dumps(r) for r in rows],
        }
    )
    frame.to_parquet(path, index=False)
    return {f"sku-{n}": rows[n] for n in range(ITEMS)}, vectors


@pytest.fixture(params=["edge", "memory"])
async def retriever(request, built, tmp_path):
    async with serving_retriever(built, tmp_path, request.param) as (stub, service):
        values, vectors = shop(tmp_path / "shop.parquet")
        await service.domain.refresh(tmp_path / "shop.parquet", "shop-1", SCHEMA)
        yield stub, service, values, vectors


def condition(name, any_of=(), low=None, high=None):
    return pb.AttributeFilter(name=name, any_of=list(any_of), min=low, max=high)


FILTERS = [
    ([condition("brand", ["acme", "nova"])], lambda v: v["brand"] in ("acme", "nova")),
    ([condition("price", low=10, high=20)], lambda v: 10 <= v.get("price", -1) <= 20),
    ([condition("price", high=4.5)], lambda v: "price" in v and v["price"] <= 4.5),
    ([condition("tags", ["eco"])], lambda v: "eco" in v["tags"]),
    ([condition("on_sale", ["true"])], lambda v: v["on_sale"] == "true"),
    (
        [condition("brand", ["zeta"]), condition("price", low=30)],
        lambda v: v["brand"] == "zeta" and v.get("price", -1) >= 30,
    ),
]


@pytest.mark.parametrize(("conditions", "wanted"), FILTERS)
async def test_every_hit_meets_every_condition_and_none_is_missed(retriever, conditions, wanted):
    stub, _, values, vectors = retriever
    matching = {i for i, v in values.items() if wanted(v)}
    assert 0 < len(matching) < ITEMS
    query = vectors[3] + vectors[11]
    flt = pb.SearchFilter(attributes=conditions)
    reply = await stub.Search(pb.SearchRequest(vector=query, k=ITEMS, filter=flt, ef=512))
    got = {i.item_id for i in reply.items}
    assert got == matching  # k covers the catalogue: exactly the matching items
    similar = await stub.SimilarItems(pb.SimilarItemsRequest(item_id="sku-3", k=10, filter=flt))
    assert similar.items and {i.item_id for i in similar.items} <= matching - {"sku-3"}


@pytest.mark.parametrize(
    ("conditions", "field", "words"),
    [
        ([condition("colour", ["red"])], "filter.attributes[0].name", "not a filterable"),
        (
            [condition("brand", ["acme"]), condition("price", ["3"])],
            "filter.attributes[1].any_of",
            "numeric",
        ),
        ([condition("price", low=9, high=1)], "filter.attributes[0].max", "below min"),
        ([condition("brand", low=1)], "filter.attributes[0].min", "categorical"),
    ],
)
async def test_a_bad_filter_is_invalid_argument_naming_the_field(
    retriever, conditions, field, words
):
    stub, _, _, vectors = retriever
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Search(
            pb.SearchRequest(vector=vectors[0], k=5, filter=pb.SearchFilter(attributes=conditions))
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in caught.value.details() and words in caught.value.details()


async def test_upserted_attributes_are_filterable_and_bad_ones_refused(retriever):
    stub, _, _, vectors = retriever
    item = pb.Item(
        item_id="sku-new",
        vector=vectors[5],
        active=True,
        attributes={
            "brand": pb.AttributeValue(keyword="lumen"),
            "price": pb.AttributeValue(number=999.5),
            "tags": pb.AttributeValue(tags=pb.TagList(values=["new"])),
        },
    )
    await stub.UpsertItems(pb.UpsertItemsRequest(items=[item]))
    flt = pb.SearchFilter(attributes=[condition("brand", ["lumen"]), condition("price", low=999)])
    reply = await stub.Search(pb.SearchRequest(vector=vectors[5], k=5, filter=flt))
    assert [i.item_id for i in reply.items] == ["sku-new"]
    for name, value, words in [
        ("colour", pb.AttributeValue(keyword="red"), "not a filterable attribute"),
        ("price", pb.AttributeValue(keyword="cheap"), "price is numeric"),
        ("brand", pb.AttributeValue(number=3), "brand is categorical"),
    ]:
        bad = pb.Item(item_id="sku-bad", vector=vectors[1], attributes={name: value})
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.UpsertItems(pb.UpsertItemsRequest(items=[bad]))
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert f"items[0].attributes['{name}']" in caught.value.details()
        assert words in caught.value.details()


async def test_the_schema_is_listed(retriever):
    stub, _, _, _ = retriever
    info = await stub.GetInfo(pb.GetInfoRequest())
    assert dict(info.filterable_attributes) == dict(SCHEMA.attributes)


async def test_the_schema_and_the_attributes_survive_a_restart(built, tmp_path):
    """Reopened from disk as a restarted retriever opens it (the Edge shard
    and state.json), before any refresh from the artifacts."""
    data_dir = data_dir_with_artifacts(tmp_path / "data", built.directory.parents[1])
    settings = RetrieverSettings(port=0, data_dir=data_dir, refresh_interval_s=0)
    values, vectors = shop(tmp_path / "shop.parquet")
    first = Retriever(settings, generations_for(settings))
    await first.refresh(tmp_path / "shop.parquet", "shop-1", SCHEMA)
    first.close()
    again = Retriever(settings, generations_for(settings))
    assert again.open_current()
    try:
        assert again.schema == SCHEMA
        flt = SearchFilter(attributes=(AttributeFilter("brand", ("orbit",)),))
        hits, _ = again.search(vectors[2], 20, flt)
        assert hits and all(values[item_id]["brand"] == "orbit" for item_id, _ in hits)
    finally:
        again.close()


async def test_get_items_answers_what_the_index_holds(retriever):
    """GetItems: each stored item (title, categories, active, attributes in
    their kinds, no vector), in request order; unknown ids left out; a
    soft-deleted item is there, inactive; a bad id is refused by name."""
    stub, _service, values, _ = retriever
    reply = await stub.GetItems(pb.GetItemsRequest(item_ids=["sku-3", "nope", "sku-0", "sku-3"]))
    assert [i.item_id for i in reply.items] == ["sku-3", "sku-0"]
    three = reply.items[0]
    assert three.title == "item 3" and list(three.categories) == ["shoes"] and three.active
    assert not three.vector
    assert three.attributes["brand"].keyword == values["sku-3"]["brand"]
    assert three.attributes["price"].number == values["sku-3"]["price"]
    assert list(three.attributes["tags"].tags.values) == values["sku-3"]["tags"]
    assert three.attributes["on_sale"].keyword == values["sku-3"]["on_sale"]
    assert "price" not in reply.items[1].attributes  # sku-0 has none
    await stub.DeleteItems(pb.DeleteItemsRequest(item_ids=["sku-3"], mode=pb.DELETE_MODE_SOFT))
    hidden = await stub.GetItems(pb.GetItemsRequest(item_ids=["sku-3"]))
    assert len(hidden.items) == 1 and not hidden.items[0].active
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.GetItems(pb.GetItemsRequest(item_ids=["ok", "bad id"]))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.details().startswith("item_ids[1]")
