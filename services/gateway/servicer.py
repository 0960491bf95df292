"""gRPC servicer of the gateway: proto <-> domain, nothing else."""

from __future__ import annotations

import time
import uuid

import grpc

from recserve.recommend.v1 import recommend_pb2 as pb
from recserve.recommend.v1 import recommend_pb2_grpc
from recserve_kit.deadlines import remaining_s
from recserve_model.catalogue import AttributeFilter
from services.gateway.domain import Gateway
from services.gateway.impressions import Impressions, check_surface, new_recommendation_id
from services.gateway.query import Answer, Explanation, Query
from services.gateway.segment_lists import Attributes


def queued_s(context: grpc.aio.ServicerContext) -> float:
    """Seconds since Envoy took the request (its x-request-start header); 0 without it.

    Envoy and the gateway share a host clock (loopback, or one Compose host).
    """
    for key, value in context.invocation_metadata() or ():
        if key == "x-request-start":
            try:
                return max(0.0, time.time() - float(str(value)))
            except ValueError:
                return 0.0
    return 0.0


def reason_value(reason: str) -> int:
    if not reason:
        return pb.DEGRADED_REASON_UNSPECIFIED
    return int(pb.DegradedReason.Value(f"DEGRADED_REASON_{reason}"))


def fill(
    reply: pb.RecommendResponse | pb.SimilarItemsResponse, answer: Answer, debug: bool
) -> None:
    reply.items.extend(
        pb.RecommendedItem(
            item_id=i.item_id,
            score=i.score,
            title=i.title,
            categories=list(i.categories),
            explanation=explanation(i.explanation) if i.explanation else None,
        )
        for i in answer.items
    )
    reply.degraded = answer.degraded
    reply.degraded_reason = reason_value(answer.reason)  # type: ignore[assignment]
    reply.model_version = answer.model_version
    if answer.source and isinstance(reply, pb.RecommendResponse):
        reply.fallback_source = pb.FallbackSource.Value(f"FALLBACK_SOURCE_{answer.source}")  # type: ignore[assignment]
    if debug:
        reply.stage_timings.extend(
            pb.StageTiming(stage=stage, duration_ms=ms) for stage, ms in answer.timings
        )


def explanation(e: Explanation) -> pb.ItemExplanation:
    return pb.ItemExplanation(
        stage=e.stage,
        retrieval_score=e.retrieval_score,
        retrieval_rank=e.retrieval_rank,
        ranker_score=e.ranker_score,
        affinity=e.affinity,
    )


def attribute_filters(message: pb.ItemFilter) -> tuple[AttributeFilter, ...]:
    return tuple(AttributeFilter.from_message(a) for a in message.attributes)


class GatewayServicer(recommend_pb2_grpc.RecommendServiceServicer):
    def __init__(self, gateway: Gateway, impressions: Impressions) -> None:
        self.gateway = gateway
        self.impressions = impressions

    async def Recommend(
        self, request: pb.RecommendRequest, context: grpc.aio.ServicerContext
    ) -> pb.RecommendResponse:
        attributes = None
        if request.HasField("attributes"):
            a = request.attributes
            declared = tuple(sorted(a.values.items()))
            attributes = Attributes(a.age, a.gender, a.occupation, declared)
        query = Query(
            request.user_id,
            request.k,
            tuple(request.filter.categories),
            tuple(request.filter.exclude_item_ids),
            attributes=attributes,
            debug=request.debug,
            model_version=request.model_version if request.debug else "",
            attribute_filters=attribute_filters(request.filter),
        )
        surface = check_surface(request.surface)
        answer = await self.gateway.recommend(query, remaining_s(context), queued_s(context))
        reply = pb.RecommendResponse(
            request_id=request.request_id or uuid.uuid4().hex,
            recommendation_id=new_recommendation_id(),
        )
        fill(reply, answer, request.debug)
        self.impressions.record(reply.recommendation_id, "recommend", query, answer, surface)
        return reply

    async def SimilarItems(
        self, request: pb.SimilarItemsRequest, context: grpc.aio.ServicerContext
    ) -> pb.SimilarItemsResponse:
        query = Query(
            request.user_id,
            request.k,
            tuple(request.filter.categories),
            tuple(request.filter.exclude_item_ids),
            item_id=request.item_id,
            debug=request.debug,
            attribute_filters=attribute_filters(request.filter),
        )
        surface = check_surface(request.surface)
        answer = await self.gateway.similar(query, remaining_s(context), queued_s(context))
        reply = pb.SimilarItemsResponse(
            request_id=request.request_id or uuid.uuid4().hex,
            recommendation_id=new_recommendation_id(),
        )
        fill(reply, answer, request.debug)
        self.impressions.record(reply.recommendation_id, "similar", query, answer, surface)
        return reply
