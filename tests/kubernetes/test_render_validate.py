"""Every overlay renders with `kubectl kustomize`, every object validates
strictly against the schemas of Kubernetes 1.30 and 1.33
(kubernetes-validate), and checkov passes with only the skips in
infra/kubernetes/checkov.yaml, each of which is needed."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import yaml

from tests.kubernetes.manifests import K8S, KVENV_PYTHON, OVERLAYS, checker, objects, render

VERSIONS = ("1.30", "1.33")
VALIDATE = Path(__file__).with_name("validate_schemas.py")


def rendered_files(directory: Path) -> list[Path]:
    files = []
    for overlay in OVERLAYS:
        path = directory / f"{overlay}.yaml"
        path.write_text(render(overlay))
        files.append(path)
    return files


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_overlay_renders_into_one_namespace(overlay):
    docs = objects(overlay)
    kinds = Counter(d["kind"] for d in docs)
    assert kinds["Deployment"] >= 8 and kinds["NetworkPolicy"] >= 10, kinds
    assert {"StatefulSet", "Job", "CronJob", "PodDisruptionBudget", "Role"} <= set(kinds)
    (namespace,) = [d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"]
    strays = [
        f"{d['kind']}/{d['metadata']['name']}"
        for d in docs
        if d["kind"] != "Namespace" and d["metadata"].get("namespace") != namespace
    ]
    assert strays == []
    unlabelled = [
        d["metadata"]["name"]
        for d in docs
        if d["metadata"].get("labels", {}).get("app.kubernetes.io/part-of") != "recserve"
    ]
    assert unlabelled == []


def validate(version: str, files: list[Path]) -> dict[str, list[str]]:
    checker("python")
    result = subprocess.run(
        [str(KVENV_PYTHON), str(VALIDATE), version, *map(str, files)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_object_validates_strictly(version, tmp_path):
    found = validate(version, rendered_files(tmp_path))
    assert len(found) == len(OVERLAYS)
    assert {name: errors for name, errors in found.items() if errors} == {}


def test_the_validation_is_strict(tmp_path):
    """An unknown field, and an API version 1.30 no longer serves, are errors."""
    docs = objects("cpu")
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessprobe"] = {}
    hpa = {
        "apiVersion": "autoscaling/v2beta2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "old"},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "x"}, "maxReplicas": 2},
    }
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump_all([deployment, hpa]))
    (errors,) = validate("1.30", [path]).values()
    assert any("'readinessprobe' was unexpected" in e for e in errors), errors
    assert any("autoscaling/v2beta2" in e for e in errors), errors


def skipped_checks() -> dict[str, str]:
    """Check id -> the reason written beside it."""
    text = (K8S / "checkov.yaml").read_text()
    listed = yaml.safe_load(text)["skip-check"]
    reasons = dict(re.findall(r"^\s*-\s*(CKV2?_K8S_\d+)\s*#\s*(.+)$", text, re.MULTILINE))
    assert set(listed) == set(reasons), "every skipped check needs its reason on its line"
    return reasons


def checkov(directory: Path, *extra: str) -> list[dict]:
    result = subprocess.run(
        [
            str(checker("checkov")),
            "--directory", str(directory),
            "--framework", "kubernetes",
            "--skip-download",
            "--quiet",
            "--compact",
            "--output", "json",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE"},
    )  # fmt: skip
    assert result.stdout.strip(), result.stderr
    reports = json.loads(result.stdout)
    return reports if isinstance(reports, list) else [reports]


def test_checkov_passes_with_a_short_reasoned_skip_list(tmp_path):
    reasons = skipped_checks()
    assert len(reasons) <= 4 and all(len(r) > 40 for r in reasons.values())
    rendered_files(tmp_path)
    (report,) = checkov(tmp_path)  # every check, no skips
    assert report["summary"]["parsing_errors"] == 0
    assert report["summary"]["resource_count"] > 100
    failed = Counter(f["check_id"] for f in report["results"]["failed_checks"])
    unexplained = {
        check: sorted(
            {f["resource"] for f in report["results"]["failed_checks"] if f["check_id"] == check}
        )
        for check in failed
        if check not in reasons
    }
    assert unexplained == {}, "checkov fails these; fix the manifests (or reason a skip)"
    # And no skip hides a check that would pass anyway.
    assert set(reasons) <= set(failed), set(reasons) - set(failed)
    (skipped,) = checkov(tmp_path, "--config-file", str(K8S / "checkov.yaml"))
    assert skipped["summary"]["failed"] == 0
