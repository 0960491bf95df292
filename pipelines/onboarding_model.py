"""Lists for new users: no history yet, but known attributes.

What a new user rates first is modelled from their attributes alone: a
softmax over items whose logits are an item bias plus one learned weight per
(attribute value, item), i.e. multinomial logistic regression on one-hot
gender, age band and occupation, fitted to every training user's first
ratings. The effects add up, so a segment with few users (294 segments,
about 940 users) borrows what its gender, its age band and its occupation
each say from everyone else. L2 and the number of first ratings were chosen
on seed 12 of `python -m bench cold-start` (1e-3 and 10, against 1e-2, 1e-4
and 20); the two-tower's user tower with an empty history, alone or blended
in, did worse (the bench keeps those rows).

The build writes every segment's list into the artifact
(``cold_start.json``); the gateway serves them to a user the features
service does not know when the request carries the user's attributes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from recserve_model.encoding import Encoder
from recserve_model.segments import AGE_BANDS, GENDERS, band, band_age, key

FIRST_RATINGS = 10  # a user's first ratings: what new users rate
LIST_LENGTH = 200
L2 = 1e-3
MAX_ITERATIONS = 300


def attribute_columns(users: pd.DataFrame, occupations: list[str]) -> np.ndarray:
    """One-hot gender, age band and occupation, one row per user."""
    bands = len(AGE_BANDS) - 1
    out = np.zeros((len(users), len(GENDERS) + bands + len(occupations)), np.float32)
    rows = np.arange(len(users))
    genders = [GENDERS.index(g) if g in GENDERS else -1 for g in users["gender"]]
    known = np.asarray(genders) >= 0  # a dataset without gender has no column set
    out[rows[known], np.asarray(genders)[known]] = 1
    out[rows, [len(GENDERS) + band(float(a)) for a in users["age"]]] = 1
    at = {o: i for i, o in enumerate(occupations)}
    out[rows, [len(GENDERS) + bands + at[o] for o in users["occupation"]]] = 1
    return out


@dataclass
class OnboardingModel:
    """Logits over item rows (row 0, out of vocabulary, included) for new
    users with given attributes."""

    weights: np.ndarray  # [attribute columns, item rows]
    bias: np.ndarray  # [item rows]
    occupations: list[str]

    def scores(self, users: pd.DataFrame) -> np.ndarray:
        return attribute_columns(users, self.occupations) @ self.weights + self.bias[None, :]


def first_ratings(train: pd.DataFrame) -> pd.DataFrame:
    ordered = train.sort_values(["user_id", "timestamp", "item_id"], kind="stable")
    return ordered.groupby("user_id").head(FIRST_RATINGS)


def fit(
    train: pd.DataFrame, users: pd.DataFrame, encoder: Encoder, occupations: list[str]
) -> OnboardingModel:
    """Fit the model to each training user's first ratings (full-batch L-BFGS
    from zeros: deterministic, a few seconds on one core). Users with the same
    attributes share a row: the loss is the count-weighted cross-entropy of
    each distinct attribute row, the same objective as one row per rating."""
    first = first_ratings(train).merge(users, on="user_id")
    columns, group = np.unique(attribute_columns(first, occupations), axis=0, return_inverse=True)
    counts = np.zeros((len(columns), encoder.spec.num_rows), np.float32)
    np.add.at(counts, (group.ravel(), encoder.item_rows(list(first["item_id"]))), 1)
    x, y = torch.from_numpy(columns), torch.from_numpy(counts / len(first))
    weights = torch.zeros(x.shape[1], encoder.spec.num_rows, requires_grad=True)
    bias = torch.zeros(encoder.spec.num_rows, requires_grad=True)
    optimizer = torch.optim.LBFGS(
        [weights, bias], max_iter=MAX_ITERATIONS, line_search_fn="strong_wolfe"
    )

    def loss() -> torch.Tensor:
        optimizer.zero_grad()
        log_p = torch.log_softmax(x @ weights + bias, dim=1)
        value = -(y * log_p).sum() + L2 * (weights**2).sum()
        value.backward()
        return value

    optimizer.step(loss)
    return OnboardingModel(weights.detach().numpy(), bias.detach().numpy(), occupations)


def segment_lists(
    train: pd.DataFrame,
    users: pd.DataFrame,
    encoder: Encoder,
    occupations: list[str],
    inactive: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """Every segment's top LIST_LENGTH active item ids, best first (ties,
    such as items no training user rated first, by popularity)."""
    model = fit(train, users, encoder, occupations)
    segments = pd.DataFrame(
        [
            (gender, band_age(b), occupation)
            for gender in GENDERS
            for b in range(len(AGE_BANDS) - 1)
            for occupation in occupations
        ],
        columns=["gender", "age", "occupation"],
    )
    scores = model.scores(segments)
    popularity = np.bincount(
        encoder.item_rows(list(train["item_id"])), minlength=encoder.spec.num_rows
    )
    item_of = {row: item for item, row in encoder.row_of.items()}
    listed = np.ones(encoder.spec.num_rows, dtype=bool)
    listed[0] = False  # row 0: OOV
    listed[encoder.item_rows(sorted(inactive))] = False
    candidates = np.flatnonzero(listed)
    lists = {}
    for segment, row in zip(segments.itertuples(), scores, strict=True):
        order = np.lexsort((-popularity[candidates], -row[candidates]))
        top = candidates[order[:LIST_LENGTH]]
        lists[key(segment.gender, segment.age, segment.occupation)] = [item_of[int(r)] for r in top]
    return {"age_bands": list(AGE_BANDS), "lists": lists}
