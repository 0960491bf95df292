"""The rule that keeps a trained epoch over the one kept (and a blend over
the best single score, tests/unit/test_item_model_choice.py): a win by more
than two standard errors of the paired per-user difference."""

from __future__ import annotations

import numpy as np
import torch

from pipelines.ranker_examples import significantly_better
from pipelines.selection_window import weighted_better


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


def test_the_weighted_rule_counts_users_by_their_share():
    """The item-item source's recency (pipelines.item_neighbours.choose_recency):
    window users weighted as the served users of their history's length are."""
    base = np.array([0.2, 0.0, 0.5, 0.1] * 50)
    lift = np.array([0.02, 0.01, 0.03, 0.01] * 50)
    even = np.full(200, 1 / 200)
    assert weighted_better(base + lift, base, even)
    assert not weighted_better(base, base + lift, even)
    noisy = base + np.array([0.3, -0.3, 0.2, -0.19] * 50)
    assert not weighted_better(noisy, base, even)
    # Better for one half of the users, worse for the other: the weights decide.
    mixed = base + np.where(np.arange(200) < 100, 0.03, -0.03)
    first_half = np.where(np.arange(200) < 100, 0.9 / 100, 0.1 / 100)
    assert weighted_better(mixed, base, first_half)
    assert not weighted_better(mixed, base, first_half[::-1])
