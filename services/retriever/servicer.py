"""gRPC servicer of the retriever: proto <-> domain, nothing else."""

from __future__ import annotations

import grpc
import numpy as np

from recserve.retriever.v1 import retriever_pb2 as pb
from recserve.retriever.v1 import retriever_pb2_grpc
from recserve_kit.errors import InvalidArgument
from recserve_model.catalogue import PAYLOAD_KEY, AttributeFilter
from services.retriever.candidate_sources import search_candidates
from services.retriever.checks import ItemInput
from services.retriever.domain import Retriever
from services.retriever.item_tower import ItemTower
from services.retriever.store import SearchFilter


def to_filter(message: pb.SearchFilter) -> SearchFilter:
    return SearchFilter(
        tuple(message.categories),
        tuple(message.exclude_item_ids),
        message.include_inactive,
        tuple(AttributeFilter.from_message(a) for a in message.attributes),
    )


def attribute_value(value: pb.AttributeValue) -> object:
    kind = value.WhichOneof("value")
    if kind == "tags":
        return list(value.tags.values)
    return None if kind is None else getattr(value, kind)


def to_input(item: pb.Item) -> ItemInput:
    attributes = {name: attribute_value(v) for name, v in item.attributes.items()}
    return ItemInput(
        item.item_id, item.vector, item.categories, item.active, item.title, item.year, attributes
    )


def stored_item(payload: dict[str, object], kinds: dict[str, str]) -> pb.Item:
    """An item as the index holds it (no vector), attributes in their kinds."""
    attributes = {}
    for name, value in dict(payload.get(PAYLOAD_KEY) or {}).items():  # type: ignore[call-overload]
        kind = kinds.get(name, "categorical")
        if kind == "numeric":
            attributes[name] = pb.AttributeValue(number=float(value))
        elif kind == "tags":
            attributes[name] = pb.AttributeValue(tags=pb.TagList(values=[str(v) for v in value]))
        else:
            attributes[name] = pb.AttributeValue(keyword=str(value))
    return pb.Item(
        item_id=str(payload["item_id"]),
        categories=[str(c) for c in payload.get("categories") or ()],  # type: ignore[attr-defined]
        active=bool(payload.get("active")),
        title=str(payload.get("title") or ""),
        year=int(payload.get("year") or 0),  # type: ignore[call-overload]
        attributes=attributes,
    )


def scored(hits: list[tuple[str, float]]) -> list[pb.ScoredItem]:
    return [pb.ScoredItem(item_id=item_id, score=score) for item_id, score in hits]


class RetrieverServicer(retriever_pb2_grpc.RetrieverServiceServicer):
    def __init__(self, retriever: Retriever, item_tower: ItemTower) -> None:
        self.retriever = retriever
        self.item_tower = item_tower

    async def Search(
        self, request: pb.SearchRequest, context: grpc.aio.ServicerContext
    ) -> pb.SearchResponse:
        packed = bool(request.vector_f32)
        vector = request.vector_f32 if packed else request.vector
        field = "vector_f32" if packed else "vector"
        flt = to_filter(request.filter)
        if not request.columns:
            # The message form: nearest neighbours only, as before the sources.
            history = tuple(request.history_item_ids)
            blocked = SearchFilter(
                flt.categories,
                (*flt.exclude_item_ids, *history),
                flt.include_inactive,
                flt.attributes,
            )
            hits, generation = self.retriever.search(
                vector, request.k, blocked, request.ef, field, request.model_version
            )
            return pb.SearchResponse(items=scored(hits), generation=generation)
        found, generation = search_candidates(
            self.retriever,
            vector,
            request.k,
            flt,
            list(request.history_item_ids),
            request.ef,
            field,
            request.model_version,
        )
        hits = found.hits
        return pb.SearchResponse(
            item_ids=[item_id for item_id, _ in hits],
            scores_f32=np.fromiter((s for _, s in hits), np.float32, len(hits)).tobytes(),
            neighbour_scores_f32=b""
            if found.neighbour_scores is None
            else found.neighbour_scores.astype("<f4").tobytes(),
            sources=b"" if found.sources is None else found.sources.tobytes(),
            repeat_scores_f32=b""
            if found.repeat_scores is None
            else found.repeat_scores.astype("<f4").tobytes(),
            generation=generation,
        )

    async def SimilarItems(
        self, request: pb.SimilarItemsRequest, context: grpc.aio.ServicerContext
    ) -> pb.SimilarItemsResponse:
        hits, generation = self.retriever.similar(
            request.item_id, request.k, to_filter(request.filter)
        )
        return pb.SimilarItemsResponse(items=scored(hits), generation=generation)

    async def UpsertItems(
        self, request: pb.UpsertItemsRequest, context: grpc.aio.ServicerContext
    ) -> pb.UpsertItemsResponse:
        retriever = self.retriever
        records = retriever.to_records([to_input(i) for i in request.items])
        # Every item embedded for each generation before any is written: all or
        # nothing. A prepared version's generation gets its own item tower's
        # vectors for every item (a caller's vector is of the current space).
        by_version = {
            version: await self.item_tower.complete(
                records, version, dimension, every=version != retriever.artifact_version
            )
            for version, dimension in retriever.spaces()
        }
        return pb.UpsertItemsResponse(upserted=await retriever.upsert(by_version))

    async def DeleteItems(
        self, request: pb.DeleteItemsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteItemsResponse:
        if request.mode not in (pb.DELETE_MODE_SOFT, pb.DELETE_MODE_HARD):
            raise InvalidArgument("mode", "must be DELETE_MODE_SOFT or DELETE_MODE_HARD")
        deleted = await self.retriever.delete(
            list(request.item_ids), hard=request.mode == pb.DELETE_MODE_HARD
        )
        return pb.DeleteItemsResponse(deleted=deleted)

    async def GetItems(
        self, request: pb.GetItemsRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetItemsResponse:
        kinds = dict(self.retriever.schema.attributes)
        payloads = self.retriever.items(list(request.item_ids))
        return pb.GetItemsResponse(items=[stored_item(p, kinds) for p in payloads])

    async def GetInfo(
        self, request: pb.GetInfoRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetInfoResponse:
        info = self.retriever.info()
        prepared = self.retriever.prepared
        state = "indexed" if info.indexed_count >= info.point_count else "indexing"
        return pb.GetInfoResponse(
            point_count=info.point_count,
            dimension=info.dimension,
            index_state=state,
            generation=info.generation,
            backend=info.backend,
            filterable_attributes=dict(self.retriever.schema.attributes),
            model_version=self.retriever.artifact_version,
            prepared_model_version=prepared.version if prepared is not None else "",
            prepared_generation=prepared.store.generation
            if prepared is not None and prepared.store is not None
            else "",
        )

    async def PrepareModelVersion(
        self, request: pb.PrepareModelVersionRequest, context: grpc.aio.ServicerContext
    ) -> pb.PrepareModelVersionResponse:
        prepared = await self.retriever.preparer.prepare(request.model_version)
        return pb.PrepareModelVersionResponse(
            state=f"PREPARE_STATE_{prepared.state}",
            generation=prepared.generation,
            own_generation=prepared.own_generation,
        )
