"""Versioned, checksummed model artifacts.

One directory per build, ``<data_dir>/artifacts/<version>/``, with a
``manifest.json`` holding the sha256 of every file, the metrics, the dataset
fingerprint, the training config and the creation time. ``CURRENT`` names
the version in use. Anything that loads an artifact calls ``verify`` first,
which refuses a missing, truncated or tampered file by name.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"


class ArtifactError(RuntimeError):
    pass


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def artifacts_root(data_dir: Path) -> Path:
    return data_dir / "artifacts"


def write_manifest(directory: Path, version: str, meta: dict[str, Any]) -> dict[str, Any]:
    files = {
        str(p.relative_to(directory)): sha256_of(p)
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }
    manifest = {
        "version": version,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **meta,
        "files": files,
    }
    tmp = directory / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True))
    tmp.replace(directory / MANIFEST)
    return manifest


ITEM_VECTORS = "item_vectors.parquet"


def items_checksum(manifest: dict[str, Any]) -> str:
    """The artifact's item vectors' checksum: equal checksums, one vector space."""
    return str(manifest.get("files", {}).get(ITEM_VECTORS, ""))


def read_items_checksum(directory: Path) -> str:
    """``items_checksum`` from the artifact's manifest, unverified ("" when
    there is no readable manifest)."""
    try:
        return items_checksum(json.loads((directory / MANIFEST).read_text()))
    except (OSError, ValueError):
        return ""


def verify(directory: Path) -> dict[str, Any]:
    """The manifest, after checking every file it lists."""
    manifest_path = directory / MANIFEST
    if not manifest_path.exists():
        raise ArtifactError(f"{manifest_path}: no manifest; the artifact is incomplete")
    try:
        manifest: dict[str, Any] = json.loads(manifest_path.read_text())
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{manifest_path}: unreadable manifest ({exc.msg})") from None
    for name, expected in manifest["files"].items():
        path = directory / name
        if not path.exists():
            raise ArtifactError(f"{path}: listed in the manifest but missing")
        if sha256_of(path) != expected:
            raise ArtifactError(f"{path}: checksum mismatch (tampered or truncated)")
    return manifest


def set_current(data_dir: Path, version: str) -> None:
    root = artifacts_root(data_dir)
    tmp = root / "CURRENT.tmp"
    tmp.write_text(version + "\n")
    os.replace(tmp, root / "CURRENT")


def current_version(data_dir: Path) -> str | None:
    """The version CURRENT names; None before the first build."""
    pointer = artifacts_root(data_dir) / "CURRENT"
    return pointer.read_text().strip() if pointer.exists() else None


def same_files(data_dir: Path, version: str, other: str) -> bool:
    """Whether two versions are one artifact (a rehearsal copy links to the
    files of the version it copies)."""
    root = artifacts_root(data_dir)
    return (root / version).resolve() == (root / other).resolve()


def current(data_dir: Path) -> Path:
    """The verified directory of the current version."""
    version = current_version(data_dir)
    if version is None:
        pointer = artifacts_root(data_dir) / "CURRENT"
        raise ArtifactError(f"{pointer}: no model artifact yet; run `make artifacts`")
    directory = artifacts_root(data_dir) / version
    verify(directory)
    return directory


def promote(data_dir: Path, version: str) -> bool:
    """A promoted rollout's version becomes CURRENT when it is an artifact of
    its own (a retrained model: the features, the retriever and the gateways
    then follow it); a rehearsal copy, a link to the current artifact's
    files, leaves CURRENT as it is. Whether CURRENT moved. (Its files were
    verified when the ranker loaded it; every reader of CURRENT verifies.)"""
    serving = current_version(data_dir)
    if not (artifacts_root(data_dir) / version).is_dir() or serving is None:
        return False
    if same_files(data_dir, version, serving):
        return False
    set_current(data_dir, version)
    return True
