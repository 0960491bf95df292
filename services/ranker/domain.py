"""The ranker's domain: encode features, call Triton, name the model version.

Inference requests are Triton's own protobuf (``ModelInferRequest``) with
the tensors as raw bytes, sent on one persistent channel: tritonclient's
per-call request builder and result wrapper cost more than the call itself.
The ``tritonclient.grpc.aio`` client does the control calls (readiness,
loading). Candidates' item features come from the ranker's own table
(``item_table``), kept live from the features service. Each
inference pins the Triton version number of the artifact in use, so every
response names exactly the model that produced it. ``load`` switches
versions without a failed request: Triton first loads the new version next
to the old one, then the pin moves. During a rollout (``rollout``) each user
is pinned to the stable or the candidate version by a hash of the user id; a
candidate that fails or returns non-finite scores is answered by the stable
version instead, and the judge sees the failure.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import grpc
import numpy as np
import tritonclient.grpc.aio as triton_aio
from recserve_model import artifacts, rollout_state
from recserve_model.affinity import RANK as AFFINITY_RANK
from recserve_model.affinity import UserAffinity, vectors_or_zeros
from recserve_model.encoding import HISTORY_LEN, Encoder, EncodingSpec
from tritonclient.grpc import KeepAliveOptions, service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from recserve_kit import transport
from recserve_kit.errors import FailedPrecondition, InvalidArgument, NotFound, Unavailable
from recserve_kit.tracing import is_sampled, outbound_metadata
from services.ranker.config import RankerSettings
from services.ranker.item_table import ItemTable
from services.ranker.rollout import Plan, Rollout
from services.ranker.shadow import Shadow
from services.ranker.triton_metrics import read_memory_fraction

log = logging.getLogger(__name__)
BACKSTOP_GRACE_S = 0.25


@dataclass(frozen=True)
class UserInput:
    age: float
    gender: str
    occupation: str
    rating_count: float
    mean_rating: float
    recent_item_ids: Sequence[str]
    user_id: str = ""  # which version a rollout serves this user


@dataclass(frozen=True)
class CandidateInput:
    item_id: str
    year: float
    popularity: float
    mean_rating: float
    categories: Sequence[str]
    retrieval_score: float


@dataclass(frozen=True)
class Loaded:
    """The artifact version in use and its Triton version numbers."""

    version: str
    user_model_version: int
    ranking_model_version: int
    encoder: Encoder
    # The user's side of the ranker's affinity feature (None: an artifact from
    # before it, whose ranker graph does not read it).
    affinity: UserAffinity | None = None


def read_versions(settings: RankerSettings, model: str) -> dict[str, int]:
    path = settings.repository / model / "versions.json"
    if not path.exists():
        return {}
    return {artifact: int(number) for number, artifact in json.loads(path.read_text()).items()}


def _consume(call: asyncio.Future[object]) -> None:
    """Reads the outcome of a call nobody may await any more (no warning)."""
    if not call.cancelled():
        call.exception()


_T = TypeVar("_T")
Tensor = tuple[str, np.ndarray]
DATATYPES = {np.dtype(np.int64): "INT64", np.dtype(np.float32): "FP32"}
KEEPALIVE = KeepAliveOptions(
    keepalive_time_ms=10_000, keepalive_timeout_ms=5_000, keepalive_permit_without_calls=True
)


def infer_request(
    model: str, version: int, inputs: Sequence[Tensor], output: str
) -> service_pb2.ModelInferRequest:
    """Triton's request with every tensor as raw little-endian bytes."""
    request = service_pb2.ModelInferRequest(model_name=model, model_version=str(version))
    for name, array in inputs:
        spec = request.inputs.add()
        spec.name = name
        spec.datatype = DATATYPES[array.dtype]
        spec.shape.extend(array.shape)
        request.raw_input_contents.append(np.ascontiguousarray(array).tobytes())
    request.outputs.add().name = output
    return request


