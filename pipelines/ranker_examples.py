"""The ranking model's training examples: for each user of the ranker's
window, the candidates the retriever would serve them (the two-tower's
top-n unseen items and the other sources' picks, ``recserve_model.sources``),
their labels and the model's inputs; and the fixed blend the ranker starts
from."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from pipelines import sparse_baselines
from pipelines.dataset import Split, recent_items
from pipelines.inputs import Inputs
from pipelines.item_neighbours import history_rows
from pipelines.models import Ranker, TwoTower
from pipelines.selection_window import weighted_better
from recserve_model.encoding import Encoder
from recserve_model.sources import (
    NEIGHBOUR_CANDIDATES,
    POPULAR_CANDIDATES,
    REPEAT_CANDIDATES,
    REPEAT_SCORE,
    SOURCE_ANN,
    SOURCE_FEATURES,
    Sources,
    source_features,
)

SCORED_CELLS = 50_000_000  # ranker candidates: users x items scores at once (200 MB)
AFFINITY_BLEND = 10.0


@dataclass(frozen=True)
class RankerExamples:
    """Each training user's candidates (what the retriever would serve: the
    tower's top-n unseen items and the other sources' picks, topped up from
    the tower's next ones to a fixed count) with their labels and the
    model's inputs, as tensors."""

    candidates: torch.Tensor
    labels: torch.Tensor
    retrieval: torch.Tensor
    user_vectors: torch.Tensor
    user_features: torch.Tensor
    history: torch.Tensor
    item_features: torch.Tensor
    source_features: torch.Tensor  # [users, n, SOURCE_FEATURES]


