"""A model version as the ranker serves it: the artifact, its Triton
version numbers, its encoder; where those numbers are read from, and the
warm-up that makes its first real request not the slow one."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from recserve_model.affinity import RANK as AFFINITY_RANK
from recserve_model.affinity import UserAffinity
from recserve_model.encoding import HISTORY_LEN, Encoder
from recserve_model.sources import SOURCE_FEATURES
from services.ranker.config import RankerSettings
from services.ranker.triton_client import Tensor, TritonClient


@dataclass(frozen=True)
class Loaded:
    """The artifact version in use and its Triton version numbers."""

    version: str
    user_model_version: int
    ranking_model_version: int
    encoder: Encoder
    # The user's side of the ranker's affinity feature (None: an artifact from
    # before it, whose ranker graph does not read it).
    affinity: UserAffinity | None = None
    # The item tower's Triton version (None: an artifact from before its export).
    item_model_version: int | None = None


def read_versions(settings: RankerSettings, model: str) -> dict[str, int]:
    path = settings.repository / model / "versions.json"
    if not path.exists():
        return {}
    return {artifact: int(number) for number, artifact in json.loads(path.read_text()).items()}


async def warm_up(triton: TritonClient, settings: RankerSettings, target: Loaded) -> None:
    """One inference per model, so the first real request is not the slow one."""
    spec = target.encoder.spec
    user: list[Tensor] = [
        ("user_features", np.zeros((1, spec.user_dim), np.float32)),
        ("history", np.zeros((1, HISTORY_LEN), np.int64)),
    ]
    await triton.infer(settings.user_model, target.user_model_version, user, "user_vector", 30.0)
    ranking: list[Tensor] = [
        ("item_id", np.zeros((1, 1), np.int64)),
        ("user_vector", np.zeros((1, spec.embedding_dim), np.float32)),
        ("user_features", np.zeros((1, spec.user_dim), np.float32)),
        ("item_features", np.zeros((1, spec.item_dim), np.float32)),
        ("retrieval_score", np.zeros((1, 1), np.float32)),
        ("user_affinity", np.zeros((1, AFFINITY_RANK), np.float32)),
        ("source_features", np.zeros((1, SOURCE_FEATURES), np.float32)),
    ]
    await triton.infer(settings.ranking_model, target.ranking_model_version, ranking, "score", 30.0)
