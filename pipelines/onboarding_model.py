"""Lists for new users: no history yet, but known attributes.

What a new user rates first is modelled from their attributes alone: a
softmax over items whose logits are an item bias plus one learned weight per
(attribute value, item), i.e. multinomial logistic regression on the one-hot
attributes (MovieLens: gender, age band and occupation; any dataset: the
user attributes it declares, below), fitted to every training user's first
ratings. The effects add up, so a segment with few users (294 full segments
on MovieLens, about 940 users) borrows what its gender, its age band and its
occupation each say from everyone else; a value not given adds nothing. L2
and the number of first ratings were chosen on seed 12 of `python -m bench
cold-start` (1e-3 and 10, against 1e-2, 1e-4 and 20); the two-tower's user
tower with an empty history, alone or blended in, did worse (the bench keeps
those rows).

Which attributes: the dataset's categorical, boolean and numeric user
columns (numeric ones in bands: `age` in MovieLens-1M's, any other at its
users' quintiles); a categorical one with more than MAX_VALUES values (a zip
code) is left out, and so is any that would take the segments past
MAX_SEGMENTS, in declaration order (MovieLens's three first, the order its
lists were first built in).

The build writes every segment's list into the artifact
(``cold_start.json``); the gateway serves them to a user the features
service does not know when the request carries the user's attributes.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from pipelines.dataset import MovieLens
from recserve_model.encoding import Encoder
from recserve_model.segments import AGE_BANDS, BOOLEAN, Attribute, segment_key

FIRST_RATINGS = 10  # a user's first ratings: what new users rate
LIST_LENGTH = 200
L2 = 1e-3
MAX_ITERATIONS = 300
MAX_VALUES = 64  # a categorical attribute with more values is no segment (a zip code)
MAX_SEGMENTS = 4096  # (values + "not given") multiplied over the attributes
QUANTILE_BANDS = 5
FIRST = ("gender", "age", "occupation")  # MovieLens's, in the order its lists were built
MOVIELENS_KINDS = {"age": "numeric", "gender": "categorical", "occupation": "categorical"}
SCORED_AT_ONCE = 256  # segments scored together: segments x items floats at a time


def segment_inputs(
    data: MovieLens,
) -> tuple[pd.DataFrame, tuple[Attribute, ...], tuple[str, ...]]:
    """The users' attribute values, the attributes segments use, the declared
    ones left out."""
    if data.user_attributes is None:  # frames made in code: MovieLens's three
        users, kinds = data.users, MOVIELENS_KINDS
    else:
        users, kinds = data.user_attributes, data.user_kinds
    return users, *attributes_of(kinds, users)


def attributes_of(
    kinds: Mapping[str, str], users: pd.DataFrame
) -> tuple[tuple[Attribute, ...], tuple[str, ...]]:
    """The attributes segments use, from the declared user columns' kinds
    (categorical, boolean, numeric, ...) and the training users' values;
    and the declared ones left out."""
    names = [n for n in FIRST if n in kinds] + [n for n in kinds if n not in FIRST]
    used: list[Attribute] = []
    segments = 1
    for name in names:
        attribute = _attribute(name, kinds[name], users[name])
        if attribute is None or segments * (len(attribute.tokens) + 1) > MAX_SEGMENTS:
            continue
        used.append(attribute)
        segments *= len(attribute.tokens) + 1
    unused = tuple(n for n in names if n not in {a.name for a in used})
    return tuple(used), unused


def _attribute(name: str, kind: str, column: pd.Series) -> Attribute | None:
    given = column.dropna()
    if kind == "boolean":
        return Attribute(name, BOOLEAN)
    if kind == "categorical":
        values = sorted({str(v) for v in given if str(v)})
        return Attribute(name, tuple(values)) if 0 < len(values) <= MAX_VALUES else None
    if kind != "numeric" or given.empty:
        return None
    if name == "age":
        return Attribute(name, edges=tuple(float(e) for e in AGE_BANDS))
    quantiles = np.quantile(given.astype(float), np.linspace(0, 1, QUANTILE_BANDS + 1))
    edges = tuple(float(e) for e in np.unique(quantiles))
    return Attribute(name, edges=edges if len(edges) > 1 else (edges[0], edges[0] + 1))


def attribute_columns(users: pd.DataFrame, attributes: tuple[Attribute, ...]) -> np.ndarray:
    """One-hot attribute tokens, one row per user (none set for a value not given)."""
    width = sum(len(a.tokens) for a in attributes)
    out = np.zeros((len(users), width), np.float32)
    offset = 0
    for attribute in attributes:
        at = {t: offset + i for i, t in enumerate(attribute.tokens)}
        for row, value in enumerate(users[attribute.name]):
            column = at.get(attribute.token(value))
            if column is not None:
                out[row, column] = 1
        offset += len(attribute.tokens)
    return out


@dataclass
class OnboardingModel:
    """Logits over item rows (row 0, out of vocabulary, included) for new
    users with given attributes."""

    weights: np.ndarray  # [attribute columns, item rows]
    bias: np.ndarray  # [item rows]
    attributes: tuple[Attribute, ...]

    def scores(self, users: pd.DataFrame) -> np.ndarray:
        return attribute_columns(users, self.attributes) @ self.weights + self.bias[None, :]


def first_ratings(train: pd.DataFrame) -> pd.DataFrame:
    ordered = train.sort_values(["user_id", "timestamp", "item_id"], kind="stable")
    return ordered.groupby("user_id").head(FIRST_RATINGS)


def fit(
    train: pd.DataFrame, users: pd.DataFrame, encoder: Encoder, attributes: tuple[Attribute, ...]
) -> OnboardingModel:
    """Fit the model to each training user's first ratings (full-batch L-BFGS
    from zeros: deterministic, a few seconds on one core). Users with the same
    attributes share a row: the loss is the count-weighted cross-entropy of
    each distinct attribute row, the same objective as one row per rating."""
    first = first_ratings(train).merge(users, on="user_id")
    columns, group = np.unique(attribute_columns(first, attributes), axis=0, return_inverse=True)
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
    return OnboardingModel(weights.detach().numpy(), bias.detach().numpy(), attributes)


def segments_of(attributes: tuple[Attribute, ...]) -> pd.DataFrame:
    """Every segment: each attribute's tokens and "not given", all but none given."""
    choices = [(*a.tokens, "") for a in attributes]
    rows = [row for row in itertools.product(*choices) if any(row)]
    names = [a.name for a in attributes]
    frame = pd.DataFrame(rows, columns=names, dtype=object)
    for a in attributes:  # a numeric segment is served at its band's lower edge
        if a.numeric:
            frame[a.name] = [a.edges[int(t)] if t else None for t in frame[a.name]]
    return frame


