"""Vectors for items upserted without one: the ranker's EmbedItems (the
item tower in Triton), in the space of the artifact the index was built
from, so a new product is retrievable at once. A vector the caller gives
is used as it is."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import grpc
import numpy as np

from recserve.features.v1 import features_pb2 as fpb
from recserve.ranker.v1 import ranker_pb2 as rpb
from recserve.ranker.v1 import ranker_pb2_grpc
from recserve_kit import transport
from recserve_kit.errors import FailedPrecondition, Unavailable
from recserve_model.attribute_features import stored_as_text
from services.retriever.config import RetrieverSettings
from services.retriever.store import ItemRecord

# The ranker's answers worth a retry; any other is why it cannot embed these.
TRANSIENT = (
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
)
EMBED_BATCH = 1000  # the most items one EmbedItems takes (the ranker's max_candidates default)


class ItemTower:
    def __init__(self, settings: RetrieverSettings) -> None:
        self.timeout_s = settings.embed_timeout_s
        self.channel = (
            transport.aio_channel(settings.ranker_addr, settings.tls("retriever"))
            if settings.ranker_addr
            else None
        )

    async def complete(
        self, records: Sequence[ItemRecord], version: str, dimension: int, every: bool = False
    ) -> list[ItemRecord]:
        """``records`` with every missing vector embedded (all or none);
        ``every``: all of them, the caller's vectors too (a version being
        rolled out with item vectors of its own: a vector the caller gives is
        in the current model's space, not in this one)."""
        missing = [n for n, r in enumerate(records) if every or not len(r.vector)]
        if not missing:
            return list(records)
        field = f"items[{missing[0]}].vector"
        if self.channel is None:
            if every:
                raise FailedPrecondition(
                    f"items: model version {version} is being rolled out with item vectors "
                    "of its own, which only the item tower can give, and none is configured "
                    "(RECSERVE_RETRIEVER_RANKER_ADDR): upsert after its rollout"
                )
            raise FailedPrecondition(
                f"{field} is empty and no item tower is configured "
                "(RECSERVE_RETRIEVER_RANKER_ADDR): give the item a vector"
            )
        vectors = await self._embed([records[n] for n in missing], version, field)
        if vectors.shape[1] != dimension:
            raise FailedPrecondition(
                f"{field}: the item tower of {version!r} gives {vectors.shape[1]} values; "
                f"the collection has {dimension}"
            )
        done = list(records)
        for n, vector in zip(missing, vectors, strict=True):
            done[n] = replace(records[n], vector=vector)
        return done

    async def _embed(self, records: Sequence[ItemRecord], version: str, field: str) -> np.ndarray:
        """In calls of at most EMBED_BATCH items (the ranker's limit)."""
        parts = [
            await self._embed_batch(records[start : start + EMBED_BATCH], version, field)
            for start in range(0, len(records), EMBED_BATCH)
        ]
        return np.concatenate(parts)

    async def _embed_batch(
        self, records: Sequence[ItemRecord], version: str, field: str
    ) -> np.ndarray:
        assert self.channel is not None
        stub = ranker_pb2_grpc.RankerServiceStub(self.channel)
        items = [
            fpb.ItemFeatures(
                item_id=r.item_id,
                year=r.year,
                categories=r.categories,
                found=True,
                attributes=stored_as_text(r.attributes),
            )
            for r in records
        ]
        request = rpb.EmbedItemsRequest(model_version=version, items=items)
        try:
            reply = await stub.EmbedItems(request, timeout=self.timeout_s)
        except grpc.aio.AioRpcError as exc:
            if exc.code() not in TRANSIENT:
                raise FailedPrecondition(
                    f"{field} is empty and the item tower cannot embed it: {exc.details()}"
                ) from None
            raise Unavailable(
                f"{field} is empty and the item tower (the ranker) did not answer: "
                f"{exc.code().name}; retry, or give the item a vector"
            ) from None
        vectors = np.frombuffer(reply.vectors_f32, dtype="<f4")
        return vectors.reshape(len(records), reply.dimension)

    async def close(self) -> None:
        if self.channel is not None:
            await self.channel.close()
