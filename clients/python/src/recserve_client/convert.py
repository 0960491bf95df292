"""Requests from arguments and typed results from replies: the one place
that knows the generated classes."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from recserve_client._proto import events_pb2 as epb
from recserve_client._proto import recommend_pb2 as pb
from recserve_client.results import (
    Event,
    Explanation,
    Item,
    ItemFilter,
    PushResult,
    Recommendations,
    StageTiming,
    UserAttributes,
)


def _filter(
    categories: Sequence[str], exclude_item_ids: Sequence[str], item_filter: ItemFilter | None
) -> pb.ItemFilter:
    conditions = []
    if item_filter is not None:
        categories = [*item_filter.categories, *categories]
        exclude_item_ids = [*item_filter.exclude_item_ids, *exclude_item_ids]
        conditions = [
            pb.AttributeFilter(name=c.name, any_of=list(c.any_of), min=c.min, max=c.max)
            for c in item_filter.attributes
        ]
    return pb.ItemFilter(
        categories=list(categories), exclude_item_ids=list(exclude_item_ids), attributes=conditions
    )


def recommend_request(
    user_id: str,
    k: int,
    *,
    categories: Sequence[str] = (),
    exclude_item_ids: Sequence[str] = (),
    item_filter: ItemFilter | None = None,
    attributes: UserAttributes | None = None,
    debug: bool = False,
    request_id: str = "",
    model_version: str = "",
    surface: str = "",
) -> pb.RecommendRequest:
    request = pb.RecommendRequest(
        surface=surface,
        request_id=request_id,
        user_id=user_id,
        k=k,
        filter=_filter(categories, exclude_item_ids, item_filter),
        debug=debug or bool(model_version),
        model_version=model_version,
    )
    if attributes is not None:
        request.attributes.CopyFrom(
            pb.UserAttributes(
                age=attributes.age,
                gender=attributes.gender,
                occupation=attributes.occupation,
                values=dict(attributes.values),
            )
        )
    return request


def similar_request(
    item_id: str,
    k: int,
    *,
    user_id: str = "",
    categories: Sequence[str] = (),
    exclude_item_ids: Sequence[str] = (),
    item_filter: ItemFilter | None = None,
    debug: bool = False,
    request_id: str = "",
    surface: str = "",
) -> pb.SimilarItemsRequest:
    return pb.SimilarItemsRequest(
        surface=surface,
        request_id=request_id,
        item_id=item_id,
        k=k,
        filter=_filter(categories, exclude_item_ids, item_filter),
        user_id=user_id,
        debug=debug,
    )


def _enum_name(enum: Any, value: int, prefix: str) -> str | None:
    if value == 0:
        return None
    try:
        return str(enum.Name(value)).removeprefix(prefix)
    except ValueError:  # a value newer than these stubs
        return f"UNKNOWN_{value}"


def _explanation(item: pb.RecommendedItem) -> Explanation | None:
    if "explanation" not in item.DESCRIPTOR.fields_by_name or not item.HasField("explanation"):
        return None
    e = item.explanation
    return Explanation(e.stage, e.retrieval_score, e.retrieval_rank, e.ranker_score, e.affinity)


def _optional_string(reply: Any, name: str) -> str | None:
    """A field the service may add later (None while these stubs lack it)."""
    if name not in reply.DESCRIPTOR.fields_by_name:
        return None
    return str(getattr(reply, name)) or None


def recommendations(reply: pb.RecommendResponse | pb.SimilarItemsResponse) -> Recommendations:
    source = getattr(reply, "fallback_source", 0)  # Recommend only
    return Recommendations(
        request_id=reply.request_id,
        items=tuple(
            Item(i.item_id, i.score, i.title, tuple(i.categories), _explanation(i))
            for i in reply.items
        ),
        degraded=reply.degraded,
        degraded_reason=_enum_name(pb.DegradedReason, reply.degraded_reason, "DEGRADED_REASON_"),
        fallback_source=_enum_name(pb.FallbackSource, source, "FALLBACK_SOURCE_"),
        model_version=reply.model_version,
        stage_timings=tuple(StageTiming(t.stage, t.duration_ms) for t in reply.stage_timings),
        recommendation_id=_optional_string(reply, "recommendation_id"),
        raw=reply,
    )


def events_request(events: Iterable[Event]) -> epb.PushEventsRequest:
    return epb.PushEventsRequest(
        events=[
            epb.AppEvent(
                event_id=e.event_id,
                user_id=e.user_id,
                item_id=e.item_id,
                event_type=e.event_type,
                timestamp=e.timestamp,
                value=e.value,
                recommendation_id=e.recommendation_id,
            )
            for e in events
        ]
    )


def push_result(reply: epb.PushEventsResponse) -> PushResult:
    return PushResult(accepted=reply.accepted, duplicates=reply.duplicates)
