"""The pipeline from raw data to a Triton repository, as one idempotent step.

The artifact version is a hash of the dataset fingerprint, the training
config and the source of every module that shapes the models: unchanged
inputs give the same version, whose verified artifact is reused as is.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from rich.console import Console
from rich.progress import Progress

from pipelines import (
    baselines,
    compare,
    dataset,
    evaluate,
    export,
    item_neighbours,
    logged_events,
    onboarding_model,
    user_vectors,
)
from pipelines.current import PromoteRefused, becomes_current, default_dataset, publish
from pipelines.gate import QualityGateError, pass_the_gate, quality_gate
from pipelines.inputs import Inputs, build_spec, encode_inputs
from pipelines.item_neighbours import with_repeats
from pipelines.models import Int8Ranker, Ranker, TwoTower
from pipelines.steps import Steps
from pipelines.train import (
    TrainConfig,
    item_vectors,
    set_affinity,
    train_ranker,
    train_two_tower,
)
from recserve_cli import console as cli_console
from recserve_model import artifacts
from recserve_model import segments as segment
from recserve_model.encoding import CATEGORY_OFFSET, Encoder, EncodingSpec
from recserve_model.sources import Sources

ROOT = Path(__file__).resolve().parents[1]
MODEL_SOURCES = [
    ROOT / "pipelines" / "dataset.py",
    ROOT / "pipelines" / "learned.py",  # what the models learn from the events
    ROOT / "pipelines" / "models.py",
    ROOT / "pipelines" / "train.py",
    ROOT / "pipelines" / "ranker_examples.py",
    ROOT / "pipelines" / "inputs.py",  # the encoding fitted to the data
    ROOT / "pipelines" / "user_vectors.py",  # every user's stored vector
    ROOT / "pipelines" / "export.py",
    ROOT / "pipelines" / "baselines.py",  # the ranker's affinity factors
    ROOT / "pipelines" / "sparse_baselines.py",
    ROOT / "pipelines" / "item_neighbours.py",  # the candidate sources
    ROOT / "pipelines" / "evaluate.py",  # the gate's figures
    ROOT / "pipelines" / "compare.py",  # the served model's figures beside them
    ROOT / "libs" / "recserve_model" / "sources.py",
    ROOT / "pipelines" / "onboarding_model.py",  # new users' lists
    ROOT / "libs" / "recserve_model" / "segments.py",
    ROOT / "libs" / "recserve_model" / "encoding.py",
    ROOT / "libs" / "recserve_model" / "attribute_features.py",
    ROOT / "libs" / "recserve_model" / "profile_key.py",
    ROOT / "libs" / "recserve_model" / "catalogue.py",  # the filterable attributes' form
    ROOT / "libs" / "recserve_data" / "columns.py",  # how the tables' values are typed
]
POPULAR_PER_LIST = 100
__all__ = ["PromoteRefused", "QualityGateError", "build", "quality_gate"]


@dataclass
class BuildResult:
    version: str
    directory: Path
    reused: bool
    metrics: dict[str, dict[str, float]]
    triton_versions: dict[str, int]
    serving: bool = True  # CURRENT names it: what users get (else a candidate)


def version_id(fingerprint: str, config: TrainConfig, name: str = "ml100k") -> str:
    """``<dataset name>-<hash>``."""
    digest = hashlib.sha256(fingerprint.encode())
    digest.update(json.dumps(config.as_dict(), sort_keys=True).encode())
    for source in MODEL_SOURCES:
        digest.update(source.read_bytes())
    return f"{name}-{digest.hexdigest()[:12]}"


def popular_lists(
    tables: dict[str, pd.DataFrame],
    attributes: Mapping[str, Mapping[str, object]] | None = None,
    inactive: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """Most-rated active items overall and per category: the gateway's
    fallback, each with its filterable attributes so a filtered fallback can
    honour them."""
    items = tables["item_profile"].merge(tables["item_stats"], on="item_id")
    items = items[~items["item_id"].isin(inactive)]
    items = items.sort_values(["popularity", "item_id"], ascending=[False, True])
    attributes = attributes or {}

    def entries(frame: pd.DataFrame) -> list[dict[str, Any]]:
        return [
            {
                "item_id": r.item_id,
                "popularity": int(r.popularity),
                "title": r.title,
                "categories": list(r.genres),
                "attributes": dict(attributes.get(r.item_id, {})),
            }
            for r in frame.head(POPULAR_PER_LIST).itertuples()
        ]

    genres = sorted({g for gs in items["genres"] for g in gs})
    return {
        "all": entries(items),
        "by_category": {
            g: entries(items[items["genres"].map(lambda gs, g=g: g in gs)]) for g in genres
        },
    }


def artifact_attributes(artifact_dir: Path) -> dict[str, dict[str, object]]:
    """Each item's filterable attributes, as an artifact's item table holds them."""
    table = pd.read_parquet(artifact_dir / "item_vectors.parquet")
    if "attributes" not in table:
        return {}
    return {
        str(i): json.loads(a) for i, a in zip(table["item_id"], table["attributes"], strict=True)
    }


def item_vector_table(
    data: dataset.MovieLens, vectors: np.ndarray, row_of: dict[str, int]
) -> pd.DataFrame:
    items = data.items
    return pd.DataFrame(
        {
            "item_id": items["item_id"],
            "vector": [vectors[row_of[i]].astype(np.float32) for i in items["item_id"]],
            "categories": items["genres"],
            "active": [i not in data.inactive for i in items["item_id"]],
            "title": items["title"],
            "year": items["year"],
            # Payload form (recserve_model.catalogue), as JSON: kinds differ by attribute.
            "attributes": [json.dumps(data.item_attributes.get(i, {})) for i in items["item_id"]],
        }
    )


def write_tables(
    out: Path,
    data: dataset.MovieLens,
    split: dataset.Split,
    tables: dict[str, pd.DataFrame],
    inputs: Inputs,
    vectors: np.ndarray,
) -> None:
    """The artifact's tables: features, item vectors, catalogue, fallbacks."""
    features_dir = out / "features"
    features_dir.mkdir()
    for name, table in tables.items():
        table.to_parquet(features_dir / f"{name}.parquet", index=False)
    item_vector_table(data, vectors, inputs.encoder.row_of).to_parquet(
        out / "item_vectors.parquet", index=False
    )
    data.catalogue.save(out)
    popular = popular_lists(tables, data.item_attributes, data.inactive)
    (out / "popular.json").write_text(json.dumps(popular))
    users, attributes, unused = onboarding_model.segment_inputs(data)
    lists = onboarding_model.segment_lists(
        split.train, users, inputs.encoder, attributes, unused, data.inactive
    )
    (out / segment.FILE).write_text(json.dumps(lists))


