"""The gateway's calls to its backends, one method a stage. Internal calls
carry columns, not messages: the user vector and scores as float32 bytes,
candidates as an id list."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np
from cachetools import TTLCache

from recserve.features.v1 import features_pb2 as fpb
from recserve.ranker.v1 import ranker_pb2 as rpb
from recserve.retriever.v1 import retriever_pb2 as qpb
from recserve_kit.clients import Client
from recserve_kit.tracing import outbound_metadata
from recserve_model.catalogue import AttributeFilter
from services.gateway.config import GatewaySettings
from services.gateway.descriptions import Description
from services.gateway.stages import STAGE_CHILDREN, Stages
from services.gateway.user_vectors import UserVectors

DESCRIBE_TIMEOUT_S = 0.01  # titles the live catalogue lacks: worth a short wait only
STORED_TTL_S = 60.0  # an upserted item's description, as the retriever stores it
# The methods below that run on every request: carried as frames on held
# streams, or in-process where the backend is hosted by the gateway's own
# process (services/gateway/server.py: clients); the rest are unary calls.
CARRIED = {
    "features": ("recserve.features.v1.FeatureService", ("GetUserFeatures", "GetItemFeatures")),
    "retriever": ("recserve.retriever.v1.RetrieverService", ("Search", "SimilarItems", "GetItems")),
    "ranker": ("recserve.ranker.v1.RankerService", ("EmbedUser", "Score")),
}


@dataclass(frozen=True)
class Embedded:
    vector_f32: bytes
    model_version: str


@dataclass(frozen=True)
class Retrieved:
    """The retriever's candidates in columns: ids, two-tower scores and, from
    an artifact with candidate sources, neighbour scores and source bits
    (empty bytes otherwise)."""

    ids: list[str]
    scores: np.ndarray
    neighbour_scores_f32: bytes = b""
    sources: bytes = b""
    repeat_scores_f32: bytes = b""

    def only(self, keep: list[int]) -> Retrieved:
        neighbour = np.frombuffer(self.neighbour_scores_f32, "<f4")
        sources = np.frombuffer(self.sources, np.uint8)
        again = np.frombuffer(self.repeat_scores_f32, "<f4")
        return Retrieved(
            [self.ids[n] for n in keep],
            self.scores[keep],
            neighbour[keep].tobytes() if len(neighbour) else b"",
            sources[keep].tobytes() if len(sources) else b"",
            again[keep].tobytes() if len(again) else b"",
        )


@dataclass(frozen=True)
class Ranked:
    scores: np.ndarray
    model_version: str
    affinity: np.ndarray | None = None  # each candidate's, when explained


def search_filter(
    categories: Sequence[str], exclude: Sequence[str], attributes: Sequence[AttributeFilter]
) -> qpb.SearchFilter:
    return qpb.SearchFilter(
        categories=categories,
        exclude_item_ids=exclude,
        attributes=[
            qpb.AttributeFilter(name=a.name, any_of=a.any_of, min=a.min, max=a.max)
            for a in attributes
        ],
    )


class Backends:
    def __init__(
        self,
        settings: GatewaySettings,
        features: Client,
        retriever: Client,
        ranker: Client,
    ) -> None:
        self.settings = settings
        self.features = features
        self.retriever = retriever
        self.ranker = ranker
        self.user_vectors = UserVectors(settings.user_vector_cache_size)
        self.stored: TTLCache[str, Description] = TTLCache(maxsize=10_000, ttl=STORED_TTL_S)

    async def user(self, stages: Stages, user_id: str) -> fpb.UserFeatures:
        reply = await stages.run(
            "features",
            "FEATURES",
            self.settings.features_ms,
            lambda t: self.features.GetUserFeatures(
                fpb.GetUserFeaturesRequest(user_id=user_id),
                timeout=t,
                metadata=outbound_metadata(),
            ),
        )
        return reply.user

    async def embed(
        self, stages: Stages, profile: fpb.UserFeatures, user: fpb.UserFeatures | None = None
    ) -> Embedded:
        """The user's vector: the one the features service stored for this
        very profile when it is of the version the user is on; else from the
        cache when this profile was embedded by that version; else from the
        ranker (and cached)."""
        if (
            user is not None
            and user.vector_f32
            and self.user_vectors.usable(user.vector_version, user.user_id)
        ):
            stages.cached("embed")
            return Embedded(user.vector_f32, user.vector_version)
        key = UserVectors.key(profile)
        cached = self.user_vectors.get(key, profile.user_id)
        if cached is not None:
            stages.cached("embed")
            return Embedded(*cached)
        reply = await stages.run(
            "embed",
            "RANKER",
            self.settings.embed_ms,
            lambda t: self.ranker.EmbedUser(
                rpb.EmbedUserRequest(user=profile), timeout=t, metadata=outbound_metadata()
            ),
        )
        self.user_vectors.learn_split(reply.split)
        self.user_vectors.put(key, reply.vector_f32, reply.model_version)
        return Embedded(reply.vector_f32, reply.model_version)

    async def search(
        self,
        stages: Stages,
        embedded: Embedded,
        categories: Sequence[str],
        exclude: Sequence[str],
        attributes: Sequence[AttributeFilter] = (),
        history: Sequence[str] = (),
    ) -> Retrieved:
        """Candidates for a user vector, in columns, from the generation of
        the model version that computed the vector (a retrained model rolled
        out has its own, PrepareModelVersion); ``history``, the user's own
        items, most recent first, seeds the item-to-item candidates."""
        reply = await stages.run(
            "retrieve",
            "RETRIEVER",
            self.settings.retrieve_ms,
            lambda t: self.retriever.Search(
                qpb.SearchRequest(
                    vector_f32=embedded.vector_f32,
                    k=self.settings.candidates,
                    filter=search_filter(categories, exclude, attributes),
                    columns=True,
                    model_version=embedded.model_version,
                    history_item_ids=history,
                ),
                timeout=t,
                metadata=outbound_metadata(),
            ),
        )
        return Retrieved(
            list(reply.item_ids),
            np.frombuffer(reply.scores_f32, "<f4"),
            reply.neighbour_scores_f32,
            reply.sources,
            reply.repeat_scores_f32,
        )

    async def similar(
        self,
        stages: Stages,
        item_id: str,
        k: int,
        categories: Sequence[str],
        exclude: Sequence[str],
        attributes: Sequence[AttributeFilter] = (),
    ) -> list[qpb.ScoredItem]:
        reply = await stages.run(
            "retrieve",
            "RETRIEVER",
            self.settings.retrieve_ms,
            lambda t: self.retriever.SimilarItems(
                qpb.SimilarItemsRequest(
                    item_id=item_id,
                    k=k,
                    filter=search_filter(categories, exclude, attributes),
                ),
                timeout=t,
                metadata=outbound_metadata(),
            ),
        )
        return list(reply.items)

    async def score(
        self,
        stages: Stages,
        profile: fpb.UserFeatures,
        embedded: Embedded,
        retrieved: Retrieved,
        explain: bool = False,
        version: str = "",
    ) -> Ranked:
        reply = await stages.run(
            "rank",
            "RANKER",
            self.settings.rank_ms,
            lambda t: self.ranker.Score(
                rpb.ScoreRequest(
                    user=profile,
                    user_vector_f32=embedded.vector_f32,
                    user_vector_version=embedded.model_version,
                    item_ids=retrieved.ids,
                    retrieval_scores_f32=retrieved.scores.tobytes(),
                    neighbour_scores_f32=retrieved.neighbour_scores_f32,
                    sources=retrieved.sources,
                    repeat_scores_f32=retrieved.repeat_scores_f32,
                    explain=explain,
                    version=version,
                ),
                timeout=t,
                metadata=outbound_metadata(),
            ),
        )
        if not version:  # a comparison's version says nothing of the user's
            self.user_vectors.saw_version(reply.model_version, profile, embedded.model_version)
            self.user_vectors.learn_split(reply.split)
        affinity = np.asarray(reply.affinity, dtype=np.float32) if explain else None
        return Ranked(np.asarray(reply.scores, dtype=np.float32), reply.model_version, affinity)

    async def describe(self, stages: Stages, item_ids: Sequence[str]) -> dict[str, Description]:
        """Titles and categories of items the local copies lack: asked of the
        features service, then, for items it does not know (upserted since
        the last build), of the retriever that stores them (kept a minute);
        each with a short wait, none when neither answers."""
        started = time.perf_counter()
        try:
            out = {i: self.stored[i] for i in item_ids if i in self.stored}
            rest = [i for i in item_ids if i not in out]
            if rest:
                request = fpb.GetItemFeaturesRequest(item_ids=rest)
                reply = await self._ask(stages, self.features.GetItemFeatures, request)
                known = reply.items if reply is not None else ()
                out.update({f.item_id: (f.title, tuple(f.categories)) for f in known if f.found})
            rest = [i for i in rest if i not in out]
            if rest:
                by_id = qpb.GetItemsRequest(item_ids=rest)
                stored = await self._ask(stages, self.retriever.GetItems, by_id)
                items = stored.items if stored is not None else ()
                found = {i.item_id: (i.title, tuple(i.categories)) for i in items}
                self.stored.update(found)
                out.update(found)
            return out
        finally:
            STAGE_CHILDREN["describe"].observe(time.perf_counter() - started)

    async def _ask(self, stages: Stages, method: Any, request: Any) -> Any:
        """One describing call; None when it fails or is late."""
        timeout = min(DESCRIBE_TIMEOUT_S, max(stages.deadline.remaining_s(), 0.002))
        try:
            return await method(request, timeout=timeout, metadata=outbound_metadata())
        except grpc.aio.AioRpcError:
            return None  # ids without titles are still the answer


def ranker_profile(user: fpb.UserFeatures) -> fpb.UserFeatures:
    """What the ranker reads of a user: without the seen and precomputed
    lists (up to 1,000 ids each), which only the gateway needs."""
    return fpb.UserFeatures(
        user_id=user.user_id,
        found=user.found,
        age=user.age,
        gender=user.gender,
        occupation=user.occupation,
        rating_count=user.rating_count,
        mean_rating=user.mean_rating,
        recent_item_ids=user.recent_item_ids,
        attributes=user.attributes,
    )
