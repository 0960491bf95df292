"""The ranker's blends and held-out checks score every window user: in
chunks of users (``pipelines.ranker_examples.in_chunks``), so the model's
activations stay bounded whatever the shoppers' count (40,000 of them
scored at once went past 23 GB). The starting blends are tried on parts
scored once (``Ranker.parts``): each is the model's own score to the bit."""

from __future__ import annotations

import torch
from torch import nn

from pipelines.models import Ranker
from pipelines.ranker_examples import in_chunks
from recserve_model.sources import SOURCE_FEATURES


def test_scores_in_chunks_are_the_scores_at_once_with_a_bounded_batch():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    features = torch.randn(1_000, 30, 8)  # users x candidates x inputs
    seen: list[int] = []

    def score(users: torch.Tensor) -> torch.Tensor:
        seen.append(len(users))
        return net(features[users]).squeeze(-1)

    users = torch.randperm(1_000)[:777]
    with torch.no_grad():
        at_once = score(users)
        seen.clear()
        chunked = in_chunks(score, 100)(users)
    assert torch.allclose(chunked, at_once, atol=1e-6)
    assert seen == [100] * 7 + [77]


def test_a_training_step_is_one_chunk_and_keeps_its_gradient():
    net = nn.Linear(4, 1)
    features = torch.randn(10, 5, 4)
    scored = in_chunks(lambda users: net(features[users]).squeeze(-1), 100)(torch.arange(10))
    scored.sum().backward()
    assert net.weight.grad is not None and scored.shape == (10, 5)


def test_a_blend_of_the_parts_is_the_models_score_to_the_bit():
    torch.manual_seed(0)
    rows, batch = 40, 64
    ranker = Ranker(rows, 8, 4, 16).eval()
    inputs = (
        torch.randint(0, rows, (batch, 1)), torch.randn(batch, 16), torch.randn(batch, 8),
        torch.randn(batch, 4), torch.randn(batch, 1), torch.randn(batch, ranker.affinity.rank),
        torch.rand(batch, SOURCE_FEATURES),
    )  # fmt: skip
    with torch.no_grad():
        parts = ranker.parts(*inputs)
        assert [p.shape for p in parts] == [(batch, 1)] * 5
        for weights in [(10.0, 10.0, 0.0, 0.0), (1.0, 0.0, 3.0, 0.0), (0.0, 5.0, 1.0, 30.0)]:
            for weight, value in zip(
                (ranker.retrieval_weight, ranker.affinity_weight, ranker.neighbour_weight,
                 ranker.repeat_weight), weights, strict=True,
            ):  # fmt: skip
                weight.fill_(value)
            assert torch.equal(ranker.blend(*parts), ranker(*inputs))


def test_the_tables_gradient_is_the_same_on_every_run():
    """Training the same data twice gives the same ranker: the id table's
    rows are gathered by ``F.embedding``, whose backward sums in a fixed
    order (indexing's backward on CPU sums as its threads race, and ML-1M's
    builds kept a trained epoch or not by that noise)."""
    torch.manual_seed(0)
    rows, batch = 300, 20_000  # many candidates of few items: sums of many rows
    ranker = Ranker(rows, 8, 4, 16)
    inputs = (
        torch.randint(0, rows, (batch, 1)), torch.randn(batch, 16), torch.randn(batch, 8),
        torch.randn(batch, 4), torch.randn(batch, 1), torch.randn(batch, ranker.affinity.rank),
        torch.rand(batch, SOURCE_FEATURES),
    )  # fmt: skip
    weights = torch.randn(batch, 1)

    def table_gradient() -> torch.Tensor:
        ranker.zero_grad()
        (ranker(*inputs) * weights).sum().backward()
        assert ranker.table.grad is not None
        return ranker.table.grad.clone()

    first = table_gradient()
    assert all(torch.equal(first, table_gradient()) for _ in range(10))
