"""Typed results and request inputs, independent of the generated classes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class AttributeCondition:
    """One condition on a filterable attribute the catalogue declares:
    ``any_of`` for a categorical, tags or boolean one ("true"/"false"),
    ``min``/``max`` (inclusive) for a numeric one."""

    name: str
    any_of: Sequence[str] = ()
    min: float | None = None
    max: float | None = None


@dataclass(frozen=True)
class ItemFilter:
    """Any-of categories (empty: every category), ids never to return, and
    conditions on attributes (all must hold)."""

    categories: Sequence[str] = ()
    exclude_item_ids: Sequence[str] = ()
    attributes: Sequence[AttributeCondition] = ()


@dataclass(frozen=True)
class UserAttributes:
    """A new user's sign-up data: answered with the list for users like them.
    MovieLens's three typed fields, or any user attribute the catalogue's
    dataset declares by name in ``values`` (numbers in decimal, booleans
    "true"/"false"); one or the other."""

    age: int = 0
    gender: str = ""
    occupation: str = ""
    values: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Explanation:
    """Why an item is in the list (only with ``debug=True``).

    ``stage``: "rank" (retrieved, then ranked) or the fallback the item came
    from ("retrieval_order", "precomputed", "attributes", "popular")."""

    stage: str
    retrieval_score: float
    retrieval_rank: int
    ranker_score: float
    affinity: float


@dataclass(frozen=True)
class Item:
    item_id: str
    score: float
    title: str
    categories: tuple[str, ...]
    explanation: Explanation | None = None


@dataclass(frozen=True)
class StageTiming:
    stage: str
    duration_ms: float


@dataclass(frozen=True)
class Recommendations:
    """One answer of Recommend or SimilarItems.

    A degraded answer is still an answer: ``degraded_reason`` names the
    stage and failure ("RETRIEVER_TIMEOUT"), ``fallback_source`` where its
    items came from ("POPULAR"; Recommend only). ``recommendation_id`` is
    the id the stack recorded the answer under (its impression), to report
    outcomes against (None from a server older than it); ``raw`` is the
    reply message itself, for fields newer than this class."""

    request_id: str
    items: tuple[Item, ...]
    degraded: bool
    degraded_reason: str | None
    fallback_source: str | None
    model_version: str
    stage_timings: tuple[StageTiming, ...]
    recommendation_id: str | None = None
    raw: Any = None

    @property
    def item_ids(self) -> list[str]:
        return [item.item_id for item in self.items]

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON (``raw`` left out)."""
        data = asdict(self)
        data.pop("raw")
        return data


@dataclass(frozen=True)
class Event:
    """One thing a user did with an item, for the events API.

    ``event_id`` is yours and unique per event: derive it from your own
    record of what happened (the click's id), so that sending it again (your
    retry, the batcher's) is counted once; ``new_event_id()`` only for an
    event that has no id of its own. ``event_type``: one the dataset
    declares; ``value``: within its range for a type with one (a rating),
    else 0. ``timestamp``: whole seconds since 1970 UTC, 0 for now.
    ``recommendation_id``: the answer the item was shown in, when it was."""

    event_id: str
    user_id: str
    item_id: str
    event_type: str
    value: float = 0.0
    timestamp: int = 0
    recommendation_id: str = ""


@dataclass(frozen=True)
class PushResult:
    """What one PushEvents call kept: ``accepted`` new events, and
    ``duplicates``, events whose id was kept before (not kept again)."""

    accepted: int
    duplicates: int
