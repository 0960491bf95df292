"""What a caller asks of the gateway and what it answers, and the public
edge's checks: a bad request is the caller's error, never a degraded answer
that looks like an outage."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from recserve_kit.errors import InvalidArgument
from recserve_kit.validation import check_id, check_ids
from recserve_model.catalogue import NO_ATTRIBUTES, AttributeFilter, CatalogueSchema
from services.gateway.segment_lists import GENDERS, MAX_AGE, Attributes, SegmentLists

MAX_K = 100
MAX_OCCUPATION = 64
MAX_FILTER_VALUES = 1000
MAX_DECLARED = 32  # a new user's declared attributes in one request
NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")  # as the dataset contract names columns


@dataclass(frozen=True)
class Query:
    user_id: str
    k: int
    categories: tuple[str, ...] = ()
    exclude_item_ids: tuple[str, ...] = ()
    item_id: str = ""  # SimilarItems only
    attributes: Attributes | None = None  # a new user's, for the segment list
    debug: bool = False  # stage timings and each item's explanation in the answer
    model_version: str = ""  # debug only: rank with this loaded version (a comparison)
    attribute_filters: tuple[AttributeFilter, ...] = ()  # all must hold


@dataclass(frozen=True)
class Explanation:
    """Where an item came from and the parts of its score (debug answers)."""

    stage: str  # "rank", or the fallback source in lower case ("popular", ...)
    retrieval_score: float = 0.0
    retrieval_rank: int = -1  # -1: not among the retrieved candidates
    ranker_score: float = 0.0
    affinity: float = 0.0


@dataclass(frozen=True)
class Item:
    item_id: str
    score: float
    title: str
    categories: tuple[str, ...]
    explanation: Explanation | None = None


@dataclass(frozen=True)
class Answer:
    items: list[Item]
    degraded: bool = False
    reason: str = ""  # a DegradedReason name without the prefix, e.g. "RANKER_TIMEOUT"
    model_version: str = ""
    timings: list[tuple[str, float]] = field(default_factory=list)
    source: str = ""  # a FallbackSource name without the prefix, e.g. "PRECOMPUTED"


def check_query(
    query: Query,
    need_user: bool,
    known_categories: frozenset[str],
    schema: CatalogueSchema = NO_ATTRIBUTES,
    segments: SegmentLists | None = None,
) -> None:
    if need_user and not query.user_id:
        raise InvalidArgument("user_id", "is required")
    if query.user_id:
        check_id(query.user_id, "user_id")
    if query.item_id:
        check_id(query.item_id, "item_id")
    if not 1 <= query.k <= MAX_K:
        raise InvalidArgument("k", f"must be between 1 and {MAX_K}, got {query.k}")
    if len(query.categories) > MAX_FILTER_VALUES or any(not c for c in query.categories):
        raise InvalidArgument("filter.categories", f"at most {MAX_FILTER_VALUES} non-empty values")
    if known_categories:  # known once the catalogue (or the popular lists) arrived
        unknown = [c for c in query.categories if c not in known_categories]
        if unknown:
            raise InvalidArgument("filter.categories", f"unknown category {unknown[0][:64]!r}")
    if len(query.exclude_item_ids) > MAX_FILTER_VALUES:
        raise InvalidArgument("filter.exclude_item_ids", f"at most {MAX_FILTER_VALUES} ids")
    check_ids(query.exclude_item_ids, "filter.exclude_item_ids")
    check_attribute_filters(query.attribute_filters, schema)
    if query.model_version:
        check_id(query.model_version, "model_version")
    check_attributes(query.attributes, segments)


def check_attribute_filters(filters: tuple[AttributeFilter, ...], schema: CatalogueSchema) -> None:
    problem = schema.filters_problem(filters)
    if problem is not None:
        raise InvalidArgument("filter.attributes" + problem[0], problem[1])


def check_attributes(a: Attributes | None, segments: SegmentLists | None = None) -> None:
    if a is None:
        return
    if a.declared:
        check_declared(a, segments)
        return
    if not 1 <= a.age <= MAX_AGE:
        raise InvalidArgument("attributes.age", f"must be between 1 and {MAX_AGE}, got {a.age}")
    if a.gender not in GENDERS:
        raise InvalidArgument("attributes.gender", f"must be one of {', '.join(GENDERS)}")
    if not a.occupation or len(a.occupation) > MAX_OCCUPATION:
        raise InvalidArgument("attributes.occupation", f"1 to {MAX_OCCUPATION} characters")


def check_declared(a: Attributes, segments: SegmentLists | None) -> None:
    """Declared attributes by name: each one the catalogue declares, each
    value of its kind; a categorical value no training user had is no error
    (it is served as not given, or as "other" where the dataset has it)."""
    if a.age or a.gender or a.occupation:
        raise InvalidArgument(
            "attributes.values",
            "give the typed fields (age, gender, occupation) or values, not both",
        )
    if len(a.declared) > MAX_DECLARED:
        raise InvalidArgument("attributes.values", f"at most {MAX_DECLARED} attributes")
    if segments is None:
        return  # (no lists loaded: the popular list answers whatever is given)
    for name, text in a.declared:
        if not NAME.fullmatch(name):  # (then safe to echo in the field)
            raise InvalidArgument("attributes.values", f"{name[:64]!r} is no attribute name")
        problem = segments.problem(name, text)
        if problem is not None:
            raise InvalidArgument(f'attributes.values["{name[:64]}"]', problem)
