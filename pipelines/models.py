"""The two PyTorch models. Training only; serving runs their ONNX exports.

TwoTower: a user tower (user features + recent items) and an item tower
(item id + item features), each ending in an L2-normalised vector, so the
retriever's dot product is a cosine.

Ranker: scores flat (user, candidate) pairs, one pair per batch row, so
Triton's dynamic batcher can merge requests with any number of candidates.
Besides the tower's vectors it scores the candidate's affinity to the user's
recent items: EASE item-item weights (fit on the training interactions,
factorised to rank 32, ``baselines.py``) summed over the recent items with
more weight on the latest; the feature that lifts the ranked list past EASE
itself (docs/evaluation.md). The graph holds the item side and takes the
user side as an input (``user_affinity``), computed once per user by the
caller (recserve_model/affinity.py), not once per candidate row.
The item-id embedding table is a weight of the graph: ids go in, rows are
gathered inside the graph, and the table never leaves the server. The int8
variant stores the table as int8 with a per-row fp16 scale and dequantizes
the gathered rows in the graph.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recserve_model.affinity import RANK as AFFINITY_RANK
from recserve_model.affinity import UserAffinity
from recserve_model.encoding import HISTORY_LEN
from recserve_model.sources import REPEAT_SCORE, SOURCE_FEATURES


def mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class UserTower(nn.Module):
    """User features and the recent items (most recent first), pooled with
    a learned weight per position: it starts as the plain mean and learns
    how much the latest items outweigh older ones."""

    def __init__(self, num_rows: int, user_dim: int, dim: int, sparse: bool = False) -> None:
        super().__init__()
        self.history_embedding = nn.Embedding(num_rows, dim, padding_idx=0, sparse=sparse)
        self.position_logits = nn.Parameter(torch.zeros(HISTORY_LEN))
        self.net = mlp([user_dim + dim, 128, dim])

    def forward(self, user_features: torch.Tensor, history: torch.Tensor) -> torch.Tensor:
        weight = (history > 0).float() * torch.softmax(self.position_logits, 0)
        summed = (self.history_embedding(history) * weight.unsqueeze(-1)).sum(dim=1)
        pooled = summed / weight.sum(dim=1, keepdim=True).clamp(min=1e-12)
        return F.normalize(self.net(torch.cat([user_features, pooled], dim=-1)), dim=-1)


class ItemTower(nn.Module):
    def __init__(self, num_rows: int, item_dim: int, dim: int, sparse: bool = False) -> None:
        super().__init__()
        self.id_embedding = nn.Embedding(num_rows, dim, sparse=sparse)
        self.net = mlp([item_dim + dim, 128, dim])

    def forward(self, item_rows: torch.Tensor, item_features: torch.Tensor) -> torch.Tensor:
        x = torch.cat([self.id_embedding(item_rows), item_features], dim=-1)
        return F.normalize(self.net(x), dim=-1)


class TwoTower(nn.Module):
    """``sparse``: the id tables take sparse gradients, so a training step
    costs the rows in its batch, not the whole catalogue (large catalogues)."""

    def __init__(
        self, num_rows: int, user_dim: int, item_dim: int, dim: int, sparse: bool = False
    ) -> None:
        super().__init__()
        self.user = UserTower(num_rows, user_dim, dim, sparse)
        self.item = ItemTower(num_rows, item_dim, dim, sparse)
        # Learned inverse temperature for the sampled softmax.
        self.log_scale = nn.Parameter(torch.tensor(2.5))
        self.sparse = sparse

    def sparse_parameters(self) -> list[nn.Parameter]:
        if not self.sparse:
            return []
        return [self.user.history_embedding.weight, self.item.id_embedding.weight]


class Affinity(nn.Module):
    """Recency-weighted affinity of a candidate to the user's recent items:
    sum over k of recency[k] * history_side[recent_k] . item_side[candidate]."""

    def __init__(self, num_rows: int, rank: int, history_len: int) -> None:
        super().__init__()
        # Fixed, not learned: fit in closed form (EASE), set by set_factors.
        self.register_buffer("history_side", torch.zeros(num_rows, rank))
        self.register_buffer("item_side", torch.zeros(num_rows, rank))
        self.register_buffer("recency", torch.ones(history_len))
        self.rank = rank

    def set_factors(self, history_side: Tensor, item_side: Tensor, recency: Tensor) -> None:
        self.history_side.copy_(history_side)
        self.item_side.copy_(item_side)
        self.recency.copy_(recency)

    def user_side(self, history: Tensor) -> Tensor:
        """[B, H] recent item rows -> [B, R]: what UserAffinity computes at serving."""
        weight = (history > 0).float() * self.recency  # row 0 pads
        return (self.history_side[history] * weight.unsqueeze(-1)).sum(dim=1)

    def score(self, item_id: Tensor, user_side: Tensor) -> Tensor:
        return (user_side * self.item_side[item_id.squeeze(-1)]).sum(-1, keepdim=True)  # [B, 1]

    def user_affinity(self) -> UserAffinity:
        """The user side, for the artifact (recserve_model/affinity.py), with
        the item side for explaining scores."""
        return UserAffinity(
            self.history_side.detach().numpy().astype(np.float32),
            self.recency.detach().numpy().astype(np.float32),
            self.item_side.detach().numpy().astype(np.float32),
        )


class Ranker(nn.Module):
    """score(item_row, user_vector, user_features, item_features, retrieval_score, history)."""

    def __init__(
        self,
        num_rows: int,
        user_dim: int,
        item_dim: int,
        dim: int,
        affinity_rank: int = AFFINITY_RANK,
        sparse: bool = False,
    ) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(num_rows, dim) * 0.05)
        self.sparse = sparse  # the table takes sparse gradients (large catalogues)
        self.affinity = Affinity(num_rows, affinity_rank, HISTORY_LEN)
        self.net = mlp([dim * 3 + user_dim + item_dim + 2 + SOURCE_FEATURES, 128, 64, 1])
        # The MLP learns a correction on top of the strong scores (retrieval,
        # affinity, the item-to-item neighbour score); it starts near zero.
        self.retrieval_weight = nn.Parameter(torch.tensor(10.0))
        self.affinity_weight = nn.Parameter(torch.tensor(10.0))
        self.neighbour_weight = nn.Parameter(torch.tensor(0.0))
        self.repeat_weight = nn.Parameter(torch.tensor(0.0))  # the user's own items, bought again
        with torch.no_grad():
            last = self.net[-1]
            assert isinstance(last, nn.Linear)
            last.weight.mul_(0.01)
            last.bias.zero_()

    def sparse_parameters(self) -> list[nn.Parameter]:
        return [self.table] if self.sparse else []

    def features(
        self,
        rows: torch.Tensor,
        user_vector: torch.Tensor,
        user_features: torch.Tensor,
        item_features: torch.Tensor,
        retrieval_score: torch.Tensor,
        affinity: torch.Tensor,
        source_features: torch.Tensor,
    ) -> torch.Tensor:
        return torch.cat(
            [
                rows,
                user_vector,
                rows * user_vector,
                user_features,
                item_features,
                retrieval_score,
                affinity,
                source_features,
            ],
            dim=-1,
        )

    def head(
        self, x: Tensor, retrieval_score: Tensor, affinity: Tensor, source_features: Tensor
    ) -> Tensor:
        """The MLP's correction on top of the strong scores."""
        return self.blend(self.net(x), *strong_scores(retrieval_score, affinity, source_features))

    def blend(
        self, correction: Tensor, retrieval: Tensor, affinity: Tensor, neighbour: Tensor,
        repeat: Tensor,
    ) -> Tensor:  # fmt: skip
        """The strong scores weighed, the MLP's correction on top: linear in
        the weights, so a blend is tried on parts scored once (``parts``)."""
        return (
            correction
            + self.retrieval_weight * retrieval
            + self.affinity_weight * affinity
            + self.neighbour_weight * neighbour
            + self.repeat_weight * repeat
        )

    def parts(self, *inputs: Tensor) -> tuple[Tensor, ...]:
        """``forward``'s inputs scored up to the blend: the MLP's correction
        and the four strong scores, each [B, 1]."""
        x, retrieval_score, affinity, source_features = self.features_of(*inputs)
        return self.net(x), *strong_scores(retrieval_score, affinity, source_features)

    def features_of(
        self,
        item_id: torch.Tensor,
        user_vector: torch.Tensor,
        user_features: torch.Tensor,
        item_features: torch.Tensor,
        retrieval_score: torch.Tensor,
        user_affinity: torch.Tensor,
        source_features: torch.Tensor,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The MLP's input and the scores the head blends beside it."""
        rows = self.table_rows(item_id.squeeze(-1))
        affinity = self.affinity.score(item_id, user_affinity)
        x = self.features(
            rows,
            user_vector,
            user_features,
            item_features,
            retrieval_score,
            affinity,
            source_features,
        )
        return x, retrieval_score, affinity, source_features

    def table_rows(self, index: Tensor) -> Tensor:
        # F.embedding, not self.table[index]: indexing's backward on CPU sums
        # a row's gradients in the order its threads happen to run, so two
        # builds of one dataset trained apart (ML-1M kept an epoch or not).
        return F.embedding(index, self.table, sparse=self.sparse)

    def forward(
        self,
        item_id: torch.Tensor,  # [B, 1] int64 embedding row
        user_vector: torch.Tensor,  # [B, D]
        user_features: torch.Tensor,  # [B, U]
        item_features: torch.Tensor,  # [B, I]
        retrieval_score: torch.Tensor,  # [B, 1]
        user_affinity: torch.Tensor,  # [B, R] the user's side of the affinity
        source_features: torch.Tensor,  # [B, SOURCE_FEATURES] (recserve_model.sources)
    ) -> torch.Tensor:
        inputs = (item_id, user_vector, user_features, item_features, retrieval_score)
        return self.head(*self.features_of(*inputs, user_affinity, source_features))  # [B, 1]


def strong_scores(
    retrieval_score: Tensor, affinity: Tensor, source_features: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The scores the ranker's weights blend: retrieval, affinity, the
    neighbour score and the repeat score, each [B, 1]."""
    neighbour = source_features[:, :1]
    return retrieval_score, affinity, neighbour, source_features[:, REPEAT_SCORE : REPEAT_SCORE + 1]


def quantize_rows(table: Tensor) -> tuple[Tensor, Tensor]:
    """int8 rows and a per-row fp16 scale. fp16 scales: 2 bytes a row instead
    of 4 (10 MB of a 5M-row table's 340), no measurable ranking loss
    (docs/benchmarks.md). Rows are quantized against the rounded scale, so
    dequantizing is exact."""
    table = table.detach()
    scale = (table.abs().amax(dim=1, keepdim=True).clamp(min=1e-4) / 127.0).to(torch.float16)
    quantized = torch.round(table / scale.to(torch.float32)).clamp(-127, 127)
    return quantized.to(torch.int8), scale


class Int8Rows(nn.Module):
    """A row table stored as int8 with per-row scales; indexing dequantizes."""

    def __init__(self, table: Tensor) -> None:
        super().__init__()
        quantized, scale = quantize_rows(table)
        self.register_buffer("table_q", quantized)
        self.register_buffer("scale", scale)

    def __getitem__(self, index: Tensor) -> Tensor:
        return self.table_q[index].to(torch.float32) * self.scale[index].to(torch.float32)


class Int8Affinity(nn.Module):
    """The item side of the affinity in int8 too (at 5M items it weighs as
    much as half the id table); the user side is not in the graph."""

    def __init__(self, affinity: Affinity) -> None:
        super().__init__()
        self.item_side = Int8Rows(affinity.item_side)
        self.rank = affinity.rank

    score = Affinity.score


class Int8Ranker(nn.Module):
    """The same ranker with its tables stored as int8 rows and per-row scales."""

    def __init__(self, ranker: Ranker) -> None:
        super().__init__()
        quantized, scale = quantize_rows(ranker.table)
        self.register_buffer("table_q", quantized)
        self.register_buffer("scale", scale)
        self.affinity = Int8Affinity(ranker.affinity)
        self.net = ranker.net
        self.retrieval_weight = ranker.retrieval_weight
        self.affinity_weight = ranker.affinity_weight
        self.neighbour_weight = ranker.neighbour_weight
        self.repeat_weight = ranker.repeat_weight
        self._head = ranker.head

    features = Ranker.features
    features_of = Ranker.features_of

    def table_rows(self, index: Tensor) -> Tensor:
        return self.table_q[index].to(torch.float32) * self.scale[index].to(torch.float32)

    def forward(
        self,
        item_id: torch.Tensor,
        user_vector: torch.Tensor,
        user_features: torch.Tensor,
        item_features: torch.Tensor,
        retrieval_score: torch.Tensor,
        user_affinity: torch.Tensor,
        source_features: torch.Tensor,
    ) -> torch.Tensor:
        inputs = (item_id, user_vector, user_features, item_features, retrieval_score)
        return self._head(*self.features_of(*inputs, user_affinity, source_features))
