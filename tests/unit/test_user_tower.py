"""The user tower pools the recent items with a learned weight per position:
it starts as the plain mean over the items a user has (padding left out)
and can learn to weigh the latest ones more."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pipelines.models import UserTower
from recserve_model.encoding import HISTORY_LEN


def test_it_starts_as_the_mean_of_the_items_a_user_has_and_learns_the_positions():
    torch.manual_seed(0)
    tower = UserTower(num_rows=50, user_dim=3, dim=8)
    features = torch.rand(2, 3)
    history = torch.zeros(2, HISTORY_LEN, dtype=torch.int64)
    history[0, :3] = torch.tensor([4, 9, 17])  # most recent first, then padding
    history[1, :HISTORY_LEN] = torch.arange(1, HISTORY_LEN + 1)
    embedded = tower.history_embedding(history)
    counts = (history > 0).sum(1, keepdim=True)
    mean = embedded.sum(1) / counts
    expected = F.normalize(tower.net(torch.cat([features, mean], -1)), dim=-1)
    torch.testing.assert_close(tower(features, history), expected)
    # No items: the pooled part is zeros, not a division by nothing.
    empty = torch.zeros(1, HISTORY_LEN, dtype=torch.int64)
    assert torch.isfinite(tower(features[:1], empty)).all()
    tower(features, history).sum().backward()
    assert tower.position_logits.grad is not None
    assert tower.position_logits.grad.abs().sum() > 0
