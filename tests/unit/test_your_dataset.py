"""A team's dataset in any deployment: a data dir's own dataset
(``<data dir>/dataset``, where Compose mounts DATASET and Kubernetes copies
it) is what a first build learns from, and ``validate --json`` gives tools
the report and the memory to give the container that builds it."""

import json

import pytest
from typer.testing import CliRunner

from pipelines.__main__ import app
from pipelines.current import OWN_DATASET, default_dataset
from pipelines.data_cli import LIMIT_FLOOR_GIB, build_memory_limit_gib
from recserve_data import Report
from recserve_model import artifacts
from tests.unit.dataset_defects import DEFECTS, broken
from tests.unit.dataset_fixtures import tiny

GIB = 1 << 30


def test_a_first_build_learns_the_data_dirs_own_dataset(tmp_path):
    own = tiny(tmp_path / "data" / OWN_DATASET)
    assert default_dataset(tmp_path / "data") == own


def test_once_something_is_served_the_build_follows_its_dataset(tmp_path):
    """The data dir's own dataset does not displace what is served: a retrain
    learns from the current artifact's dataset (a snapshot, after a cycle)."""
    data_dir = tmp_path / "data"
    tiny(data_dir / OWN_DATASET)
    snapshot = tiny(data_dir / "snapshots" / "today")
    version = artifacts.artifacts_root(data_dir) / "shop-1"
    version.mkdir(parents=True)
    (version / "manifest.json").write_text(json.dumps({"dataset_dir": str(snapshot)}))
    artifacts.set_current(data_dir, "shop-1")
    assert default_dataset(data_dir) == snapshot


def test_a_folder_without_a_manifest_is_not_a_dataset(tmp_path, monkeypatch):
    """Compose mounts an empty folder there when no DATASET is given: the demo."""
    import pipelines.current as current

    (tmp_path / "data" / OWN_DATASET).mkdir(parents=True)
    demo = tmp_path / "demo"
    monkeypatch.setattr(current.movielens, "demo_dataset", lambda raw: demo)
    assert default_dataset(tmp_path / "data") == demo


def test_validate_json_reports_checks_counts_and_the_build_memory(tmp_path):
    runner = CliRunner()
    ok = runner.invoke(app, ["validate", "--json", str(tiny(tmp_path / "ok"))])
    assert ok.exit_code == 0, ok.output
    report = json.loads(ok.stdout)
    assert report["passed"] and report["checks"]["manifest"] == "PASS"
    assert report["facts"]["users"] == 3 and report["facts"]["memory_needed"] > 0
    assert report["build_memory_limit_gib"] == LIMIT_FLOOR_GIB
    bad = broken(tmp_path / "bad", next(d for d in DEFECTS if d.name == "unknown item"))
    failed = runner.invoke(app, ["validate", "--json", str(bad)])
    assert failed.exit_code == 1
    found = json.loads(failed.stdout)
    assert not found["passed"] and found["checks"]["references"] == "FAIL"
    (finding,) = [f for f in found["findings"] if f["status"] == "FAIL"]
    assert any(e["value"] == "'i99'" for e in finding["examples"]), finding


@pytest.mark.parametrize(
    ("needed_gib", "limit_gib"), [(0.15, LIMIT_FLOOR_GIB), (1.5, 4), (8.47, 13), (40, 52)]
)
def test_the_build_memory_limit_follows_the_estimate(tmp_path, needed_gib, limit_gib):
    report = Report(tmp_path)
    report.facts.update(memory_needed=int(needed_gib * GIB))
    assert build_memory_limit_gib(report) == limit_gib
