"""The dataset contract: a tiny valid dataset passes and loads typed; each of
many broken ones (one defect each) is refused with the file, row, column and
value, and the build writes nothing from it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from recserve_data import InvalidDataset, Needs, Status, load, validate, write_manifest, write_table
from recserve_data.validate import inspect
from tests.unit.dataset_defects import DEFECTS, MANIFESTS, broken
from tests.unit.dataset_fixtures import NOW, PER_USER, Data, short_user, tiny, write

NEEDS = Needs(min_user_interactions=PER_USER, memory_bytes=8 << 30)


def messages(report, check: str) -> list[str]:
    return [
        m
        for f in report.findings
        if f.check == check and f.status is Status.FAIL
        for m in f.messages()
    ]


def test_the_tiny_dataset_passes_and_loads_typed(tmp_path):
    directory = tiny(tmp_path / "tiny")
    report = validate(directory, NEEDS, now=NOW)
    assert not report.findings, report.messages()
    data = load(directory, NEEDS)
    assert data.items["categories"].iloc[0] == ["kitchen", "home"]
    assert data.items["active"].dtype == bool and not data.items["active"].iloc[5]
    assert data.items["embedding"].iloc[0].dtype == np.float32
    assert data.items["launched"].dtype == "Int64" and data.items["launched"].isna().sum() == 1
    assert data.users is not None and data.users["age"].dtype == "Int64"
    assert data.interactions["timestamp"].dtype == np.int64
    assert data.interactions["value"].notna().sum() == 12


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_the_typed_tables_written_back_load_the_same(tmp_path, suffix):
    first = load(tiny(tmp_path / "first"), NEEDS)
    tables = {
        kind: table.model_copy(update={"file": f"{kind}{suffix}"})
        for kind, table in first.manifest.tables().items()
    }
    manifest = first.manifest.model_copy(update=tables)
    out = tmp_path / "again"
    out.mkdir()
    write_manifest(out, manifest)
    for kind, table in manifest.tables().items():
        write_table(getattr(first, kind), out, table, manifest.csv)
    again = load(out, NEEDS)
    for kind in ("items", "interactions", "users"):
        left, right = getattr(first, kind), getattr(again, kind)
        pd.testing.assert_frame_equal(
            left.drop(columns=["embedding"], errors="ignore"),
            right.drop(columns=["embedding"], errors="ignore"),
        )
    for left, right in zip(first.items["embedding"], again.items["embedding"], strict=True):
        np.testing.assert_array_equal(left, right)


@pytest.mark.parametrize("defect", DEFECTS, ids=[d.name for d in DEFECTS])
def test_a_broken_dataset_is_refused_naming_file_row_column_and_value(tmp_path, defect):
    report = validate(broken(tmp_path, defect), NEEDS, now=NOW)
    assert report.failed
    where = f"row {defect.row}" if defect.row is not None else "header"
    wanted = (f"{defect.file} {where}", f"column {defect.column}", f"value {defect.value}")
    found = messages(report, defect.check)
    assert any(all(part in m for part in wanted) for m in found), (wanted, report.messages())


@pytest.mark.parametrize("name, location, value, change", MANIFESTS, ids=[d[0] for d in MANIFESTS])
def test_a_broken_manifest_is_refused_naming_the_key(tmp_path, name, location, value, change):
    data = Data()
    change(data)
    report = validate(write(tmp_path / "dataset", data), NEEDS, now=NOW)
    found = messages(report, "manifest")
    assert any(f"dataset.yaml, key {location}" in m and value in m for m in found), found
    assert report.status("values") is Status.SKIP


def append(path: Path, line: str) -> None:
    with path.open("a") as f:
        f.write(line)


UNREADABLE = [
    ("missing file", lambda d: (d / "users.csv").unlink(), "no such file"),
    ("ragged line", lambda d: append(d / "users.csv", "u4,30,a,extra\n"), "line 5"),
    ("not UTF-8", lambda d: d.joinpath("items.csv").write_bytes(b"item_id\n\xff\n"), "utf-8"),
]


@pytest.mark.parametrize("name, edit, problem", UNREADABLE, ids=[u[0] for u in UNREADABLE])
def test_an_unreadable_table_is_refused_by_name(tmp_path, name, edit, problem):
    directory = tiny(tmp_path / "dataset")
    edit(directory)
    found = messages(validate(directory, NEEDS, now=NOW), "files")
    assert any(problem in m for m in found), found


def test_counts_are_complete_and_examples_few(tmp_path):
    data = Data()
    for row in data.interactions:
        row["item_id"] = "i99"
    report = validate(write(tmp_path / "dataset", data), NEEDS, now=NOW)
    [finding] = [f for f in report.findings if f.check == "references"]
    assert finding.count == len(data.interactions) and len(finding.examples) == 5


def test_repeated_interactions_and_idle_items_warn_without_failing(tmp_path):
    data = Data()
    data.interactions.append(dict(data.interactions[0]))
    data.items.append({**data.items[0], "item_id": "i7"})
    report = validate(write(tmp_path / "dataset", data), NEEDS, now=NOW)
    assert not report.failed
    assert report.status("duplicates") is Status.WARN
    assert report.status("coverage") is Status.WARN


def test_a_dataset_too_big_for_memory_fails(tmp_path):
    directory = tiny(tmp_path / "dataset")
    report = validate(directory, Needs(memory_bytes=1000), now=NOW)
    assert report.status("memory") is Status.FAIL
    assert "GiB available" in messages(report, "memory")[0]


def every_broken(tmp_path: Path) -> list[Path]:
    """Each broken dataset of the tests above, in a directory of its own."""
    found = [broken(tmp_path / f"d{n}", d) for n, d in enumerate(DEFECTS)]
    for n, (*_, change) in enumerate(MANIFESTS):
        data = Data()
        change(data)
        found.append(write(tmp_path / f"m{n}", data))
    for n, (_, edit, _) in enumerate(UNREADABLE):
        edit(tiny(tmp_path / f"f{n}"))
        found.append(tmp_path / f"f{n}")
    return found


def test_the_build_refuses_every_broken_dataset_before_writing(tmp_path):
    from pipelines.build import build

    data_dir = tmp_path / "data"
    directories = every_broken(tmp_path / "broken")
    assert len(directories) >= 30
    for directory in directories:
        with pytest.raises(InvalidDataset):
            build(data_dir, dataset_dir=directory)
    assert not data_dir.exists()


def age_as_categorical(data: Data) -> None:
    data.manifest["users"]["columns"]["age"]["type"] = "categorical"
    del data.manifest["users"]["columns"]["age"]["integer"]
    del (
        data.manifest["users"]["columns"]["age"]["min"],
        data.manifest["users"]["columns"]["age"]["max"],
    )


def only_views(data: Data) -> None:
    data.manifest["interactions"]["event_types"] = {"view": {"role": "exposure"}}
    for row in data.interactions:
        row.update(event_type="view", value="")


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        (lambda data: None, r"no user has 16 items with a positive or rating event"),
        (age_as_categorical, r"user column 'age' is categorical: the build learns it as numeric"),
        (only_views, r"none positive or rating, nothing to learn from"),
    ],
    ids=["too few per user", "a learned column of another type", "no learned event type"],
)
def test_the_build_refuses_a_valid_dataset_it_cannot_take_yet(tmp_path, change, refusal):
    from pipelines.build import build
    from pipelines.dataset import UnsupportedDataset

    data = Data()
    change(data)
    directory = write(tmp_path / "tiny", data)
    assert not validate(directory, NEEDS, now=NOW).failed
    data_dir = tmp_path / "data"
    with pytest.raises(UnsupportedDataset, match=refusal):
        build(data_dir, dataset_dir=directory)
    assert not (data_dir / "artifacts").exists()


def test_the_build_learns_from_positive_and_rating_events_one_per_item(tmp_path):
    """Exposures are left out; a positive event is an implicit interaction
    (0), a rating has its value; a user's events on one item are one
    interaction, at the first, with the largest value."""
    from pipelines.dataset import learned_interactions

    _, data = inspect(tiny(tmp_path / "tiny"), NEEDS, now=NOW)
    assert data is not None
    learned = learned_interactions(data)
    events = data.interactions
    positive = events[events["event_type"] != "view"]
    assert len(learned) == len(positive.drop_duplicates(["user_id", "item_id"]))
    assert not learned.duplicated(["user_id", "item_id"]).any()
    for row in learned.itertuples():
        mine = positive[(positive["user_id"] == row.user_id) & (positive["item_id"] == row.item_id)]
        values = [e.value if e.event_type == "rating" else 0.0 for e in mine.itertuples()]
        assert row.rating == max(values) and row.timestamp == mine["timestamp"].min()


def test_validate_command_prints_every_problem_and_exits_1(tmp_path):
    from pipelines.__main__ import app

    runner = CliRunner()
    ok = runner.invoke(app, ["validate", str(tiny(tmp_path / "ok"))])
    assert ok.exit_code == 0, ok.output
    assert "PASS" in ok.output
    bad = broken(tmp_path / "bad", next(d for d in DEFECTS if d.name == "unknown item"))
    result = runner.invoke(app, ["validate", str(bad)])
    assert result.exit_code == 1
    assert "FAIL" in result.output and "i99" in result.output and "row 3" in result.output


def test_inspect_returns_no_tables_from_a_failing_dataset(tmp_path):
    report, data = inspect(broken(tmp_path, DEFECTS[0]), NEEDS, now=NOW)
    assert report.failed and data is None


def test_build_command_prints_the_report_and_builds_nothing(tmp_path):
    from pipelines.__main__ import app

    bad = broken(tmp_path / "bad", next(d for d in DEFECTS if d.name == "unknown user"))
    data_dir = tmp_path / "data"
    result = CliRunner().invoke(app, ["build", "--data-dir", str(data_dir), "--dataset", str(bad)])
    assert result.exit_code == 1
    assert "interactions.csv" in result.output and "'u9'" in result.output
    assert "nothing was built" in result.output and not data_dir.exists()


def test_a_user_too_short_for_the_split_warns_and_the_rest_builds(tmp_path):
    """A shop always has users too short for the split: the build leaves
    them out, so validation warns with their count, never fails the export."""
    data = Data()
    short_user(data)  # u3 keeps 5 interactions, after u1's and u2's 32: row 33
    report = validate(write(tmp_path / "dataset", data), NEEDS, now=NOW)
    assert not report.failed
    (finding,) = [f for f in report.findings if f.check == "split"]
    assert finding.status is Status.WARN and finding.count == 1
    assert "the build leaves 1 of 3 users out" in finding.problem
    assert any("interactions.csv row 33" in m and "'u3'" in m for m in finding.messages())


def test_validate_counts_only_the_events_the_build_learns_from(tmp_path):
    """The tiny shop's users have the 16 rows the split needs, but only 6
    distinct items with a click, purchase or rating (views do not count):
    valid, with a warning naming them, as many as the build then leaves out
    (all: the build refuses it, below); with rows counted (no roles) they pass."""
    from pipelines.dataset import NEEDS as BUILD_NEEDS

    report, data = inspect(tiny(tmp_path / "tiny"), BUILD_NEEDS, now=NOW)
    assert not report.failed and data is not None
    (finding,) = [f for f in report.findings if f.check == "split"]
    assert finding.status is Status.WARN and finding.count == 3
    assert "fewer than 16 items with a positive or rating event" in finding.problem
    assert "leaves 3 of 3 users out, nothing to train on" in finding.problem
    assert [e.value for e in finding.examples] == ["'u1'", "'u2'", "'u3'"]
    rows_only = inspect(tiny(tmp_path / "again"), NEEDS, now=NOW)[0]  # no roles: rows count
    assert not [f for f in rows_only.findings if f.check == "split"]
