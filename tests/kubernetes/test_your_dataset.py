"""A shop's own dataset on Kubernetes (components/your-dataset, the
your-shop overlay): the init Job waits for /data/dataset on the data volume
before its build, which learns from it (pipelines/current.py); the build's
and the nightly retrain's memory are the figure the overlay states, from
`pipelines validate`; without the component the Job builds the demo as
before. The wait's shell loop runs here against a temp dir."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from pipelines import current
from pipelines.data_cli import LIMIT_FLOOR_GIB
from recserve_data import MANIFEST
from tests.helpers import poll_until
from tests.kubernetes.manifests import K8S, OVERLAYS, container, containers, objects, pod

SHOP = "your-shop"
STEPS = ["restore-keys", "keys", "build", "publish-features", "index", "publish-secrets"]
BUILD = ["python", "-m", "pipelines", "build", "--data-dir", "/data"]
WAIT = "wait-for-dataset"


def stated_memory() -> str:
    """The figure the overlay states once (its local-config ConfigMap)."""
    (doc,) = yaml.safe_load_all((K8S / "overlays" / SHOP / "build-memory.yaml").read_text())
    assert doc["metadata"]["annotations"]["config.kubernetes.io/local-config"] == "true"
    return doc["data"]["memory"]


def wait_script(docs: list[dict]) -> str:
    shell, flag, script = container(docs, "recserve-init", WAIT)["command"]
    assert (shell, flag) == ("sh", "-c")
    return script


def test_the_shop_overlay_is_rendered_and_checked_like_the_others():
    assert SHOP in OVERLAYS


def test_the_init_job_waits_for_the_dataset_right_before_building():
    docs = objects(SHOP)
    job = pod(docs, "recserve-init").spec
    assert [c["name"] for c in containers(job)] == [*STEPS[:2], WAIT, *STEPS[2:]]
    wait, build = container(docs, "recserve-init", WAIT), container(docs, "recserve-init", "build")
    # The same image; the build without --dataset: the default below.
    assert wait["image"] == build["image"] and build["command"] == BUILD
    mounts = {m["mountPath"]: m for m in wait["volumeMounts"]}
    assert set(mounts) == {"/data"} and not mounts["/data"].get("readOnly")  # mv writes there
    volumes = {v["name"]: v for v in job["volumes"]}
    assert volumes[mounts["/data"]["name"]]["persistentVolumeClaim"]["claimName"] == "recserve-data"
    # It waits for what a first build on /data learns from (pipelines/current.py),
    # and tells how to upload it whole: cp beside it, then rename.
    script = wait_script(docs)
    own = f"/data/{current.OWN_DATASET}"
    assert f"until [ -f {own}/{MANIFEST} ]" in script
    assert f"cp DIR ${{POD_NAME}}:{own}.upload -c {WAIT}" in script
    assert f"-c {WAIT} -- mv {own}.upload {own}" in script
    assert int(next(e["value"] for e in wait["env"] if e["name"] == "WAIT_SECONDS")) >= 3600


def test_a_first_build_on_the_volume_learns_the_uploaded_dataset(tmp_path):
    (tmp_path / current.OWN_DATASET).mkdir()
    (tmp_path / current.OWN_DATASET / MANIFEST).write_text("name: shop\n")
    assert current.default_dataset(tmp_path) == tmp_path / current.OWN_DATASET


def test_the_build_and_the_retrain_get_the_stated_memory():
    memory = stated_memory()
    assert re.fullmatch(r"\d+Gi", memory) and int(memory[:-2]) >= LIMIT_FLOOR_GIB
    docs = objects(SHOP)
    for c in (container(docs, "recserve-init", "build"), container(docs, "retrain")):
        assert c["resources"]["requests"]["memory"] == memory, c["name"]
        assert c["resources"]["limits"]["memory"] == memory, c["name"]
    # Read by Kustomize, never applied.
    assert "recserve-build-memory" not in {d["metadata"]["name"] for d in docs}


def test_without_the_component_the_job_builds_the_demo_as_before():
    docs = objects("cpu")
    job = pod(docs, "recserve-init").spec
    assert [c["name"] for c in containers(job)] == STEPS
    build = container(docs, "recserve-init", "build")
    assert build["command"] == BUILD
    assert build["resources"]["limits"]["memory"] == f"{LIMIT_FLOOR_GIB}Gi"


def run_wait(script: str, data: Path, seconds: int) -> subprocess.Popen:
    """The wait's script with /data at ``data``; its ``sleep`` counts each
    poll in ``data``/polls (a line each) and returns at once."""
    shim = data / "bin"
    shim.mkdir(exist_ok=True)
    (shim / "sleep").write_text(f"#!/bin/sh\necho poll >> {data}/polls\n")
    (shim / "sleep").chmod(0o755)
    return subprocess.Popen(
        ["sh", "-c", script.replace("/data/", f"{data}/")],
        env={"PATH": f"{shim}:/usr/bin:/bin", "WAIT_SECONDS": str(seconds),
             "POD_NAME": "recserve-init-x", "POD_NAMESPACE": "recserve"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def polls(data: Path) -> int:
    found = data / "polls"
    return len(found.read_text().splitlines()) if found.exists() else 0


def test_the_wait_ends_when_the_upload_is_renamed_not_before(tmp_path):
    script = wait_script(objects(SHOP))
    waiting = run_wait(script, tmp_path, 10**6)
    poll_until(lambda: polls(tmp_path) >= 1, 10, 0.01, "the wait's first poll")
    upload = tmp_path / "dataset.upload"
    upload.mkdir()
    (upload / MANIFEST).write_text("name: shop\n")  # copied, not yet renamed
    seen = polls(tmp_path)
    poll_until(lambda: polls(tmp_path) >= seen + 2, 10, 0.01, "a poll with the upload there")
    assert waiting.poll() is None
    upload.rename(tmp_path / "dataset")
    out, _ = waiting.communicate(timeout=15)
    assert waiting.returncode == 0
    assert "kubectl -n recserve cp DIR recserve-init-x:" in out and "the build learns" in out
    # Already there (a rerun of the Job): no wait.
    assert run_wait(script, tmp_path, 60).wait(timeout=5) == 0


def test_the_wait_gives_up_and_says_why(tmp_path):
    gave_up = run_wait(wait_script(objects(SHOP)), tmp_path, 0)
    _, err = gave_up.communicate(timeout=5)
    assert gave_up.returncode == 1 and "nothing was built" in err
