"""A live copy of the features service's item catalogue, for the services
that need item features off the request path (the ranker's feature table,
the gateway's titles).

``ItemWatch.run`` follows ``FeatureService.WatchItemFeatures``: a full
listing is collected whole and then handed over in one step (the served copy
is never half-filled), changes are handed over as they arrive. When the
stream breaks the last copy keeps serving and the watch reconnects with a
bounded backoff; ``synced`` says whether a full listing has arrived yet.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

import grpc

from recserve.features.v1 import features_pb2 as fpb
from recserve.features.v1 import features_pb2_grpc

log = logging.getLogger(__name__)

Items = Sequence[fpb.ItemFeatures]


class ItemWatch:
    def __init__(
        self,
        channel: grpc.aio.Channel,
        on_listing: Callable[[Items, str], None],
        on_changes: Callable[[Items], None],
        max_backoff_s: float = 2.0,
    ) -> None:
        self.stub = features_pb2_grpc.FeatureServiceStub(channel)
        self.on_listing = on_listing
        self.on_changes = on_changes
        self.max_backoff_s = max_backoff_s
        self.synced = False
        self.version = ""

    async def _follow(self) -> bool:
        """Applies the stream until it ends; True when anything arrived."""
        received = False
        pending: list[fpb.ItemFeatures] | None = None
        call = self.stub.WatchItemFeatures(fpb.WatchItemFeaturesRequest())
        async for update in call:
            received = True
            if update.reset:
                pending = []
            if pending is not None:
                pending.extend(update.items)
                if update.synced:
                    self.on_listing(pending, update.version)
                    self.version = update.version
                    self.synced = True
                    pending = None
            elif update.items:
                self.on_changes(update.items)
        return received

    async def run(self) -> None:
        """Follows the watch until cancelled, reconnecting when it breaks."""
        backoff = 0.05
        while True:
            received = False
            try:
                received = await self._follow()
            except grpc.aio.AioRpcError as exc:
                log.debug("item watch broke: %s", exc.code().name)
            backoff = 0.05 if received else min(backoff * 2, self.max_backoff_s)
            await asyncio.sleep(backoff)

    async def healthy(self) -> bool:
        return self.synced
