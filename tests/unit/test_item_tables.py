"""The live item copies off the request path: the features service's
catalogue (what watchers get) and the ranker's encoded table."""

import asyncio

import numpy as np

from recserve.features.v1 import features_pb2 as fpb
from recserve_model.encoding import Encoder, EncodingSpec
from services.features import catalogue as catalogue_module
from services.features.catalogue import Catalogue
from services.features.domain import ItemRecord
from services.ranker.item_table import ItemTable


def record(item_id: str, popularity: int = 1) -> ItemRecord:
    return ItemRecord(item_id, True, title=f"t{item_id}", popularity=popularity)


async def test_a_watcher_gets_everything_then_each_change_in_order():
    catalogue: Catalogue[ItemRecord] = Catalogue()
    catalogue.replace([record("1"), record("2")], "v1")
    watch = catalogue.watch()
    first = await anext(watch)
    assert first.reset and [r.item_id for r in first.records] == ["1", "2"]
    catalogue.update([record("2", 5)])
    catalogue.replace([record("3")], "v2")
    change = await anext(watch)
    assert not change.reset and change.records == [record("2", 5)]
    listing = await anext(watch)
    assert listing.reset and listing.version == "v2" and listing.records == [record("3")]
    await watch.aclose()
    assert catalogue.watchers == 0


async def test_a_watcher_that_falls_behind_gets_the_whole_catalogue_again(monkeypatch):
    monkeypatch.setattr(catalogue_module, "MAX_PENDING", 2)
    catalogue: Catalogue[ItemRecord] = Catalogue()
    catalogue.replace([record("1")], "v1")
    watch = catalogue.watch()
    await anext(watch)
    for n in range(5):  # more than the watcher's queue holds
        catalogue.update([record("1", 10 + n)])
    received = [await anext(watch) for _ in range(2)]
    # Queued changes first, then everything as it is now instead of the lost ones.
    assert [r.reset for r in received] == [False, True]
    assert received[-1].records == [record("1", 14)]
    catalogue.update([record("1", 99)])
    assert (await asyncio.wait_for(anext(watch), 1)).records == [record("1", 99)]
    await watch.aclose()


def spec() -> EncodingSpec:
    return EncodingSpec(["10", "11", "12"], ["Comedy", "Drama"], ["doctor"], 4)


def item(item_id: str, popularity: int, genres=("Drama",)) -> fpb.ItemFeatures:
    return fpb.ItemFeatures(
        item_id=item_id,
        found=True,
        year=1995,
        popularity=popularity,
        mean_rating=3.5,
        categories=list(genres),
    )


def test_item_table_gathers_encoded_rows_and_follows_changes():
    encoder = Encoder(spec())
    table = ItemTable()
    table.replace([item("10", 5), item("11", 7, ("Comedy",))], "v1")
    ids = ["11", "unknown", "10"]
    got = table.features(encoder, ids)
    assert got.shape == (3, encoder.spec.item_dim)
    np.testing.assert_array_equal(got[0], encoder.item(1995, 7, 3.5, ["Comedy"]))
    np.testing.assert_array_equal(got[1], np.zeros(encoder.spec.item_dim))  # as before: zeros
    table.update([item("10", 500), *(item(f"new{n}", n) for n in range(10))])  # grows
    got = table.features(encoder, ["10", "new9"])
    np.testing.assert_array_equal(got[0], encoder.item(1995, 500, 3.5, ["Drama"]))
    np.testing.assert_array_equal(got[1], encoder.item(1995, 9, 3.5, ["Drama"]))
    assert table.get("10").popularity == 500 and table.get("unknown") is None  # EmbedItems' stats
    table.replace([item("12", 1)], "v2")
    assert not table.features(encoder, ["10"]).any()  # gone with the new listing
    assert table.get("10") is None
    other = Encoder(EncodingSpec(["12"], ["Drama"], [], 4))  # another model version
    np.testing.assert_array_equal(
        table.features(other, ["12"])[0], other.item(1995, 1, 3.5, ["Drama"])
    )
