"""The at-scale backend: a Qdrant server or cluster through qdrant-client.

Each generation is its own collection; the alias (``items``) is switched to
a new one atomically with ``update_collection_aliases``. Searches go through
the generation's collection name held by this object, so a store keeps
answering from its own generation until it is dropped. qdrant-client's local
mode (``:memory:``) speaks the same API and is how this code is tested here,
where no Qdrant server binary can be installed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from qdrant_client import QdrantClient, models
from qdrant_client.http.models import ExtendedPointId

from recserve_model.catalogue import KEYWORD_KINDS, CatalogueSchema
from services.retriever.store import (
    STATE_FIELD,
    ItemRecord,
    SearchFilter,
    StoreInfo,
    attribute_key,
    point_id,
    soft_deleted_payload,
)


def build_filter(flt: SearchFilter) -> models.Filter | None:
    must: list[models.Condition] = []
    must_not: list[models.Condition] = []
    if not flt.include_inactive:
        must.append(models.FieldCondition(key=STATE_FIELD, match=models.MatchValue(value="active")))
    if flt.categories:
        must.append(
            models.FieldCondition(key="categories", match=models.MatchAny(any=list(flt.categories)))
        )
    for condition in flt.attributes:
        key = attribute_key(condition.name)
        if condition.any_of:
            match = models.MatchAny(any=list(condition.any_of))
            must.append(models.FieldCondition(key=key, match=match))
        else:
            bounds = models.Range(gte=condition.min, lte=condition.max)
            must.append(models.FieldCondition(key=key, range=bounds))
    if flt.exclude_item_ids:
        must_not.append(models.HasIdCondition(has_id=[point_id(i) for i in flt.exclude_item_ids]))
    if flt.only_item_ids:
        must.append(models.HasIdCondition(has_id=[point_id(i) for i in flt.only_item_ids]))
    if not must and not must_not:
        return None
    return models.Filter(must=must or None, must_not=must_not or None)


def connect(url: str) -> QdrantClient:
    if url == ":memory:":
        return QdrantClient(location=":memory:")
    return QdrantClient(url=url, prefer_grpc=True)


class ServerStore:
    backend = "qdrant-server"

    def __init__(self, client: QdrantClient, collection: str, generation: str, dimension: int):
        self.client = client
        self.collection = collection
        self.generation = generation
        self.dimension = dimension

    @classmethod
    def create(
        cls,
        client: QdrantClient,
        collection: str,
        generation: str,
        dimension: int,
        m: int,
        ef_construct: int,
    ) -> ServerStore:
        if client.collection_exists(collection):  # left by a build that was killed
            client.delete_collection(collection)
        client.create_collection(
            collection,
            vectors_config=models.VectorParams(size=dimension, distance=models.Distance.COSINE),
            hnsw_config=models.HnswConfigDiff(m=m, ef_construct=ef_construct),
        )
        client.create_payload_index(collection, STATE_FIELD, models.PayloadSchemaType.KEYWORD)
        client.create_payload_index(collection, "categories", models.PayloadSchemaType.KEYWORD)
        return cls(client, collection, generation, dimension)

    def index_attributes(self, schema: CatalogueSchema) -> None:
        for name, kind in schema.attributes.items():
            field_type = models.PayloadSchemaType.KEYWORD
            if kind not in KEYWORD_KINDS:
                field_type = models.PayloadSchemaType.FLOAT
            self.client.create_payload_index(self.collection, attribute_key(name), field_type)

    def search(
        self, vector: np.ndarray, k: int, flt: SearchFilter, ef: int, exact: bool = False
    ) -> list[tuple[str, float]]:
        result = self.client.query_points(
            self.collection,
            query=vector.tolist(),
            limit=k,
            query_filter=build_filter(flt),
            search_params=models.SearchParams(hnsw_ef=ef, exact=exact),
            with_payload=["item_id"],
        )
        return [(p.payload["item_id"], p.score) for p in result.points if p.payload]

    def vector_of(self, item_id: str) -> np.ndarray | None:
        records = self.client.retrieve(self.collection, [point_id(item_id)], with_vectors=True)
        if not records or records[0].vector is None:
            return None
        return np.asarray(records[0].vector, dtype=np.float32)

    def payloads(self, item_ids: Sequence[str]) -> dict[str, dict[str, object]]:
        ids: list[ExtendedPointId] = [point_id(i) for i in item_ids]
        records = self.client.retrieve(self.collection, ids, with_payload=True)
        return {str(r.payload["item_id"]): dict(r.payload) for r in records if r.payload}

    def upsert(self, items: Sequence[ItemRecord]) -> None:
        self.client.upsert(
            self.collection,
            [
                models.PointStruct(
                    id=point_id(i.item_id), vector=i.vector.tolist(), payload=i.payload()
                )
                for i in items
            ],
            wait=True,
        )

    def _existing(self, item_ids: Sequence[str]) -> list[ExtendedPointId]:
        ids = [point_id(i) for i in item_ids]
        return [int(r.id) for r in self.client.retrieve(self.collection, ids)]

    def soft_delete(self, item_ids: Sequence[str]) -> int:
        found = self._existing(item_ids)
        if found:
            self.client.set_payload(
                # (The stubs' list of a union is invariant; these ids are in it.)
                self.collection,
                soft_deleted_payload(),
                points=found,  # type: ignore[arg-type]
                wait=True,
            )
        return len(found)

    def hard_delete(self, item_ids: Sequence[str]) -> int:
        found = self._existing(item_ids)
        if found:
            self.client.delete(self.collection, models.PointIdsList(points=found), wait=True)
        return len(found)

    def build_index(self) -> None:
        # The server builds HNSW in the background as segments fill.
        return None

    def info(self) -> StoreInfo:
        info = self.client.get_collection(self.collection)
        points = info.points_count or 0
        return StoreInfo(
            points, info.indexed_vectors_count or 0, self.dimension, self.generation, self.backend
        )

    def switch_alias(self, alias: str) -> None:
        """Points the alias at this generation in one atomic operation."""
        actions: list[models.AliasOperations] = []
        existing = {a.alias_name for a in self.client.get_aliases().aliases}
        if alias in existing:
            actions.append(
                models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=alias))
            )
        actions.append(
            models.CreateAliasOperation(
                create_alias=models.CreateAlias(collection_name=self.collection, alias_name=alias)
            )
        )
        self.client.update_collection_aliases(change_aliases_operations=actions)

    def close(self) -> None:
        return None

    def drop(self) -> None:
        self.client.delete_collection(self.collection)