def served(
    sources: Sources | None,
    seeds: np.ndarray,
    own: np.ndarray,
    ranked: np.ndarray,
    n: int,
    scores: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One user's candidates: the tower's top ``n`` of ``ranked`` and the
    sources' picks, topped up from ``ranked`` to its length; their source
    bits, neighbour scores and repeat scores. ``scores``: the tower's, -inf
    where no source may pick (the out-of-vocabulary row, not the user's own)."""
    top, bits = ranked[:n], np.full(min(n, len(ranked)), SOURCE_ANN, np.uint8)
    if sources is None:
        return top, bits, np.zeros(len(top), np.float32), np.zeros(len(top), np.float32)
    user_scores = sources.user_scores(seeds)
    top, bits = sources.candidates(
        user_scores, top, own, lambda rows: np.isfinite(scores[rows]), sources.repeat_pool(seeds)
    )
    fill = ranked[~np.isin(ranked, top)][: len(ranked) - len(top)]
    top = np.concatenate([top, fill])[: len(ranked)]
    bits = np.concatenate([bits, np.zeros(len(fill), np.uint8)])[: len(ranked)]
    return top, bits, user_scores.of(top), sources.repeat_scores(seeds, top)


def ranker_examples(
    split: Split,
    inputs: Inputs,
    tower: TwoTower,
    vectors: np.ndarray,
    n: int,
    sources: Sources | None = None,
) -> RankerExamples:
    encoder = inputs.encoder
    users = sorted(split.ranker_train["user_id"].unique())
    recent = recent_items(split.tower_train)
    u_vecs = user_vectors(tower, inputs, users, recent)
    seen = seen_rows(split.tower_train, encoder)
    targets = seen_rows(split.ranker_train, encoder)
    seeds = history_rows(split.tower_train, encoder, users)
    size = n + (NEIGHBOUR_CANDIDATES + POPULAR_CANDIDATES if sources is not None else 0)
    if sources is not None and sources.repeat_rate is not None:
        size += REPEAT_CANDIDATES
    size = min(size, len(vectors) - 1)
    cand = np.zeros((len(users), size), dtype=np.int64)
    label = np.zeros((len(users), size), dtype=np.float32)
    retrieval = np.zeros((len(users), size), dtype=np.float32)
    extra = np.zeros((len(users), size, SOURCE_FEATURES), dtype=np.float32)
    chunk = max(1, SCORED_CELLS // len(vectors))  # users scored at once: bounded memory
    for start in range(0, len(users), chunk):
        scores = u_vecs[start : start + chunk] @ vectors.T
        scores[:, 0] = -np.inf
        for j, user in enumerate(users[start : start + chunk]):
            s = scores[j].copy()
            own = np.fromiter(seen.get(user, ()), dtype=np.int64)
            s[own] = -np.inf
            ranked = sparse_baselines.top(s, size)
            # Train on what serving will see: the sources' own candidates.
            # Adding the positives they missed would teach "low retrieval
            # score is good".
            picked = served(sources, seeds[start + j], own, ranked, n, scores[j])
            top, bits, neighbour, again = picked
            wanted = np.fromiter(targets[user], dtype=np.int64)
            k = len(top)
            cand[start + j, :k] = top
            label[start + j, :k] = np.isin(top, wanted)
            retrieval[start + j, :k] = scores[j][top]
            extra[start + j, :k] = source_features(neighbour, bits, again)
    return RankerExamples(
        torch.from_numpy(cand),
        torch.from_numpy(label),
        torch.from_numpy(retrieval),
        torch.from_numpy(u_vecs),
        torch.from_numpy(np.stack([inputs.user_features[u] for u in users])),
        torch.from_numpy(np.stack([encoder.history(recent.get(u, [])) for u in users])),
        torch.from_numpy(inputs.item_features),
        torch.from_numpy(extra),
    )


# The starting blends tried: the retrieval score's and the affinity's
# weights as multiples of the tower's temperature, the neighbour score's as
# multiples of the weight that gives it the retrieval score's spread.
BLENDS = [
    (r, a, c)
    for r in (1.0, 0.0)
    for a in (AFFINITY_BLEND, 0.0)
    for c in (0.0, 1.0, 3.0, 10.0, 30.0, 100.0)
    if r or a or c
]


def initial_blend(
    model: Ranker,
    parts: torch.Tensor,
    labels: torch.Tensor,
    retrieval_spread: torch.Tensor,
    sources: torch.Tensor,
) -> dict[str, Any]:
    """Starts the ranker at the fixed blend of its strong scores that ranks
    the held-out users' window best (the sources' scores differ in scale
    by dataset and model); what each blend scored, for the report. Where
    the user's own items are candidates (a repeat score in ``sources``, the
    candidates' source features), the repeat score's weight is chosen
    next, on the chosen blend. ``parts``: those users' candidates scored
    up to the blend (``Ranker.parts``, [users, n, 5]), ``labels`` theirs:
    each blend tried is then arithmetic on them, not a pass of the model."""
    scale = float(model.retrieval_weight.detach())
    spread = float(sources[..., 0].std())
    unit = scale * float(retrieval_spread.std()) / spread if spread > 0 else 0.0
    per_user = {}
    logits = lambda: model.blend(*parts.unbind(-1))  # noqa: E731
    with torch.no_grad():
        for r, a, c in BLENDS:
            model.retrieval_weight.fill_(r * scale)
            model.affinity_weight.fill_(a * scale)
            model.neighbour_weight.fill_(c * unit)
            per_user[(r, a, c)] = ndcg_per_user(logits(), labels)
        tried = {blend: float(v.mean()) for blend, v in per_user.items()}
        r, a, c = significant_best(per_user)
        model.retrieval_weight.fill_(r * scale)
        model.affinity_weight.fill_(a * scale)
        model.neighbour_weight.fill_(c * unit)
        unit_r = scale * float(retrieval_spread.std())
        repeat = repeat_blend(model, logits, labels, unit_r, sources[..., REPEAT_SCORE])
    return {
        "chosen": {"retrieval": r, "affinity": a, "neighbours": c, "neighbour_unit": unit},
        "held_out_ndcg@10": {f"{r:g}/{a:g}/{c:g}": round(v, 4) for (r, a, c), v in tried.items()},
        **repeat,
    }


REPEAT_BLENDS = (0.0, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0)  # of the retrieval spread


def repeat_blend(
    model: Ranker,
    logits: Callable[[], torch.Tensor],
    labels: torch.Tensor,
    retrieval_unit: float,
    repeat_scores: torch.Tensor,
) -> dict[str, Any]:
    """The repeat score's weight (the blend's other weights as chosen) that
    ranks the window best, in units of the blend's retrieval spread; empty
    where no candidate has a repeat score (items not bought again)."""
    given = repeat_scores[repeat_scores > 0]
    spread = float(given.std()) if len(given) > 1 else 0.0
    if spread <= 0:
        return {}
    unit = retrieval_unit / spread
    tried = {}
    for p in REPEAT_BLENDS:
        model.repeat_weight.fill_(p * unit)
        tried[p] = float(ndcg_per_user(logits(), labels).mean())
    best = max(REPEAT_BLENDS, key=lambda p: (tried[p], -p))
    model.repeat_weight.fill_(best * unit)
    return {
        "repeat": {"chosen": best, "unit": unit},
        "repeat_held_out_ndcg@10": {f"{p:g}": round(v, 4) for p, v in tried.items()},
    }


@torch.no_grad()
def user_vectors(
    model: TwoTower, inputs: Inputs, users: list[str], recent: pd.Series
) -> np.ndarray:
    feats = torch.from_numpy(np.stack([inputs.user_features[u] for u in users]))
    hist = torch.from_numpy(np.stack([inputs.encoder.history(recent.get(u, [])) for u in users]))
    return model.user(feats, hist).numpy()


def seen_rows(frame: pd.DataFrame, encoder: Encoder) -> dict[str, set[int]]:
    return {
        user: set(encoder.item_rows(list(items)))
        for user, items in frame.groupby("user_id")["item_id"]
    }


Blend = tuple[float, float, float]  # retrieval, affinity, neighbour weights


def significant_best(per_user: dict[Blend, torch.Tensor]) -> Blend:
    """The blend with the best mean, unless it beats the best single score
    (one weight non-zero: one source's own order) by less than SIGNIFICANCE
    standard errors of their paired per-user difference: then that single
    score. On a few hundred users the blends differ by noise, and the
    simpler list is the one that holds on the test split."""
    means = {blend: float(v.mean()) for blend, v in per_user.items()}
    best = max(means, key=lambda blend: (means[blend], blend))
    singles = [blend for blend in means if sum(w != 0 for w in blend) == 1]
    if not singles or best in singles:
        return best
    single = max(singles, key=lambda blend: (means[blend], blend))
    return best if significantly_better(per_user[best], per_user[single]) else single


def significantly_better(per_user: torch.Tensor, than: torch.Tensor) -> bool:
    """Whether ``per_user`` (each user's NDCG) beats ``than`` (the same
    users') by more than SIGNIFICANCE standard errors of their paired
    difference: the window's weighted test with every user counted alike."""
    users = len(per_user)
    share = np.full(users, 1 / max(users, 1))
    return weighted_better(per_user.double().numpy(), than.double().numpy(), share)


def in_chunks(
    score: Callable[[torch.Tensor], torch.Tensor], users_at_once: int
) -> Callable[[torch.Tensor], torch.Tensor]:
    """``score`` of a users index, computed ``users_at_once`` users at a
    time and joined: the same scores, with a bounded peak of activations."""

    def scored(users: torch.Tensor) -> torch.Tensor:
        parts = [score(users[i : i + users_at_once]) for i in range(0, len(users), users_at_once)]
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    return scored


def ndcg_per_user(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Each labelled row's NDCG@10 of its candidates ranked by ``scores``."""
    top = torch.argsort(scores, dim=1, descending=True, stable=True)[:, :10]
    gains = torch.gather(labels, 1, top) / torch.log2(torch.arange(2, 12, dtype=torch.float32))
    ideal_hits = labels.sum(1).clamp(max=10).long()
    discounts = 1 / torch.log2(torch.arange(2, 12, dtype=torch.float32))
    ideal = torch.cumsum(discounts, 0)[(ideal_hits - 1).clamp(min=0)]
    has = ideal_hits > 0
    return gains.sum(1)[has] / ideal[has]
