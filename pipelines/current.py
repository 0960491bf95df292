"""What a build changes: the Triton repository always, CURRENT (what every
service serves) only on a first install or when promoted; and what a build
without ``--dataset`` learns from, the current artifact's dataset."""

from __future__ import annotations

import json
from pathlib import Path

from pipelines import dataset, movielens, triton_repo
from recserve_data import MANIFEST
from recserve_delivery import state as rollout_state
from recserve_model import artifacts


class PromoteRefused(RuntimeError):
    """--promote while a rollout decides what users get."""


# A team's dataset inside its data dir: what Compose mounts (DATASET=) and
# Kubernetes copies onto the volume, so every deployment builds it the same way.
OWN_DATASET = "dataset"


def default_dataset(data_dir: Path) -> Path:
    """What a build without ``--dataset`` learns from: the dataset of the
    data dir's current artifact (a shop's data dir retrains the shop, never
    MovieLens); where nothing was built yet, the data dir's own dataset
    (``<data dir>/dataset``, a manifest inside) or else MovieLens-100K."""
    serving = artifacts.current_version(data_dir)
    if serving is None:
        own = data_dir / OWN_DATASET
        if (own / MANIFEST).is_file():
            return own
        return movielens.demo_dataset(data_dir / "raw")
    directory = artifacts.artifacts_root(data_dir) / serving
    recorded = dataset.artifact_dataset(directory) if directory.is_dir() else None
    if recorded is not None:
        return recorded
    manifest = directory / "manifest.json"
    named = json.loads(manifest.read_text()).get("dataset_dir") if manifest.exists() else None
    if named is None and directory.is_dir():
        return movielens.demo_dataset(data_dir / "raw")  # built before the record: the demo's
    raise dataset.UnsupportedDataset(
        f"the current artifact {directory.name} was built from {named or 'a dataset'}, which "
        "is not there any more: name the dataset to build from with --dataset DIR"
    )


def becomes_current(data_dir: Path, version: str, candidate: bool, promote: bool) -> bool:
    """Whether a build moves CURRENT, what every service serves. A build
    changes what users get only where nobody is served yet (a first
    install) or when told to (``promote``: every service follows at once);
    otherwise it is a candidate, served through a rollout, whose promotion
    moves CURRENT. A promotion is refused while a rollout runs: that
    rollout decides."""
    if candidate and promote:
        raise PromoteRefused("--candidate and --promote contradict each other")
    serving = artifacts.current_version(data_dir)
    if serving is None:
        return not candidate
    if not promote or serving == version:
        return False
    state = rollout_state.load(data_dir)
    if state is not None and state.active:
        raise PromoteRefused(
            f"a rollout of {state.candidate} is {state.status}: it decides what users get; "
            "let it end, or abort it (bin/recserve-stack rollout abort), then promote"
        )
    return True


def publish(
    data_dir: Path, directory: Path, version: str, candidate: bool, promote: bool
) -> tuple[dict[str, int], bool]:
    """Into the Triton repository, and CURRENT when it becomes current
    (``becomes_current``): its Triton versions, and whether CURRENT names it."""
    current = becomes_current(data_dir, version, candidate, promote)
    triton_versions = triton_repo.generate(
        data_dir / "triton" / "repository",
        directory,
        version,
        frozenset(rollout_state.protected_versions(data_dir)),
    )
    # Asked again: a rollout may have started while the files were copied.
    if current and becomes_current(data_dir, version, candidate, promote):
        artifacts.set_current(data_dir, version)
    return triton_versions, artifacts.current_version(data_dir) == version


def candidate_line(version: str, serving: str | None) -> str:
    """What a build that is a candidate says; the version is its last word
    (the retrain cycle reads it: apps/recserve_stack/retrain.py)."""
    return (
        f"a candidate, serving nobody yet (CURRENT: {serving}; build again with --promote "
        f"to serve it now); roll it out: bin/recserve-stack rollout start {version}"
    )
