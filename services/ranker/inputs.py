"""What the ranker's requests carry, as the domain takes them: a user, the
candidates, one Score request whichever form it came in, its answer, and
the user tower's input rows."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from recserve_model.encoding import Encoder
from services.ranker.loaded import Loaded


@dataclass(frozen=True)
class Scored:
    scores: np.ndarray
    model_version: str
    unknown_items: int  # scored with the out-of-vocabulary row
    affinity: np.ndarray | None = None  # each candidate's, when explained


@dataclass(frozen=True)
class UserInput:
    age: float
    gender: str
    occupation: str
    rating_count: float
    mean_rating: float
    recent_item_ids: Sequence[str]
    user_id: str = ""  # which version a rollout serves this user
    attributes: Mapping[str, str] = field(default_factory=dict)  # declared, as text


@dataclass(frozen=True)
class CandidateInput:
    item_id: str
    year: float
    popularity: float
    mean_rating: float
    categories: Sequence[str]
    retrieval_score: float
    attributes: Mapping[str, str] = field(default_factory=dict)  # declared, as text


@dataclass(frozen=True)
class ScoreQuery:
    """One Score request, whichever form it came in."""

    user: UserInput
    item_ids: Sequence[str]
    item_features: Callable[[Loaded], np.ndarray]  # the rows, as a version encodes them
    retrieval_scores: np.ndarray
    timeout_s: float
    user_vector: np.ndarray | None = None
    vector_version: str = ""  # the version that computed user_vector ("" : any)
    vector_field: str = "user_vector"  # named in errors about the vector
    explain: bool = False  # return each candidate's affinity too
    version: str = ""  # score with this loaded version, not the user's (a comparison)
    # [n, SOURCE_FEATURES]: each candidate's neighbour score and sources; None:
    # no sources (every candidate a nearest neighbour, no neighbour score).
    source_features: np.ndarray | None = None


def user_arrays(encoder: Encoder, users: Sequence[UserInput]) -> tuple[np.ndarray, np.ndarray]:
    """The user tower's inputs, one row per user."""
    features = np.stack(
        [
            encoder.user(
                user.age,
                user.gender,
                user.occupation,
                user.rating_count,
                user.mean_rating,
                user.attributes,
            )
            for user in users
        ]
    )
    return features, np.stack([encoder.history(user.recent_item_ids) for user in users])
