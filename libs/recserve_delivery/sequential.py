"""The outcome guardrail's sequential test: the mixture sequential
probability ratio test (mSPRT; Johari, Pekelis and Walsh, "Always valid
inference", 2017; the test behind Optimizely's and Eppo's sequential
results) on the difference in conversion between two arms, with a normal
mixture over the alternatives.

Why this one: the judge looks once a second, and an mSPRT's p-values stay
valid at every look (Ville's inequality: the chance that the ratio ever
passes 1/alpha under the null is at most alpha), so it stops as soon as the
evidence suffices, never peeks unfairly, and needs no plan of the looks, as
a group-sequential design with alpha spending would (the judge's looks
follow the traffic, not a calendar). Its one parameter, the mixture's
spread, is set to the minimum effect the guardrail is meant to catch.

Two tests on d = candidate rate - stable rate, each at alpha:

- *worse*: the null d = 0, rejected with d < 0: a significant drop, the
  rollout rolls back;
- *not worse*: the null d = -margin (margin = the minimum drop x the
  stable's rate), rejected with d > -margin: the candidate is no worse than
  the margin, the guardrail lets the judge promote.

Each arm's variance uses its rate smoothed by one conversion in two lists,
so that an arm with no conversion yet has no zero variance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from recserve_delivery.outcomes import Cell

MIN_LISTS = 30  # per arm before either test may decide (the normal approximation)
MAX_LOG_RATIO = 700.0  # exp() stays finite


def smoothed(cell: Cell) -> float:
    return (cell.converted + 1) / (cell.lists + 2)


def log_mixture_ratio(difference: float, variance: float, null: float, spread: float) -> float:
    """log of the mSPRT's ratio for the null ``difference == null`` after
    an estimate with ``variance``, the alternatives N(null, spread^2)."""
    if variance <= 0:
        return 0.0
    s2 = spread * spread
    value = 0.5 * math.log(variance / (variance + s2))
    value += s2 * (difference - null) ** 2 / (2 * variance * (variance + s2))
    return min(value, MAX_LOG_RATIO)


@dataclass(frozen=True)
class Evidence:
    difference: float  # candidate - stable conversion
    margin: float  # the minimum drop, in conversion
    worse_p: float  # always-valid p of "no drop" (small: the candidate converts less)
    not_worse_p: float  # always-valid p of "worse by the margin" (small: it is not)
    decision: Literal["rollback", "pass"] | None


def evidence(
    stable: Cell, candidate: Cell, min_drop: float, alpha: float, baseline: float
) -> Evidence:
    """Both tests on the arms' figures so far. The margin is the drop of the
    stable's measured rate; the mixture's spread is fixed up front, the drop
    of the operator's ``baseline`` (were it the measured rate, a stable that
    converts almost never would shrink it to nothing, and no evidence would
    ever suffice)."""
    margin = min_drop * smoothed(stable)
    spread = min_drop * baseline
    difference = candidate.rate - stable.rate
    if min(stable.lists, candidate.lists) < MIN_LISTS:
        return Evidence(difference, margin, 1.0, 1.0, None)
    ps, pc = smoothed(stable), smoothed(candidate)
    variance = ps * (1 - ps) / stable.lists + pc * (1 - pc) / candidate.lists
    worse = log_mixture_ratio(difference, variance, 0.0, spread)
    not_worse = log_mixture_ratio(difference, variance, -margin, spread)
    worse_p = min(1.0, math.exp(-worse))
    not_worse_p = min(1.0, math.exp(-not_worse))
    decision: Literal["rollback", "pass"] | None = None
    if difference < 0 and worse_p <= alpha:
        decision = "rollback"
    elif difference > -margin and not_worse_p <= alpha:
        decision = "pass"
    return Evidence(difference, margin, worse_p, not_worse_p, decision)


def lists_to_decide(baseline: float, min_drop: float, alpha: float, share: float) -> float:
    """Lists served in all (both arms, ``share`` of them the candidate's)
    until a test decides when the true difference is 0 or the margin (the
    two cases take the same): where the ratio reaches 1/alpha."""
    margin = min_drop * baseline
    spread = baseline * (1 - baseline) / (share * (1 - share))

    def decided(total: float) -> bool:
        variance = spread / total
        return log_mixture_ratio(0.0, variance, -margin, margin) >= math.log(1 / alpha)

    low, high = 1.0, 1.0
    while not decided(high):
        low, high = high, high * 2
        if high > 1e15:
            return math.inf
    for _ in range(60):
        middle = math.sqrt(low * high)
        low, high = (low, middle) if decided(middle) else (middle, high)
    return max(high, MIN_LISTS / min(share, 1 - share))


def smallest_drop(
    baseline: float, alpha: float, share: float, lists_per_s: float, within_s: float
) -> float:
    """The smallest relative drop whose decision takes at most ``within_s``
    at ``lists_per_s``: what an operator may ask for instead."""
    available = lists_per_s * within_s
    low, high = 1e-4, 0.99
    if lists_to_decide(baseline, high, alpha, share) > available:
        return math.inf
    for _ in range(50):
        middle = (low + high) / 2
        fits = lists_to_decide(baseline, middle, alpha, share) <= available
        low, high = (low, middle) if fits else (middle, high)
    return high