def export_models(
    out: Path, tower: TwoTower, ranker: Ranker, spec: EncodingSpec, inputs: Inputs
) -> dict[str, Path]:
    return {
        "user_tower": export.export_user_tower(tower, spec, out / "user_tower" / "model.onnx"),
        "item_tower": export.export_item_tower(
            tower, spec, inputs.item_features, inputs.popularity, out / "item_tower" / "model.onnx"
        ),
        "ranker": export.export_ranker(ranker, spec, out / "ranker" / "model.onnx"),
        "ranker_int8": export.export_ranker(
            Int8Ranker(ranker), spec, out / "ranker_int8" / "model.onnx"
        ),
    }


def served_sources(
    train: pd.DataFrame,
    encoder: Encoder,
    choice: item_neighbours.Choice,
    membership: np.ndarray,
    repeat: bool,
) -> Sources:
    """The candidate sources served: the chosen item-item model refit on
    the whole training period, with the repeat rates where items are bought again."""
    refit = item_neighbours.fit_sources(
        train, encoder, choice.model, choice.recency_tau, membership
    )
    return with_repeats(refit, train, encoder, repeat)


def train_and_export(
    out: Path, data: dataset.MovieLens, split: dataset.Split, config: TrainConfig, console: Console
) -> dict[str, dict[str, float]]:
    torch.manual_seed(config.seed)
    torch.set_num_threads(2)
    steps = Steps(console)
    with steps("features"):
        tables = dataset.feature_tables(data, split.train)
        spec = build_spec(data, config.dim)
        inputs = encode_inputs(spec, tables)
        # The ranker learns from features as of the end of the tower period.
        inputs_then = encode_inputs(spec, dataset.feature_tables(data, split.tower_train))
    membership = baselines.category_membership(
        inputs.item_features, CATEGORY_OFFSET, spec.category_end
    )
    with steps("item-to-item model, chosen on a holdout-shaped window"):
        choice = item_neighbours.choose_model(split, inputs.encoder, membership)
    console.print(f"item-to-item source: {choice.model}, recency tau {choice.recency_tau:g}")
    with Progress(console=console, transient=False) as progress:
        with steps("two-tower training"):
            tower = train_two_tower(split, inputs, config, progress)
        with steps("ranker training"):
            ranker, ranker_training = train_ranker(
                split,
                inputs_then,
                tower,
                item_vectors(tower, inputs_then),
                config,
                progress,
                with_repeats(choice.tower_period, split.tower_train, inputs.encoder, data.repeat),
            )
    ranker_training["item_to_item"] = choice.report()
    # Served: the affinity and the sources refit on everything before the
    # holdout, as the features are (the ranker learned on the same fits as of
    # the tower period).
    with steps("affinity and sources refit"):
        set_affinity(ranker, split.train, inputs.encoder)
        served_sources(split.train, inputs.encoder, choice, membership, data.repeat).save(out)
    vectors = item_vectors(tower, inputs)
    spec.save(out / "encoding.json")
    ranker.affinity.user_affinity().save(out)  # the user side, computed by callers
    write_tables(out, data, split, tables, inputs, vectors)
    steps.start("ONNX export")
    paths = export_models(out, tower, ranker, spec, inputs)
    torch.save({"tower": tower.state_dict(), "ranker": ranker.state_dict()}, out / "torch_state.pt")
    steps.start("evaluation on the held-out split")
    (out / "ranker_training.json").write_text(json.dumps(ranker_training, indent=2))
    console.print(
        f"ranker: kept epoch {ranker_training['kept_epoch']} (held-out users' NDCG@10 "
        f"by epoch: {ranker_training['held_out_ndcg@10_by_epoch']})"
    )
    lam, repeat = choice.ease_lambda, data.repeat
    metrics = evaluate.evaluate(
        split, inputs, vectors, paths, inactive=data.inactive, ease_lambda=lam, repeat=repeat
    )
    steps.stop()
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2, sort_keys=True))
    return metrics


