"""Shadow scoring: the candidate version scores what the live one just
scored, after the answer has gone, and how the two differ is recorded.

Off the critical path by construction: a shadow runs as a background task
started after the live scores exist, at most ``max_in_flight`` at once, and
never while Triton has late calls outstanding (the first sign of overload);
anything over that is dropped and counted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import numpy as np
from prometheus_client import Counter, Histogram

log = logging.getLogger(__name__)

TOP_K = 20
SHADOWS = Counter(
    "recserve_ranker_shadow_total",
    "Shadow scorings by outcome (compared, dropped, failed).",
    ["outcome"],
)
OVERLAP = Histogram(
    "recserve_ranker_shadow_topk_overlap",
    f"Share of the live top {TOP_K} that the candidate also puts in its top {TOP_K}.",
    buckets=(0.1, 0.25, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0),
)
CORRELATION = Histogram(
    "recserve_ranker_shadow_rank_correlation",
    "Spearman correlation of the candidate's and the live scores over all candidates.",
    buckets=(-0.5, 0.0, 0.25, 0.5, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0),
)
SHIFT = Histogram(
    "recserve_ranker_shadow_score_shift",
    "Candidate minus live mean score, in units of the live scores' standard deviation.",
    buckets=(-2.0, -1.0, -0.5, -0.25, -0.1, 0.0, 0.1, 0.25, 0.5, 1.0, 2.0),
)


def _ranks(values: np.ndarray) -> np.ndarray:
    ranks = np.empty(len(values))
    ranks[np.argsort(values, kind="stable")] = np.arange(len(values))
    return ranks


def compare(live: np.ndarray, shadow: np.ndarray, k: int = TOP_K) -> dict[str, float]:
    """Top-k overlap, Spearman correlation and the mean shift of two score
    vectors over the same candidates."""
    if live.shape != shadow.shape or not len(live):
        raise ValueError(f"score shapes differ: {live.shape} vs {shadow.shape}")
    k = min(k, len(live))
    top_live = set(np.argsort(-live, kind="stable")[:k].tolist())
    top_shadow = set(np.argsort(-shadow, kind="stable")[:k].tolist())
    if len(live) > 1 and live.std() > 0 and shadow.std() > 0:
        correlation = float(np.corrcoef(_ranks(live), _ranks(shadow))[0, 1])
    else:
        correlation = 1.0 if np.array_equal(live, shadow) else 0.0
    spread = float(live.std()) or 1.0
    return {
        "overlap": len(top_live & top_shadow) / k,
        "rank_correlation": correlation,
        "score_shift": float(shadow.mean() - live.mean()) / spread,
    }


class Shadow:
    def __init__(self, max_in_flight: int, overloaded: Callable[[], bool]) -> None:
        self.max_in_flight = max_in_flight
        self.overloaded = overloaded
        self.in_flight: set[asyncio.Task[None]] = set()

    def submit(self, live: np.ndarray, score: Callable[[], Awaitable[np.ndarray]]) -> bool:
        """Starts one shadow scoring unless that would add to a loaded system."""
        if len(self.in_flight) >= self.max_in_flight or self.overloaded():
            SHADOWS.labels("dropped").inc()
            return False
        task = asyncio.create_task(self._run(live.copy(), score))
        self.in_flight.add(task)
        task.add_done_callback(self.in_flight.discard)
        return True

    async def _run(self, live: np.ndarray, score: Callable[[], Awaitable[np.ndarray]]) -> None:
        try:
            shadow = await score()
            figures = compare(live, shadow)
        except Exception as exc:  # the candidate's failures are the judge's business
            SHADOWS.labels("failed").inc()
            log.debug("shadow scoring failed: %s", exc)
            return
        SHADOWS.labels("compared").inc()
        OVERLAP.observe(figures["overlap"])
        CORRELATION.observe(figures["rank_correlation"])
        SHIFT.observe(figures["score_shift"])

    async def close(self) -> None:
        for task in list(self.in_flight):
            task.cancel()
        await asyncio.gather(*self.in_flight, return_exceptions=True)
