"""The living dataset (pipelines/snapshot.py): a generated shop's export plus
what arrived after it, as the stack keeps it (the events the gateways kept,
the catalogue changes the retriever acknowledged, written here with the
same log writers), becomes a dataset that validates and builds; a shopper
who signed up after the export and a product that only ever arrived by
upsert are in the model built from it."""

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from pipelines import evaluate
from pipelines.__main__ import app
from pipelines.build import QualityGateError, build
from pipelines.compare import CURRENT_MODEL
from pipelines.dataset import NEEDS, read_dataset, temporal_split
from pipelines.shop import ShopSize, write_shop
from pipelines.snapshot import RECORD, snapshot
from recserve_data import load, validate
from recserve_kit.jsonl_log import JsonlLog
from recserve_model import artifacts
from recserve_model.encoding import EncodingSpec
from services.retriever.catalogue_log import CatalogueLog
from services.retriever.generations import Write
from services.retriever.store import ItemRecord

EXPORT_START = 1_700_000_000  # pipelines/shop.py's first timestamp


def event(n: int, user: str, item: str, kind: str, at: int) -> dict:
    return {"event_id": f"{user}-{n}", "user_id": user, "item_id": item, "event_type": kind,
            "timestamp": at, "value": 0.0, "recommendation_id": "", "received_at": at}  # fmt: skip


def arrivals(data_dir, shop) -> None:
    """A new shopper's 24 clicks; 40 shoppers buying a product that arrived
    by upsert, early in their histories (so training, not only the holdout,
    has them); a view of a product the catalogue never sent; an event of an
    undeclared type; a soft delete."""
    items = sorted(shop.items["item_id"])[:24]
    later = int(shop.interactions["timestamp"].max()) + 60
    records = [event(n, "newcomer", item, "click", later + n) for n, item in enumerate(items)]
    buyers = sorted(shop.interactions["user_id"].unique())[:40]
    records += [event(0, u, "p-new", "purchase", EXPORT_START + 1) for u in buyers]
    records += [
        event(1, buyers[0], "p-ghost", "view", later),
        event(2, buyers[0], items[0], "share", later),
    ]
    JsonlLog(data_dir / "events" / "app", background=False).write(records)
    log = CatalogueLog(data_dir)
    new = ItemRecord("p-new", np.zeros(4, np.float32), ("c001",), True, "A new product", 0,
                     {"brand": "b0001", "price": 12.5})  # fmt: skip
    log.record(Write("upsert", items=[new]))
    log.record(Write("soft", ids=[items[1]]))


@pytest.fixture(scope="module")
def living(tmp_path_factory):
    root = tmp_path_factory.mktemp("living")
    export = write_shop(root / "export", ShopSize(items=400, users=300, events=60_000), seed=5)
    data_dir = root / "data"
    arrivals(data_dir, load(export))
    report = snapshot(data_dir, export, root / "snapshot")
    return export, data_dir, root / "snapshot", report


def test_the_snapshot_is_the_export_and_what_arrived_since(living):
    export, _, snap, report = living
    assert not validate(snap, NEEDS).failed
    base, now = load(export), load(snap)
    assert len(now.interactions) == len(base.interactions) + 24 + 40 + 1  # the share is left out
    assert report.events_used == 65 and report.events_skipped == 1
    assert report.new_users == 1 and report.new_items == 1 and report.items_from_events_only == 1
    items = now.items.set_index("item_id")
    assert items.loc["p-new", "title"] == "A new product" and items.loc["p-new", "active"]
    assert items.loc["p-new", "brand"] == "b0001" and items.loc["p-new", "price"] == 12.5
    assert not items.loc["p-ghost", "active"]  # learned from, never listed until upserted
    soft_deleted = sorted(base.items["item_id"])[1]
    assert not items.loc[soft_deleted, "active"]
    assert "newcomer" in set(now.users["user_id"])
    assert "users.region" in report.made_nullable
    assert json.loads((snap / RECORD).read_text())["base"] == str(export.resolve())


def test_a_snapshot_of_a_snapshot_counts_no_event_twice(living, tmp_path):
    _, data_dir, snap, _ = living
    command = ["snapshot", "--data-dir", str(data_dir), "--dataset", str(snap)]
    result = CliRunner().invoke(app, [*command, "--out", str(tmp_path / "again")])
    assert result.exit_code == 0, result.output
    assert "events: 65 added" in result.output
    again, first = load(tmp_path / "again"), load(snap)
    assert len(again.interactions) == len(first.interactions)
    pd.testing.assert_frame_equal(again.items, first.items)


def test_the_new_shopper_and_product_are_in_the_model_built_from_it(living):
    _, data_dir, snap, _ = living
    try:
        result = build(data_dir, dataset_dir=snap, candidate=True)
        directory = result.directory
    except QualityGateError:  # built, not served: what it learned is there all the same
        (directory,) = (p for p in artifacts.artifacts_root(data_dir).iterdir() if p.is_dir())
    assert json.loads((directory / "manifest.json").read_text())["dataset_dir"] == str(
        snap.resolve()
    )
    vectors = pd.read_parquet(directory / "features" / "user_vectors.parquet")
    newcomer = vectors[vectors["user_id"] == "newcomer"]
    assert len(newcomer) == 1 and newcomer["model_version"].iloc[0] == directory.name
    assert "p-new" in EncodingSpec.load(directory / "encoding.json").item_ids  # a learned row
    stats = pd.read_parquet(directory / "features" / "item_stats.parquet").set_index("item_id")
    assert stats.loc["p-new", "popularity"] > 0  # trained on its purchases
    listed = pd.read_parquet(directory / "item_vectors.parquet").set_index("item_id")
    assert listed.loc["p-new", "active"] and not listed.loc["p-ghost", "active"]


def test_a_candidate_is_scored_beside_the_current_model_on_its_own_split(living, tmp_path):
    """After a retrain every baseline moves with the new events, so the
    build scores the served artifact on the candidate's own held-out split
    too, with the same evaluation as its own build's."""
    export, _, snap, _ = living
    data_dir = tmp_path / "data"
    base = build(data_dir, dataset_dir=export, over_the_gate=True)
    assert CURRENT_MODEL not in base.metrics  # nothing was served before it
    data = read_dataset(export)[1]
    own_split = evaluate.evaluate_artifact_on(
        base.directory, data, temporal_split(data.interactions), with_baselines=False
    )
    assert own_split["ranked"] == pytest.approx(base.metrics["ranked"])
    try:
        metrics = build(data_dir, dataset_dir=snap, candidate=True).metrics
    except QualityGateError as refused:
        metrics = refused.metrics
    (directory,) = (
        p
        for p in artifacts.artifacts_root(data_dir).iterdir()
        if p.is_dir() and p != base.directory
    )
    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest["compared_with"] == base.version
    assert manifest["metrics"][CURRENT_MODEL] == metrics[CURRENT_MODEL]
    assert set(metrics[CURRENT_MODEL]) == set(metrics["ranked"])
    assert 0 < metrics[CURRENT_MODEL]["ndcg@10"] < 1
    # Scored on the candidate's users (a newcomer among them), not its own.
    assert metrics[CURRENT_MODEL] != pytest.approx(base.metrics["ranked"])