def training_data(
    data_dir: Path, dataset_dir: Path | None, with_events: bool, console: Console
) -> tuple[dataset.MovieLens, int]:
    """The validated dataset (by default the current artifact's, the demo's
    on a data dir with none), with the kept app events when asked; and how
    many of those it took."""
    source = dataset_dir or default_dataset(data_dir)
    report, data = dataset.read_dataset(source)
    console.print(f"dataset {source}")
    console.print(f"validate {report.summary()}")
    if data.dropped_users:
        console.print(
            f"left out {data.dropped_users} users with fewer than "
            f"{dataset.NEEDS.min_user_interactions} items with a positive or rating event "
            "(the split's minimum)"
        )
    if not with_events:
        return data, 0
    logged = logged_events.read_logged(data_dir, data)
    console.print(f"logged events: {len(logged.rows)} used, {logged.skipped} left out")
    return logged_events.with_logged(data, logged), len(logged.rows)


def build(
    data_dir: Path,
    config: TrainConfig | None = None,
    console: Console | None = None,
    dataset_dir: Path | None = None,
    with_events: bool = False,
    over_the_gate: bool = False,
    candidate: bool = False,
    promote: bool = False,
) -> BuildResult:
    """Builds (or reuses) the artifact and publishes it, unless its served
    lists lose to a baseline: CURRENT on a first install or with
    ``promote``, else a candidate (pipelines.current). ``with_events``: the
    kept app events join in (pipelines.logged_events).

    The dataset (default: the current artifact's; MovieLens-100K where
    nothing was built yet) is validated first: one that fails
    (``InvalidDataset``) or that the build cannot take yet
    (``dataset.UnsupportedDataset``) is refused before anything is written."""
    config = config or TrainConfig()
    console = console or cli_console(stderr=True)
    data, logged = training_data(data_dir, dataset_dir, with_events, console)
    version = version_id(data.fingerprint, config, data.name)
    becomes_current(data_dir, version, candidate, promote)  # a refusal before the training
    root = artifacts.artifacts_root(data_dir)
    directory = root / version
    reused = False
    try:
        manifest = artifacts.verify(directory)
        metrics = manifest["metrics"]
        reused = True
        console.print(f"artifact {version} is up to date")
    except artifacts.ArtifactError:
        shutil.rmtree(directory, ignore_errors=True)
        staging = root / f".{version}.tmp"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        split = dataset.temporal_split(data.interactions)
        metrics = train_and_export(staging, data, split, config, console)
        compared = compare.current_on_this_split(data_dir, version, data, split, console)
        metrics |= compared[1]
        (staging / "metrics.json").write_text(json.dumps(metrics, indent=2, sort_keys=True))
        user_vectors.write_user_vectors(staging, version)
        artifacts.write_manifest(
            staging,
            version,
            {
                "dataset": data.title,
                "dataset_dir": data.source_dir,
                "dataset_fingerprint": data.fingerprint,
                "logged_events": logged,
                "training_config": config.as_dict(),
                "metrics": metrics,
                "compared_with": compared[0],
            },
        )
        staging.rename(directory)
    pass_the_gate(root, version, metrics, over_the_gate, console)
    triton_versions, serving = publish(data_dir, directory, version, candidate, promote)
    return BuildResult(version, directory, reused, metrics, triton_versions, serving)
