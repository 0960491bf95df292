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


class Drifting(torch.nn.Module):
    """A one-weight ranker whose every optimiser step moves its weight by
    ``step``: upwards it ranks the labelled items higher each epoch, downwards lower."""

    def __init__(self, step: float) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.tensor(1.0))
        self.step = step

    def zero_grad(self, set_to_none: bool = True) -> None:
        pass

    def step_once(self) -> None:
        with torch.no_grad():
            self.weight += self.step


def epochs_trained(step: float) -> tuple[int, list[float], float]:
    """keep_best_epoch over 200 users, each with one labelled candidate among
    20 scored by noise plus 0.05 x (weight - 1) for the labelled one: (kept
    epoch, held-out NDCG by epoch, the weight left)."""
    from types import SimpleNamespace

    from rich.progress import Progress

    from pipelines.train import TrainConfig, keep_best_epoch

    generator = torch.Generator().manual_seed(0)
    noise = torch.rand(200, 20, generator=generator)
    labels = torch.zeros(200, 20)
    labels[:, 0] = 1.0
    model = Drifting(step)

    def logits(users: torch.Tensor) -> torch.Tensor:
        return noise[users] + 0.05 * (model.weight - 1.0) * labels[users]

    optimizer = SimpleNamespace(zero_grad=lambda: None, step=model.step_once)
    users = torch.arange(200)
    with Progress(disable=True) as progress:
        kept, by_epoch = keep_best_epoch(
            model, logits, labels, users[40:], users[:40], (optimizer, generator),
            TrainConfig(ranker_epochs=8), progress,
        )  # fmt: skip
    return kept, by_epoch, model.weight.item()


def test_training_stops_once_epochs_stop_helping_and_keeps_the_start():
    from pipelines.train import PATIENCE

    kept, by_epoch, weight = epochs_trained(step=-1.0)
    assert kept == 0 and weight == 1.0  # the start's weight, restored
    assert len(by_epoch) == PATIENCE + 1  # the start and PATIENCE epochs, not 8
    assert by_epoch[-1] < by_epoch[0]


def test_training_runs_every_epoch_while_they_help():
    kept, by_epoch, _ = epochs_trained(step=+1.0)
    assert len(by_epoch) == 9 and kept > 0
