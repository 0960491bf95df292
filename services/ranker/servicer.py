"""gRPC servicer of the ranker: proto <-> domain, nothing else."""

from __future__ import annotations

import grpc
import numpy as np

from recserve.features.v1 import features_pb2
from recserve.ranker.v1 import ranker_pb2 as pb
from recserve.ranker.v1 import ranker_pb2_grpc
from recserve_kit.deadlines import outbound_timeout
from recserve_kit.errors import InvalidArgument
from services.ranker.domain import CandidateInput, Ranker, UserInput


def to_user(message: features_pb2.UserFeatures) -> UserInput:
    return UserInput(
        message.age,
        message.gender,
        message.occupation,
        message.rating_count,
        message.mean_rating,
        list(message.recent_item_ids),
    )


def to_candidate(message: pb.Candidate, n: int) -> CandidateInput:
    if not message.item_id:
        raise InvalidArgument(f"candidates[{n}].item_id", "is empty")
    f = message.features
    return CandidateInput(
        message.item_id,
        f.year,
        f.popularity,
        f.mean_rating,
        list(f.categories),
        message.retrieval_score,
    )


class RankerServicer(ranker_pb2_grpc.RankerServiceServicer):
    def __init__(self, ranker: Ranker) -> None:
        self.ranker = ranker

    def _timeout(self, context: grpc.aio.ServicerContext) -> float:
        return outbound_timeout(context, self.ranker.settings.triton_timeout_s)

    async def EmbedUser(
        self, request: pb.EmbedUserRequest, context: grpc.aio.ServicerContext
    ) -> pb.EmbedUserResponse:
        vector, version = await self.ranker.embed_user(
            to_user(request.user), self._timeout(context)
        )
        return pb.EmbedUserResponse(
            vector=vector.tolist(), model_version=version, vector_f32=vector.tobytes()
        )

    async def Score(
        self, request: pb.ScoreRequest, context: grpc.aio.ServicerContext
    ) -> pb.ScoreResponse:
        if request.item_ids:
            return await self._score_columns(request, context)
        candidates = [to_candidate(c, n) for n, c in enumerate(request.candidates)]
        scores, version, unknown = await self.ranker.score(
            to_user(request.user), candidates, list(request.user_vector), self._timeout(context)
        )
        return pb.ScoreResponse(
            scores=scores.tolist(), model_version=version, unknown_item_count=unknown
        )

    async def GetModelInfo(
        self, request: pb.GetModelInfoRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetModelInfoResponse:
        models = await self.ranker.model_info()
        return pb.GetModelInfoResponse(
            models=[pb.ModelInfo(name=n, version=v, state=s) for n, v, s in models]
        )

    async def LoadModel(
        self, request: pb.LoadModelRequest, context: grpc.aio.ServicerContext
    ) -> pb.LoadModelResponse:
        if not request.version:
            raise InvalidArgument("version", "is empty")
        loaded = await self.ranker.load(request.version)
        return pb.LoadModelResponse(model_version=loaded.version)

    async def _score_columns(
        self, request: pb.ScoreRequest, context: grpc.aio.ServicerContext
    ) -> pb.ScoreResponse:
        vector = None
        if request.user_vector_f32:
            vector = f32(request.user_vector_f32, "user_vector_f32")
        elif request.user_vector:
            vector = np.asarray(request.user_vector, dtype=np.float32)
        scores, version, unknown = await self.ranker.score_ids(
            to_user(request.user),
            request.item_ids,
            f32(request.retrieval_scores_f32, "retrieval_scores_f32"),
            vector,
            self._timeout(context),
            vector_version=request.user_vector_version,
        )
        return pb.ScoreResponse(
            scores=scores.tolist(), model_version=version, unknown_item_count=unknown
        )


def f32(raw: bytes, field: str) -> np.ndarray:
    """Little-endian float32 values from a bytes field."""
    if len(raw) % 4:
        raise InvalidArgument(field, f"{len(raw)} bytes is not a whole number of float32 values")
    values = np.frombuffer(raw, dtype="<f4")
    if not np.isfinite(values).all():
        raise InvalidArgument(field, "contains NaN or infinity")
    return values
