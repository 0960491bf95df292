"""The two PyTorch models. Training only; serving runs their ONNX exports.

TwoTower: a user tower (user features + recent items) and an item tower
(item id + item features), each ending in an L2-normalised vector, so the
retriever's dot product is a cosine.

Ranker: scores flat (user, candidate) pairs, one pair per batch row, so
Triton's dynamic batcher can merge requests with any number of candidates.
The item-id embedding table is a weight of the graph: ids go in, rows are
gathered inside the graph, and the table never leaves the server. The int8
variant stores the table as int8 with a per-row fp16 scale and dequantizes
the gathered rows in the graph.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class UserTower(nn.Module):
    def __init__(self, num_rows: int, user_dim: int, dim: int) -> None:
        super().__init__()
        self.history_embedding = nn.Embedding(num_rows, dim, padding_idx=0)
        self.net = mlp([user_dim + dim, 128, dim])

    def forward(self, user_features: torch.Tensor, history: torch.Tensor) -> torch.Tensor:
        mask = (history > 0).unsqueeze(-1).float()
        summed = (self.history_embedding(history) * mask).sum(dim=1)
        mean = summed / mask.sum(dim=1).clamp(min=1.0)
        return F.normalize(self.net(torch.cat([user_features, mean], dim=-1)), dim=-1)


class ItemTower(nn.Module):
    def __init__(self, num_rows: int, item_dim: int, dim: int) -> None:
        super().__init__()
        self.id_embedding = nn.Embedding(num_rows, dim)
        self.net = mlp([item_dim + dim, 128, dim])

    def forward(self, item_rows: torch.Tensor, item_features: torch.Tensor) -> torch.Tensor:
        x = torch.cat([self.id_embedding(item_rows), item_features], dim=-1)
        return F.normalize(self.net(x), dim=-1)


class TwoTower(nn.Module):
    def __init__(self, num_rows: int, user_dim: int, item_dim: int, dim: int) -> None:
        super().__init__()
        self.user = UserTower(num_rows, user_dim, dim)
        self.item = ItemTower(num_rows, item_dim, dim)
        # Learned inverse temperature for the sampled softmax.
        self.log_scale = nn.Parameter(torch.tensor(2.5))


class Ranker(nn.Module):
    """score(item_row, user_vector, user_features, item_features, retrieval_score)."""

    def __init__(self, num_rows: int, user_dim: int, item_dim: int, dim: int) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(num_rows, dim) * 0.05)
        self.net = mlp([dim * 3 + user_dim + item_dim + 1, 128, 64, 1])
        # The MLP learns a correction on top of the retrieval score, which
        # alone is already a good ranking; it starts near zero.
        self.retrieval_weight = nn.Parameter(torch.tensor(10.0))
        with torch.no_grad():
            last = self.net[-1]
            assert isinstance(last, nn.Linear)
            last.weight.mul_(0.01)
            last.bias.zero_()

    def features(
        self,
        rows: torch.Tensor,
        user_vector: torch.Tensor,
        user_features: torch.Tensor,
        item_features: torch.Tensor,
        retrieval_score: torch.Tensor,
    ) -> torch.Tensor:
        return torch.cat(
            [rows, user_vector, rows * user_vector, user_features, item_features, retrieval_score],
            dim=-1,
        )

    def forward(
        self,
        item_id: torch.Tensor,  # [B, 1] int64 embedding row
        user_vector: torch.Tensor,  # [B, D]
        user_features: torch.Tensor,  # [B, U]
        item_features: torch.Tensor,  # [B, I]
        retrieval_score: torch.Tensor,  # [B, 1]
    ) -> torch.Tensor:
        rows = self.table[item_id.squeeze(-1)]
        x = self.features(rows, user_vector, user_features, item_features, retrieval_score)
        return self.net(x) + self.retrieval_weight * retrieval_score  # [B, 1]


class Int8Ranker(nn.Module):
    """The same ranker with its table stored as int8 rows and per-row scales."""

    def __init__(self, ranker: Ranker) -> None:
        super().__init__()
        table = ranker.table.detach()
        # fp16 scales: 2 bytes a row instead of 4 (10 MB of a 5M-row table's
        # 340), no measurable ranking loss (docs/benchmarks.md). Rows are
        # quantized against the rounded scale, so dequantizing is exact.
        scale = (table.abs().amax(dim=1, keepdim=True).clamp(min=1e-4) / 127.0).to(torch.float16)
        quantized = torch.round(table / scale.to(torch.float32)).clamp(-127, 127)
        self.register_buffer("table_q", quantized.to(torch.int8))
        self.register_buffer("scale", scale)
        self.net = ranker.net
        self.retrieval_weight = ranker.retrieval_weight
        self._features = ranker.features

    def forward(
        self,
        item_id: torch.Tensor,
        user_vector: torch.Tensor,
        user_features: torch.Tensor,
        item_features: torch.Tensor,
        retrieval_score: torch.Tensor,
    ) -> torch.Tensor:
        index = item_id.squeeze(-1)
        rows = self.table_q[index].to(torch.float32) * self.scale[index].to(torch.float32)
        x = self._features(rows, user_vector, user_features, item_features, retrieval_score)
        return self.net(x) + self.retrieval_weight * retrieval_score
