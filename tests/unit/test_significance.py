"""The rule that keeps a trained epoch over the one kept (and a blend over
the best single score, tests/unit/test_item_model_choice.py): a win by more
than two standard errors of the paired per-user difference."""

from __future__ import annotations

import torch

from pipelines.ranker_examples import significantly_better


def test_a_noise_win_does_not_replace_what_is_kept():
    start = torch.tensor([0.2, 0.0, 0.5, 0.1] * 50)
    noisy = start + torch.tensor([0.3, -0.3, 0.2, -0.19] * 50)  # mean +0.0025, spread 0.26
    assert float(noisy.mean()) > float(start.mean())
    assert not significantly_better(noisy, start)


def test_a_consistent_win_replaces_it():
    start = torch.tensor([0.2, 0.0, 0.5, 0.1] * 50)
    better = start + torch.tensor([0.02, 0.01, 0.03, 0.01] * 50)
    assert significantly_better(better, start)
    assert not significantly_better(start, better)
