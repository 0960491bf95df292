"""gRPC servicer of the features service: proto <-> domain, nothing else."""

from __future__ import annotations

from datetime import UTC

import grpc

from recserve.features.v1 import features_pb2 as pb
from recserve.features.v1 import features_pb2_grpc
from services.features.domain import Event, Features, ItemRecord, UserRecord


def user_message(record: UserRecord) -> pb.UserFeatures:
    return pb.UserFeatures(
        user_id=record.user_id,
        found=record.found,
        age=record.age,
        gender=record.gender,
        occupation=record.occupation,
        rating_count=record.rating_count,
        mean_rating=record.mean_rating,
        recent_item_ids=list(record.recent_item_ids),
        seen_item_ids=list(record.seen_item_ids),
        precomputed_item_ids=list(record.precomputed_item_ids),
        precomputed_run_id=record.precomputed_run_id,
    )


def item_message(record: ItemRecord) -> pb.ItemFeatures:
    return pb.ItemFeatures(
        item_id=record.item_id,
        found=record.found,
        title=record.title,
        year=record.year,
        categories=list(record.categories),
        popularity=record.popularity,
        mean_rating=record.mean_rating,
    )


class FeaturesServicer(features_pb2_grpc.FeatureServiceServicer):
    def __init__(self, features: Features) -> None:
        self.features = features

    async def GetUserFeatures(
        self, request: pb.GetUserFeaturesRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetUserFeaturesResponse:
        return pb.GetUserFeaturesResponse(
            user=user_message(await self.features.user(request.user_id))
        )

    async def GetItemFeatures(
        self, request: pb.GetItemFeaturesRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetItemFeaturesResponse:
        records, hits = await self.features.items(list(request.item_ids))
        return pb.GetItemFeaturesResponse(items=[item_message(r) for r in records], cache_hits=hits)

    async def PushUserEvents(
        self, request: pb.PushUserEventsRequest, context: grpc.aio.ServicerContext
    ) -> pb.PushUserEventsResponse:
        events = [
            Event(e.user_id, e.item_id, e.rating, e.event_time.ToDatetime(tzinfo=UTC))
            for e in request.events
        ]
        return pb.PushUserEventsResponse(accepted=await self.features.push(events))
