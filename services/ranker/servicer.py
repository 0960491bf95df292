"""gRPC servicer of the ranker: proto <-> domain, nothing else."""

from __future__ import annotations

from typing import Any

import grpc
import numpy as np
from google.protobuf.message import Message
from opentelemetry import trace
from pydantic import ValidationError

from recserve.features.v1 import features_pb2
from recserve.ranker.v1 import ranker_pb2 as pb
from recserve.ranker.v1 import ranker_pb2_grpc
from recserve_delivery.rollout import Plan, Rollout
from recserve_delivery.state import Guardrail, Triggers
from recserve_delivery.status import status_message
from recserve_kit import attributes as attr
from recserve_kit.deadlines import outbound_timeout
from recserve_kit.errors import InvalidArgument
from recserve_model import published
from services.ranker.config import RankerSettings
from services.ranker.domain import Ranker
from services.ranker.inputs import CandidateInput, Scored, UserInput
from services.ranker.source_inputs import SourceColumns


def to_user(message: features_pb2.UserFeatures) -> UserInput:
    return UserInput(
        message.age,
        message.gender,
        message.occupation,
        message.rating_count,
        message.mean_rating,
        list(message.recent_item_ids),
        message.user_id,
        dict(message.attributes),
    )


def to_candidate(message: pb.Candidate, n: int, field: str = "candidates") -> CandidateInput:
    if not message.item_id:
        raise InvalidArgument(f"{field}[{n}].item_id", "is empty")
    f = message.features
    return CandidateInput(
        message.item_id,
        f.year,
        f.popularity,
        f.mean_rating,
        list(f.categories),
        message.retrieval_score,
        dict(f.attributes),
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
        trace.get_current_span().set_attribute(attr.MODEL_VERSION, version)
        return pb.EmbedUserResponse(
            vector=vector.tolist(),
            model_version=version,
            vector_f32=vector.tobytes(),
            split=split_message(self.ranker),
        )

    async def EmbedUsers(
        self, request: pb.EmbedUsersRequest, context: grpc.aio.ServicerContext
    ) -> pb.EmbedUsersResponse:
        users = [to_user(u) for u in request.users]
        embedded = await self.ranker.embed_users(users, self._timeout(context))
        return pb.EmbedUsersResponse(
            users=[
                pb.EmbeddedUser(user_id=u.user_id, vector_f32=v.tobytes(), model_version=version)
                for u, (v, version) in zip(users, embedded, strict=True)
            ]
        )

    async def EmbedItems(
        self, request: pb.EmbedItemsRequest, context: grpc.aio.ServicerContext
    ) -> pb.EmbedItemsResponse:
        items = [
            to_candidate(pb.Candidate(item_id=i.item_id, features=i), n, "items")
            for n, i in enumerate(request.items)
        ]
        vectors, version, unknown = await self.ranker.embed_items(
            request.model_version, items, self._timeout(context)
        )
        trace.get_current_span().set_attribute(attr.MODEL_VERSION, version)
        return pb.EmbedItemsResponse(
            vectors_f32=vectors.tobytes(),
            dimension=vectors.shape[1],
            model_version=version,
            unknown_items=unknown,
        )

    async def Score(
        self, request: pb.ScoreRequest, context: grpc.aio.ServicerContext
    ) -> pb.ScoreResponse:
        if request.item_ids:
            return await self._score_columns(request, context)
        candidates = [to_candidate(c, n) for n, c in enumerate(request.candidates)]
        scored = await self.ranker.score(
            to_user(request.user),
            candidates,
            list(request.user_vector),
            self._timeout(context),
            source_columns(request),
        )
        return score_response(scored, self.ranker)

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
        if forwarded := await self._on_writer("LoadModel", request, context):
            return forwarded
        loaded = await self.ranker.load(request.version)
        return pb.LoadModelResponse(model_version=loaded.version)

    async def StartRollout(
        self, request: pb.StartRolloutRequest, context: grpc.aio.ServicerContext
    ) -> pb.StartRolloutResponse:
        if not request.version:
            raise InvalidArgument("version", "is empty")
        if forwarded := await self._on_writer("StartRollout", request, context):
            return forwarded
        rollout = await self.ranker.start_rollout(plan(request, self.ranker.settings))
        return pb.StartRolloutResponse(status=status(rollout, self.ranker))

    async def GetRollout(
        self, request: pb.GetRolloutRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetRolloutResponse:
        if forwarded := await self._on_writer("GetRollout", request, context):
            return forwarded  # the writer's look: its last verdict, its figures
        return pb.GetRolloutResponse(status=status(self.ranker.rollout_control(), self.ranker))

    async def PauseRollout(
        self, request: pb.PauseRolloutRequest, context: grpc.aio.ServicerContext
    ) -> pb.PauseRolloutResponse:
        if forwarded := await self._on_writer("PauseRollout", request, context):
            return forwarded
        return pb.PauseRolloutResponse(status=self._act("pause"))

    async def ResumeRollout(
        self, request: pb.ResumeRolloutRequest, context: grpc.aio.ServicerContext
    ) -> pb.ResumeRolloutResponse:
        if forwarded := await self._on_writer("ResumeRollout", request, context):
            return forwarded
        return pb.ResumeRolloutResponse(status=self._act("resume"))

    async def PromoteRollout(
        self, request: pb.PromoteRolloutRequest, context: grpc.aio.ServicerContext
    ) -> pb.PromoteRolloutResponse:
        if forwarded := await self._on_writer("PromoteRollout", request, context):
            return forwarded
        return pb.PromoteRolloutResponse(status=self._act("promote"))

    async def AbortRollout(
        self, request: pb.AbortRolloutRequest, context: grpc.aio.ServicerContext
    ) -> pb.AbortRolloutResponse:
        if forwarded := await self._on_writer("AbortRollout", request, context):
            return forwarded
        return pb.AbortRolloutResponse(status=self._act("abort"))

    async def _on_writer(
        self, method: str, request: Message, context: grpc.aio.ServicerContext
    ) -> Any:
        """The writer's answer when another ranker replica writes the rollout
        (services.ranker.replica); None: this one does."""
        return await self.ranker.models.replica.forward(method, request, context)

    def _act(self, action: str) -> pb.RolloutStatus:
        return status(self.ranker.rollout_action(action), self.ranker)

    async def _score_columns(
        self, request: pb.ScoreRequest, context: grpc.aio.ServicerContext
    ) -> pb.ScoreResponse:
        vector = None
        if request.user_vector_f32:
            vector = f32(request.user_vector_f32, "user_vector_f32")
        elif request.user_vector:
            vector = np.asarray(request.user_vector, dtype=np.float32)
        scored = await self.ranker.score_ids(
            to_user(request.user),
            request.item_ids,
            f32(request.retrieval_scores_f32, "retrieval_scores_f32"),
            vector,
            self._timeout(context),
            vector_version=request.user_vector_version,
            explain=request.explain,
            version=request.version,
            sources=source_columns(request),
        )
        return score_response(scored, self.ranker)


def source_columns(request: pb.ScoreRequest) -> SourceColumns:
    """The retriever's neighbour scores, source bits and repeat scores, None where not sent."""
    neighbour, again = request.neighbour_scores_f32, request.repeat_scores_f32
    return (
        f32(neighbour, "neighbour_scores_f32") if neighbour else None,
        np.frombuffer(request.sources, np.uint8) if request.sources else None,
        f32(again, "repeat_scores_f32") if again else None,
    )


def split_message(ranker: Ranker) -> pb.VersionSplit:
    stable, candidates, share = ranker.models.split()
    return pb.VersionSplit(
        stable_version=stable,
        candidate_version=candidates[0] if candidates else "",
        candidate_share_percent=share,
        more_candidate_versions=candidates[1:],
    )


def score_response(scored: Scored, ranker: Ranker) -> pb.ScoreResponse:
    trace.get_current_span().set_attribute(attr.MODEL_VERSION, scored.model_version)
    return pb.ScoreResponse(
        scores=scored.scores.tolist(),
        model_version=scored.model_version,
        unknown_item_count=scored.unknown_items,
        affinity=[] if scored.affinity is None else scored.affinity.tolist(),
        split=split_message(ranker),
    )


def f32(raw: bytes, field: str) -> np.ndarray:
    """Little-endian float32 values from a bytes field."""
    if len(raw) % 4:
        raise InvalidArgument(field, f"{len(raw)} bytes is not a whole number of float32 values")
    values = np.frombuffer(raw, dtype="<f4")
    if not np.isfinite(values).all():
        raise InvalidArgument(field, "contains NaN or infinity")
    return values


def plan(request: pb.StartRolloutRequest, settings: RankerSettings) -> Plan:
    """The request's plan; every unset field takes the ranker's default."""
    return Plan(
        candidate=request.version,
        # An experiment's one split defaults to half the users.
        steps_percent=list(request.steps_percent)
        or ([50.0] if request.experiment_s else list(settings.rollout_steps_percent)),
        soak_s=request.soak_s or settings.rollout_soak_s,
        min_requests=request.min_requests or settings.rollout_min_requests,
        shadow_percent=request.shadow_percent,
        triggers=Triggers(
            max_p99_ms=request.max_p99_ms or settings.rollout_max_p99_ms,
            max_error_rate=request.max_error_rate or settings.rollout_max_error_rate,
            max_memory_fraction=request.max_memory_fraction or settings.rollout_max_memory_fraction,
        ),
        guardrail=guardrail(request),
        experiment_s=request.experiment_s,
        more_candidates=tuple(request.more_versions),
    )


GUARDRAIL_FIELDS = {
    "baseline_rate": "guardrail_baseline_rate",
    "min_detectable_drop": "guardrail_min_drop",
    "alpha": "guardrail_alpha",
    "power": "guardrail_power",
    "max_decision_s": "guardrail_max_decision_s",
}


def guardrail(request: pb.StartRolloutRequest) -> Guardrail | None:
    if not request.guardrail_baseline_rate:
        return None
    try:
        return Guardrail(
            baseline_rate=request.guardrail_baseline_rate,
            min_detectable_drop=request.guardrail_min_drop or 0.02,
            alpha=request.guardrail_alpha or 0.05,
            power=request.guardrail_power or 0.8,
            max_decision_s=request.guardrail_max_decision_s or 7 * 86400.0,
        )
    except ValidationError as exc:
        error = exc.errors()[0]
        raise InvalidArgument(GUARDRAIL_FIELDS[str(error["loc"][0])], error["msg"]) from None


def status(rollout: Rollout, ranker: Ranker) -> pb.RolloutStatus:
    """The model rollout, with the nightly re-scoring's live run beside it."""
    reply = status_message(rollout)
    live = published.live_run(ranker.settings.data_dir)
    if live is not None:
        history = live.get("history", [])
        reply.rescoring.CopyFrom(
            pb.RescoringStatus(
                run_id=live.get("run_id", ""),
                published_at=str(live.get("published_at", "")),
                previous_run_id=history[1] if len(history) > 1 else "",
            )
        )
    return reply