def output_array(response: service_pb2.ModelInferResponse) -> np.ndarray:
    """The one FP32 output of a response, as a numpy view of its bytes."""
    shape = tuple(response.outputs[0].shape)
    return np.frombuffer(response.raw_output_contents[0], dtype="<f4").reshape(shape)


class Ranker:
    def __init__(self, settings: RankerSettings) -> None:
        self.settings = settings
        tls = settings.tls("ranker")
        self.client = triton_aio.InferenceServerClient(
            settings.triton_url,
            keepalive_options=KEEPALIVE,
            creds=tls.channel_credentials() if tls else None,
        )
        self.control_headers = transport.triton_control_headers(settings.tls_dir)
        self.channel = transport.aio_channel(
            settings.triton_url,
            tls,
            options=[
                ("grpc.keepalive_time_ms", KEEPALIVE.keepalive_time_ms),
                ("grpc.keepalive_timeout_ms", KEEPALIVE.keepalive_timeout_ms),
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.max_receive_message_length", 64 * 1024 * 1024),
            ],
        )
        self.infer_stub = service_pb2_grpc.GRPCInferenceServiceStub(self.channel)
        self.items = ItemTable()
        self.loaded: Loaded | None = None  # the stable version
        self.versions: dict[str, Loaded] = {}  # loaded and warmed up, by artifact version
        self.rollout: Rollout | None = None  # set once the first version is loaded
        self.shadow = Shadow(settings.shadow_max_in_flight, lambda: self.abandoned > 0)
        self._load_lock = asyncio.Lock()
        self.abandoned = 0  # Triton calls still running that nobody waits for

    def _late_call_done(self, _: asyncio.Future[object]) -> None:
        self.abandoned -= 1

    # -- model versions --------------------------------------------------------

    def _resolve(self, version: str) -> Loaded:
        user = read_versions(self.settings, self.settings.user_model)
        ranking = read_versions(self.settings, self.settings.ranking_model)
        if version not in user or version not in ranking:
            raise NotFound(f"model version {version!r} is not in the Triton repository")
        directory = artifacts.artifacts_root(self.settings.data_dir) / version
        artifacts.verify(directory)
        spec = EncodingSpec.load(directory / "encoding.json")
        affinity = UserAffinity.load(directory)
        return Loaded(version, user[version], ranking[version], Encoder(spec), affinity)

    def _newest_version(self) -> str:
        ranking = read_versions(self.settings, self.settings.ranking_model)
        if not ranking:
            raise FailedPrecondition("the Triton repository holds no ranking model")
        return max(ranking, key=lambda v: ranking[v])

    async def models_ready(self) -> bool:
        """Health: Triton answers and both models of the pinned version are ready."""
        loaded = self.loaded
        if loaded is None:
            try:
                await self._initial_load()
            except (
                InferenceServerException,
                FailedPrecondition,
                NotFound,
                Unavailable,
                OSError,
            ) as exc:
                log.debug("initial load not possible yet: %s", exc)
                return False
            except rollout_state.RolloutStateError as exc:
                log.error("%s; fix or remove it to start", exc)
                return False
            loaded = self.loaded
            assert loaded is not None
        try:
            return bool(
                await self.client.is_model_ready(
                    self.settings.user_model, str(loaded.user_model_version)
                )
                and await self.client.is_model_ready(
                    self.settings.ranking_model, str(loaded.ranking_model_version)
                )
            )
        except InferenceServerException:
            return False

    async def _ensure_loaded(self, model: str, number: int) -> None:
        if await self.client.is_model_ready(model, str(number)):
            return
        # Reloading re-reads the repository: new versions load beside the ones
        # serving, which keep answering (every version on disk is loaded).
        await self.client.load_model(model, headers=self.control_headers)
        if not await self.client.is_model_ready(model, str(number)):
            raise FailedPrecondition(f"{model} version {number} is not loaded")

    async def _prepare(self, version: str) -> Loaded:
        """Both models of ``version`` loaded in Triton and warmed up."""
        known = self.versions.get(version)
        if known is not None:
            return known
        target = self._resolve(version)
        await self._ensure_loaded(self.settings.user_model, target.user_model_version)
        await self._ensure_loaded(self.settings.ranking_model, target.ranking_model_version)
        await self._warm_up(target)
        self.versions[version] = target
        return target

    async def _initial_load(self) -> None:
        """The persisted stable version (an operator's or a rollout's choice),
        else the newest; a rollout in progress resumes at its step."""
        async with self._load_lock:
            persisted = rollout_state.load(self.settings.data_dir)
            ranking = read_versions(self.settings, self.settings.ranking_model)
            stable = self._newest_version()
            if persisted is not None and persisted.stable in ranking:
                stable = persisted.stable
            self.loaded = await self._prepare(stable)
            rollout = Rollout(self.settings.data_dir, stable)
            self.rollout = rollout
            if rollout.state.stable != stable:
                # The persisted stable version left the repository.
                rollout.rebase(stable, f"{rollout.state.stable} is not in the repository")
            if not rollout.state.active:
                return
            try:
                await self._prepare(rollout.state.candidate)
            except (InferenceServerException, FailedPrecondition, NotFound, OSError) as exc:
                rollout.rollback(f"the candidate cannot be loaded after a restart: {exc}")
                return
            rollout.resumed_after_restart()

    async def load(self, version: str) -> Loaded:
        """An operator's switch (LoadModel): refused while a rollout runs."""
        async with self._load_lock:
            rollout = self.rollout_control()
            if rollout.state.active:
                rollout.set_stable(version)  # raises FailedPrecondition
            target = await self._prepare(version)
            # Requests in flight finish on the version they pinned; new ones
            # pin the new version from here on.
            self.loaded = target
            rollout.set_stable(version)
            log.info("switched model version", extra={"fields": {"version": version}})
            return target

    # -- rollouts ----------------------------------------------------------------

    def rollout_control(self) -> Rollout:
        if self.rollout is None:
            raise Unavailable("no model loaded yet")
        return self.rollout

    async def start_rollout(self, plan: Plan) -> Rollout:
        async with self._load_lock:
            rollout = self.rollout_control()
            plan.check()
            if rollout.state.active:
                raise FailedPrecondition(
                    f"a rollout of {rollout.state.candidate} is {rollout.state.status}; "
                    "abort it first"
                )
            if plan.candidate != rollout.state.stable:
                await self._prepare(plan.candidate)  # NotFound for an unknown version
            rollout.start(plan)
            return rollout

    def rollout_action(self, action: str) -> Rollout:
        """pause, resume, promote or abort, by an operator."""
        rollout = self.rollout_control()
        getattr(rollout, action)()
        self._follow_stable()
        return rollout

    def _follow_stable(self) -> None:
        """A promotion past the last step makes the candidate the stable pin."""
        rollout = self.rollout
        if rollout is not None and self.loaded is not None:
            stable = rollout.state.stable
            if stable != self.loaded.version and stable in self.versions:
                self.loaded = self.versions[stable]

    async def judge_forever(self) -> None:
        """The rollout judge: once per interval while a rollout is active."""
        while True:
            await asyncio.sleep(self.settings.rollout_interval_s)
            rollout = self.rollout
            if rollout is None or not rollout.state.active:
                continue
            memory = await read_memory_fraction(self.settings.triton_metrics_url)
            rollout.tick(memory)
            self._follow_stable()

    async def _warm_up(self, target: Loaded) -> None:
        """One inference per model, so the first real request is not the slow one."""
        spec = target.encoder.spec
        user: list[Tensor] = [
            ("user_features", np.zeros((1, spec.user_dim), np.float32)),
            ("history", np.zeros((1, HISTORY_LEN), np.int64)),
        ]
        await self._infer(
            self.settings.user_model, target.user_model_version, user, "user_vector", 30.0
        )
        ranking: list[Tensor] = [
            ("item_id", np.zeros((1, 1), np.int64)),
            ("user_vector", np.zeros((1, spec.embedding_dim), np.float32)),
            ("user_features", np.zeros((1, spec.user_dim), np.float32)),
            ("item_features", np.zeros((1, spec.item_dim), np.float32)),
            ("retrieval_score", np.zeros((1, 1), np.float32)),
            ("user_affinity", np.zeros((1, AFFINITY_RANK), np.float32)),
        ]
        await self._infer(
            self.settings.ranking_model, target.ranking_model_version, ranking, "score", 30.0
        )

    def _current(self) -> Loaded:
        if self.loaded is None:
            raise Unavailable("no model loaded yet")
        return self.loaded

    # -- inference -------------------------------------------------------------

    def user_arrays(self, encoder: Encoder, user: UserInput) -> tuple[np.ndarray, np.ndarray]:
        features = encoder.user(
            user.age, user.gender, user.occupation, user.rating_count, user.mean_rating
        )
        return features[None, :], encoder.history(user.recent_item_ids)[None, :]

    def _track(self, call: asyncio.Future[object], version: str, timed: bool) -> None:
        """The rollout judge's figures: every call's outcome for its version,
        and its time (``timed``: the ranking model) even when nobody waits.
        Only while a rollout runs: outside one this cost 0.1-0.2 ms of CPU
        per Recommend for figures nobody judges."""
        rollout, started = self.rollout, time.perf_counter()
        if rollout is None or not rollout.state.active or not version:
            return

        def done(finished: asyncio.Future[object]) -> None:
            if finished.cancelled() or finished.exception() is not None:
                rollout.failed(version, "triton")
            elif timed:
                rollout.completed(version, time.perf_counter() - started)

        call.add_done_callback(done)

    async def _infer(
        self,
        model: str,
        version: int,
        inputs: list[Tensor],
        output: str,
        timeout_s: float,
        artifact: str = "",
    ) -> np.ndarray:
        # Triton continues the caller's trace, for sampled requests only (it
        # traces whatever carries a context).
        metadata = outbound_metadata() if is_sampled() else ()
        # The call is never cancelled from here: Triton 2.51's gRPC frontend
        # can crash on a request cancelled while it completes (reproduced
        # under overload; triton-inference-server/server#7368, fixed in
        # 24.12). An answer that comes too late for our caller finishes in
        # the background, unread; past max_abandoned_calls of those, new
        # calls fail at once, so an overloaded Triton's backlog is bounded.
        if self.abandoned >= self.settings.max_abandoned_calls:
            raise Unavailable("Triton is behind: too many late calls still running")
        call = asyncio.ensure_future(
            self.infer_stub.ModelInfer(
                infer_request(model, version, inputs, output),
                timeout=self.settings.triton_client_timeout_s,
                metadata=metadata,
            )
        )
        call.add_done_callback(_consume)
        self._track(call, artifact, timed=model == self.settings.ranking_model)
        try:
            # The caller's deadline cancels this handler (not the shielded
            # call); this wait bounds Triton's share, with room for loop lag,
            # which must not fail a call Triton answered in time.
            result = await asyncio.wait_for(asyncio.shield(call), timeout_s + BACKSTOP_GRACE_S)
        except (TimeoutError, asyncio.CancelledError) as stopped:
            if not call.done():
                self.abandoned += 1
                call.add_done_callback(self._late_call_done)
            if isinstance(stopped, asyncio.CancelledError):
                raise
            raise Unavailable("Triton did not answer within the deadline") from None
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise Unavailable("Triton did not answer within the deadline") from None
            log.warning("Triton %s inference failed: %s", model, exc.details())
            raise Unavailable(f"Triton {model} inference failed") from None
        return output_array(result)

    def _loaded_for(self, user_id: str) -> Loaded:
        """The version this user is on: the stable one unless a rollout says."""
        stable = self._current()
        rollout = self.rollout
        if rollout is None or not rollout.state.active:
            return stable
        return self.versions.get(rollout.version_for(user_id), stable)

    async def _with_fallback(self, loaded: Loaded, run: Callable[[Loaded], Awaitable[_T]]) -> _T:
        """A candidate's failure is answered by the stable version."""
        try:
            return await run(loaded)
        except Unavailable as failure:
            stable = self._current()
            if loaded.version == stable.version:
                raise
            log.debug("candidate %s failed (%s); stable answers", loaded.version, failure)
            return await run(stable)

    async def embed_user(self, user: UserInput, timeout_s: float) -> tuple[np.ndarray, str]:
        return await self._with_fallback(
            self._loaded_for(user.user_id), lambda loaded: self._embed(loaded, user, timeout_s)
        )

    async def _embed(
        self, loaded: Loaded, user: UserInput, timeout_s: float
    ) -> tuple[np.ndarray, str]:
        features, history = self.user_arrays(loaded.encoder, user)
        vector = await self._infer(
            self.settings.user_model,
            loaded.user_model_version,
            [("user_features", features), ("history", history)],
            "user_vector",
            timeout_s,
            artifact=loaded.version,
        )
        return vector[0], loaded.version

    def _check_count(self, n: int, field: str) -> None:
        if not n:
            raise InvalidArgument(field, "is empty")
        if n > self.settings.max_candidates:
            raise InvalidArgument(field, f"at most {self.settings.max_candidates}, got {n}")

    async def score(
        self,
        user: UserInput,
        candidates: Sequence[CandidateInput],
        user_vector: Sequence[float],
        timeout_s: float,
    ) -> tuple[np.ndarray, str, int]:
        """Score candidates that carry their item features (the message form)."""
        self._check_count(len(candidates), "candidates")

        def features(loaded: Loaded) -> np.ndarray:
            item = loaded.encoder.item
            return np.stack(
                [item(c.year, c.popularity, c.mean_rating, c.categories) for c in candidates]
            )

        retrieval = np.asarray([c.retrieval_score for c in candidates], dtype=np.float32)
        vector = np.asarray(user_vector, dtype=np.float32) if user_vector else None
        ids = [c.item_id for c in candidates]
        return await self._score_routed(
            user, ids, features, retrieval, vector, "", timeout_s, "user_vector"
        )

    async def score_ids(
        self,
        user: UserInput,
        item_ids: Sequence[str],
        retrieval_scores: np.ndarray,
        user_vector: np.ndarray | None,
        timeout_s: float,
        vector_version: str = "",
    ) -> tuple[np.ndarray, str, int]:
        """Score in columns: item features gathered from the live item table.
        A vector another model version computed (``vector_version``, a caller's
        cache) is not used: the user is embedded again by the version that scores."""
        n = len(item_ids)
        self._check_count(n, "item_ids")
        if len(retrieval_scores) != n:
            raise InvalidArgument(
                "retrieval_scores_f32", f"has {len(retrieval_scores)} values for {n} item_ids"
            )
        return await self._score_routed(
            user,
            item_ids,
            lambda loaded: self.items.features(loaded.encoder, item_ids),
            retrieval_scores,
            user_vector,
            vector_version,
            timeout_s,
            "user_vector_f32",
        )

    async def _score_routed(
        self,
        user: UserInput,
        item_ids: Sequence[str],
        item_features: Callable[[Loaded], np.ndarray],
        retrieval_scores: np.ndarray,
        user_vector: np.ndarray | None,
        vector_version: str,
        timeout_s: float,
        vector_field: str,
    ) -> tuple[np.ndarray, str, int]:
        """Scores with the user's version (stable on a candidate's failure);
        a vector from another version is not used, so a score never mixes two.
        A share of the stable version's answers is shadow-scored afterwards."""

        async def run(
            loaded: Loaded, vector: np.ndarray | None = user_vector
        ) -> tuple[np.ndarray, str, int]:
            if vector_version and vector_version != loaded.version:
                vector = None
            return await self._score(
                loaded,
                user,
                item_ids,
                item_features(loaded),
                retrieval_scores,
                vector,
                timeout_s,
                vector_field,
            )

        result = await self._with_fallback(self._loaded_for(user.user_id), run)
        rollout = self.rollout
        if rollout is not None and result[1] == rollout.state.stable and rollout.shadow_wanted():
            candidate = self.versions.get(rollout.state.candidate)
            if candidate is not None:

                async def shadow_scores() -> np.ndarray:
                    scores, _, _ = await self._score(
                        candidate,
                        user,
                        item_ids,
                        item_features(candidate),
                        retrieval_scores,
                        None,
                        self.settings.shadow_timeout_s,
                    )
                    return scores

                self.shadow.submit(result[0], shadow_scores)
        return result

    async def _score(
        self,
        loaded: Loaded,
        user: UserInput,
        item_ids: Sequence[str],
        item_features: np.ndarray,
        retrieval_scores: np.ndarray,
        user_vector: np.ndarray | None,
        timeout_s: float,
        vector_field: str = "user_vector",
    ) -> tuple[np.ndarray, str, int]:
        """One ranking inference; the user's vector computed when not given."""
        encoder = loaded.encoder
        dim = encoder.spec.embedding_dim
        if user_vector is None:
            user_vector, _ = await self._embed(loaded, user, timeout_s)
        elif len(user_vector) != dim:
            raise InvalidArgument(vector_field, f"has {len(user_vector)} values; expected {dim}")
        n = len(item_ids)
        rows = encoder.item_rows(item_ids)
        user_features, history = self.user_arrays(encoder, user)
        # Once per request here, not once per candidate row in the graph.
        user_affinity = vectors_or_zeros(loaded.affinity, history)
        inputs: list[Tensor] = [
            ("item_id", rows[:, None]),
            ("user_vector", np.broadcast_to(user_vector, (n, dim))),
            ("user_features", np.broadcast_to(user_features, (n, user_features.shape[1]))),
            ("item_features", item_features),
            ("retrieval_score", retrieval_scores.astype(np.float32, copy=False)[:, None]),
            # A version whose graph predates the affinity is fed without it
            # (infra/triton/onnx_model.py).
            ("user_affinity", np.broadcast_to(user_affinity, (n, AFFINITY_RANK))),
        ]
        scores = await self._infer(
            self.settings.ranking_model,
            loaded.ranking_model_version,
            inputs,
            "score",
            timeout_s,
            artifact=loaded.version,
        )
        if not np.isfinite(scores).all():
            # Never served: a candidate's request is answered by the stable
            # version; the stable version's is an error the gateway degrades.
            if self.rollout is not None:
                self.rollout.failed(loaded.version, "non_finite", counted=True)
            raise Unavailable(f"model version {loaded.version} returned non-finite scores")
        return scores[:, 0], loaded.version, int((rows == 0).sum())

    async def model_info(self) -> list[tuple[str, str, str]]:
        index = await self.client.get_model_repository_index(
            headers=self.control_headers, as_json=True
        )
        loaded = self.loaded
        names = {self.settings.user_model, self.settings.ranking_model}
        out = []
        for model in index.get("models", []):
            if model.get("name") in names:
                number = model.get("version", "")
                versions = read_versions(self.settings, model["name"])
                artifact = next((a for a, n in versions.items() if str(n) == number), number)
                out.append((model["name"], artifact, model.get("state", "")))
        if loaded is not None and not out:
            out.append((self.settings.ranking_model, loaded.version, "READY"))
        return out

    async def close(self) -> None:
        await self.shadow.close()
        await self.client.close()
        await self.channel.close()