def segment_lists(
    train: pd.DataFrame,
    users: pd.DataFrame,
    encoder: Encoder,
    attributes: tuple[Attribute, ...],
    unused: tuple[str, ...] = (),
    inactive: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """Every segment's top LIST_LENGTH active item ids, best first (ties,
    such as items no training user rated first, by popularity)."""
    if not attributes:
        return {"attributes": [], "unused": list(unused), "lists": {}}
    model = fit(train, users, encoder, attributes)
    segments = segments_of(attributes)
    popularity = np.bincount(
        encoder.item_rows(list(train["item_id"])), minlength=encoder.spec.num_rows
    )
    item_of = {row: item for item, row in encoder.row_of.items()}
    listed = np.ones(encoder.spec.num_rows, dtype=bool)
    listed[0] = False  # row 0: OOV
    listed[encoder.item_rows(sorted(inactive))] = False
    candidates = np.flatnonzero(listed)
    lists = {}
    for start in range(0, len(segments), SCORED_AT_ONCE):
        chunk = segments.iloc[start : start + SCORED_AT_ONCE]
        scores = model.scores(chunk)
        for segment, row in zip(chunk.to_dict("records"), scores, strict=True):
            order = np.lexsort((-popularity[candidates], -row[candidates]))
            top = candidates[order[:LIST_LENGTH]]
            lists[segment_key(attributes, segment)] = [item_of[int(r)] for r in top]
    return {
        "attributes": [a.to_json() for a in attributes],
        "unused": list(unused),
        "lists": lists,
    }
