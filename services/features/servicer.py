"""gRPC servicer of the features service: proto <-> domain, nothing else."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from recserve.features.v1 import features_pb2 as pb
from recserve.features.v1 import features_pb2_grpc
from recserve_kit.errors import InvalidArgument
from services.features.domain import Event, Features
from services.features.messages import item_message, user_message

# google.protobuf.Timestamp's valid range: 0001-01-01 to 9999-12-31.
MIN_SECONDS, MAX_SECONDS = -62_135_596_800, 253_402_300_799


def event_time(stamp: Timestamp, n: int) -> datetime:
    if not MIN_SECONDS <= stamp.seconds <= MAX_SECONDS or not 0 <= stamp.nanos < 10**9:
        raise InvalidArgument(f"events[{n}].event_time", "is not a valid timestamp")
    return stamp.ToDatetime(tzinfo=UTC)


WATCH_CHUNK = 1000  # items per message of a full listing (messages stay far below 4 MB)


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
            Event(e.user_id, e.item_id, e.rating, event_time(e.event_time, n))
            for n, e in enumerate(request.events)
        ]
        return pb.PushUserEventsResponse(accepted=await self.features.push(events))

    async def WatchItemFeatures(
        self, request: pb.WatchItemFeaturesRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.WatchItemFeaturesResponse]:
        async for listing in self.features.catalogue.watch():
            messages = [item_message(r) for r in listing.records]
            if not listing.reset:
                yield pb.WatchItemFeaturesResponse(items=messages, version=listing.version)
                continue
            starts = range(0, max(len(messages), 1), WATCH_CHUNK)
            for n, start in enumerate(starts):
                yield pb.WatchItemFeaturesResponse(
                    reset=n == 0,
                    items=messages[start : start + WATCH_CHUNK],
                    synced=n == len(starts) - 1,
                    version=listing.version,
                )
