"""ONNX export of the towers and the ranker (fp32 and int8 tables).

Uses torch's TorchScript exporter with a dynamic batch axis; weights go to
``model.onnx.data`` beside ``model.onnx`` (external data), the form that
lets a table over 2 GB load at all.

Why not the dynamo exporter (torch's default since 2.9): on these graphs
(embedding lookups, a small MLP, no control flow) both give the same
scores to the last bit, and it took 9.2 s of a 400-product shop's 25 s
build against 0.15 s here (docs/benchmarks.md, "The export and the
starting blend"): every nightly cycle and every test build paid it. torch marks this exporter
deprecated; torch is pinned, and a torch without it fails the build loudly.
"""

from __future__ import annotations

import copy
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from torch import nn

from pipelines.models import Int8Ranker, Ranker, TwoTower
from recserve_model.affinity import RANK as AFFINITY_RANK
from recserve_model.encoding import CATEGORY_OFFSET, HISTORY_LEN, OOV_ROW, EncodingSpec
from recserve_model.sources import SOURCE_FEATURES

OPSET = 18  # onnxruntime in Triton's image and in the build's venv both run it
USER_TOWER_INPUTS = ("user_features", "history")
USER_TOWER_OUTPUTS = ("user_vector",)
RANKER_INPUTS = (
    "item_id",
    "user_vector",
    "user_features",
    "item_features",
    "retrieval_score",
    "user_affinity",
    "source_features",
)
RANKER_OUTPUTS = ("score",)
ITEM_TOWER_INPUTS = ("item_id", "item_features")
ITEM_TOWER_OUTPUTS = ("item_vector",)


def _export(
    module: nn.Module,
    args: tuple[torch.Tensor, ...],
    input_names: tuple[str, ...],
    output_names: tuple[str, ...],
    path: Path,
) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    batch = {name: {0: "batch"} for name in (*input_names, *output_names)}
    # Traced into a scratch folder first: past 2 GB the exporter writes a file
    # per tensor beside the graph; loaded back, they are saved as one.
    with tempfile.TemporaryDirectory(dir=path.parent) as scratch:
        traced = Path(scratch) / path.name
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the exporter's deprecation notice (above)
            torch.onnx.export(
                module, args, str(traced), input_names=list(input_names),
                output_names=list(output_names), dynamic_axes=batch, opset_version=OPSET,
                dynamo=False,
            )  # fmt: skip
        graph = onnx.load(str(traced))
    onnx.save_model(
        graph, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
        location=f"{path.name}.data", size_threshold=0,
    )  # fmt: skip
    # onnx writes the data owner-only; a Triton or ranker running as
    # another user (Compose, Kubernetes) reads it as it reads the graph.
    path.with_name(f"{path.name}.data").chmod(path.stat().st_mode & 0o777)
    return path


class _UserTowerExport(nn.Module):
    def __init__(self, model: TwoTower) -> None:
        super().__init__()
        self.user = model.user

    def forward(self, user_features: torch.Tensor, history: torch.Tensor) -> torch.Tensor:
        return self.user(user_features, history)


class _ItemTowerExport(nn.Module):
    """The item tower, also for items the build did not see (UpsertItems
    without a vector). Their id is out of the vocabulary, and that row is
    never trained; in its place such an item gets the mean id embedding of
    the known items in its categories (of all known items when it has none
    or its categories have none), weighted by their training interactions,
    so ids that never trained (still at their random start) play no part:
    a content prior. ``category_end``: where the category columns end (the
    declared attributes follow them)."""

    def __init__(
        self, model: TwoTower, item_features: np.ndarray, counts: np.ndarray, category_end: int
    ) -> None:
        super().__init__()
        self.item = copy.deepcopy(model.item)
        self.category_end = category_end
        table = self.item.id_embedding.weight.detach()[OOV_ROW + 1 :]
        weight = torch.from_numpy(counts[OOV_ROW + 1 :].astype(np.float32))[:, None]
        overall = (weight * table).sum(dim=0, keepdim=True) / weight.sum().clamp(min=1.0)
        known = item_features[OOV_ROW + 1 :, CATEGORY_OFFSET:category_end]
        categories = torch.from_numpy(np.ascontiguousarray(known)) * weight
        total = categories.sum(dim=0)[:, None]
        means = (categories.T @ table) / total.clamp(min=1.0)
        self.register_buffer("category_means", torch.where(total > 0, means, overall))
        self.register_buffer("overall_mean", overall)

    def forward(self, item_id: torch.Tensor, item_features: torch.Tensor) -> torch.Tensor:
        rows = item_id[:, 0]
        categories = item_features[:, CATEGORY_OFFSET : self.category_end]
        count = categories.sum(dim=1, keepdim=True)
        prior = (categories @ self.category_means) / count.clamp(min=1.0)
        prior = torch.where(count > 0, prior, self.overall_mean)
        learned = self.item.id_embedding(rows)
        embedding = torch.where((rows == OOV_ROW)[:, None], prior, learned)
        return F.normalize(self.item.net(torch.cat([embedding, item_features], dim=-1)), dim=-1)


def example_user_inputs(spec: EncodingSpec, batch: int = 2) -> tuple[torch.Tensor, ...]:
    return (
        torch.zeros(batch, spec.user_dim),
        torch.zeros(batch, HISTORY_LEN, dtype=torch.int64),
    )


def example_ranker_inputs(
    spec: EncodingSpec, batch: int = 3, rank: int = AFFINITY_RANK
) -> tuple[torch.Tensor, ...]:
    return (
        torch.zeros(batch, 1, dtype=torch.int64),
        torch.zeros(batch, spec.embedding_dim),
        torch.zeros(batch, spec.user_dim),
        torch.zeros(batch, spec.item_dim),
        torch.zeros(batch, 1),
        torch.zeros(batch, rank),
        torch.zeros(batch, SOURCE_FEATURES),
    )


def export_user_tower(model: TwoTower, spec: EncodingSpec, path: Path) -> Path:
    return _export(
        _UserTowerExport(model).eval(),
        example_user_inputs(spec),
        USER_TOWER_INPUTS,
        USER_TOWER_OUTPUTS,
        path,
    )


def export_item_tower(
    model: TwoTower, spec: EncodingSpec, item_features: np.ndarray, counts: np.ndarray, path: Path
) -> Path:
    """``item_features`` and ``counts`` (training interactions): every known
    item's, by row (the category priors)."""
    example = (torch.zeros(2, 1, dtype=torch.int64), torch.zeros(2, spec.item_dim))
    module = _ItemTowerExport(model, item_features, counts, spec.category_end).eval()
    return _export(module, example, ITEM_TOWER_INPUTS, ITEM_TOWER_OUTPUTS, path)


def export_ranker(model: Ranker | Int8Ranker, spec: EncodingSpec, path: Path) -> Path:
    example = example_ranker_inputs(spec, rank=model.affinity.rank)
    return _export(model.eval(), example, RANKER_INPUTS, RANKER_OUTPUTS, path)
