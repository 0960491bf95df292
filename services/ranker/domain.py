"""The ranker's domain: encode a user and candidates, score them with the
version the user is on, answer with the stable version when a candidate
fails.

Candidates' item features come from the ranker's own table (``item_table``),
kept live from the features service. The pieces: ``triton_client`` (the
wire), ``versions`` (what is loaded, the stable pin, the rollout), and here
the requests, EmbedUser (and EmbedUsers) and Score. A candidate version that fails or
returns non-finite scores is answered by the stable version instead, and the
judge sees the failure; a share of the stable version's answers is
shadow-scored with the candidate after answering.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import TypeVar

import numpy as np

from recserve_delivery.rollout import Plan, Rollout
from recserve_kit.errors import FailedPrecondition, InvalidArgument, Unavailable
from recserve_model.affinity import RANK as AFFINITY_RANK
from recserve_model.affinity import vectors_or_zeros
from services.ranker.config import RankerSettings
from services.ranker.inputs import CandidateInput, Scored, ScoreQuery, UserInput, user_arrays
from services.ranker.item_table import ItemTable
from services.ranker.loaded import Loaded
from services.ranker.shadow import Shadow
from services.ranker.source_inputs import SourceColumns, ann_only, candidate_sources
from services.ranker.triton_client import Tensor, TritonClient
from services.ranker.versions import ModelVersions

log = logging.getLogger(__name__)
_T = TypeVar("_T")
MAX_USERS = 256  # a call to the user tower (its max_batch_size, pipelines/triton_repo.py)


class Ranker:
    def __init__(self, settings: RankerSettings) -> None:
        self.settings = settings
        self.triton = TritonClient(settings)
        self.models = ModelVersions(settings, self.triton)
        self.items = ItemTable()
        self.shadow = Shadow(settings.shadow_max_in_flight, lambda: self.triton.abandoned > 0)

    @property
    def abandoned(self) -> int:
        """Triton calls still running that nobody waits for."""
        return self.triton.abandoned

    # -- versions and rollouts (ModelVersions) ----------------------------------

    async def models_ready(self) -> bool:
        return await self.models.models_ready()

    async def load(self, version: str) -> Loaded:
        return await self.models.load(version)

    def rollout_control(self) -> Rollout:
        return self.models.rollout_control()

    async def start_rollout(self, plan: Plan) -> Rollout:
        return await self.models.start_rollout(plan)

    def rollout_action(self, action: str) -> Rollout:
        return self.models.rollout_action(action)

    async def judge_forever(self) -> None:
        await self.models.judge_forever()

    async def model_info(self) -> list[tuple[str, str, str]]:
        return await self.models.model_info()

    # -- requests ----------------------------------------------------------------

    async def _with_fallback(self, loaded: Loaded, run: Callable[[Loaded], Awaitable[_T]]) -> _T:
        """A candidate's failure is answered by the stable version."""
        try:
            return await run(loaded)
        except Unavailable as failure:
            stable = self.models.current()
            if loaded.version == stable.version:
                raise
            log.debug("candidate %s failed (%s); stable answers", loaded.version, failure)
            return await run(stable)

    async def embed_user(self, user: UserInput, timeout_s: float) -> tuple[np.ndarray, str]:
        vectors, version = await self._with_fallback(
            self.models.for_user(user.user_id),
            lambda loaded: self._embed(loaded, [user], timeout_s),
        )
        return vectors[0], version

    async def embed_users(
        self, users: Sequence[UserInput], timeout_s: float
    ) -> list[tuple[np.ndarray, str]]:
        """Each user's vector on the version the user is on: one Triton call
        a version, not one a user."""
        if not users:
            raise InvalidArgument("users", "is empty")
        if len(users) > MAX_USERS:
            raise InvalidArgument("users", f"at most {MAX_USERS}, got {len(users)}")
        by_version: dict[str, tuple[Loaded, list[int]]] = {}
        for n, user in enumerate(users):
            loaded = self.models.for_user(user.user_id)
            by_version.setdefault(loaded.version, (loaded, []))[1].append(n)
        out: list[tuple[np.ndarray, str]] = [(np.empty(0, np.float32), "")] * len(users)
        for loaded, rows in by_version.values():
            group = [users[n] for n in rows]
            vectors, version = await self._with_fallback(
                loaded, partial(self._embed, users=group, timeout_s=timeout_s)
            )
            for n, vector in zip(rows, vectors, strict=True):
                out[n] = (vector, version)
        return out

    async def _embed(
        self, loaded: Loaded, users: Sequence[UserInput], timeout_s: float
    ) -> tuple[np.ndarray, str]:
        features, history = user_arrays(loaded.encoder, users)
        vectors = await self.triton.infer(
            self.settings.user_model,
            loaded.user_model_version,
            [("user_features", features), ("history", history)],
            "user_vector",
            timeout_s,
            self.models.tracker(loaded.version, timed=False),
        )
        return vectors, loaded.version

    async def embed_items(
        self, version: str, items: Sequence[CandidateInput], timeout_s: float
    ) -> tuple[np.ndarray, str, int]:
        """The item tower's vectors, in the space of ``version`` (loaded on
        demand; empty: the stable one), and how many ids it has never seen."""
        self._check_count(len(items), "items")
        loaded = await self.models.for_items(version) if version else self.models.current()
        if loaded.item_model_version is None:
            raise FailedPrecondition(
                f"model version {loaded.version} has no item tower (built before it was "
                "exported): give the items a vector"
            )
        await self.triton.ensure_loaded(self.settings.item_model, loaded.item_model_version)
        items = [self._with_live_stats(i) for i in items]
        encoder = loaded.encoder
        rows = encoder.item_rows([i.item_id for i in items])
        features = np.stack(
            [
                encoder.item(i.year, i.popularity, i.mean_rating, i.categories, i.attributes)
                for i in items
            ]
        )
        vectors = await self.triton.infer(
            self.settings.item_model,
            loaded.item_model_version,
            [("item_id", rows[:, None]), ("item_features", features)],
            "item_vector",
            timeout_s,
        )
        if not np.isfinite(vectors).all():
            raise Unavailable(f"model version {loaded.version}'s item tower returned non-finite")
        return vectors.astype(np.float32, copy=False), loaded.version, int((rows == 0).sum())

    def _with_live_stats(self, item: CandidateInput) -> CandidateInput:
        """A catalogue item sent without popularity and mean rating gets its
        live ones, and its known declared attributes where it sends none of
        that name (an upsert carries only the filterable ones), so an item
        upserted again unchanged keeps its vector."""
        known = self.items.get(item.item_id)
        if known is None:
            return item
        attributes = {**known.attributes, **item.attributes}
        if item.popularity or item.mean_rating:
            return replace(item, attributes=attributes)
        return replace(
            item,
            popularity=known.popularity,
            mean_rating=known.mean_rating,
            attributes=attributes,
        )

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
        sources: SourceColumns = (None, None, None),
    ) -> Scored:
        """Score candidates that carry their item features (the message form);
        ``sources``: the retriever's neighbour scores and source bits."""
        self._check_count(len(candidates), "candidates")
        extra = candidate_sources(len(candidates), *sources)

        def features(loaded: Loaded) -> np.ndarray:
            item = loaded.encoder.item
            return np.stack(
                [
                    item(c.year, c.popularity, c.mean_rating, c.categories, c.attributes)
                    for c in candidates
                ]
            )

        query = ScoreQuery(
            user,
            [c.item_id for c in candidates],
            features,
            np.asarray([c.retrieval_score for c in candidates], dtype=np.float32),
            timeout_s,
            np.asarray(user_vector, dtype=np.float32) if user_vector else None,
            source_features=extra,
        )
        return await self._score_routed(query)

    async def score_ids(
        self,
        user: UserInput,
        item_ids: Sequence[str],
        retrieval_scores: np.ndarray,
        user_vector: np.ndarray | None,
        timeout_s: float,
        vector_version: str = "",
        explain: bool = False,
        version: str = "",
        sources: SourceColumns = (None, None, None),
    ) -> Scored:
        """Score in columns: item features gathered from the live item table.
        A vector another model version computed (``vector_version``, a caller's
        cache) is not used: the user is embedded again by the version that scores.
        ``sources``: the retriever's neighbour scores and source bits."""
        n = len(item_ids)
        self._check_count(n, "item_ids")
        if len(retrieval_scores) != n:
            raise InvalidArgument(
                "retrieval_scores_f32", f"has {len(retrieval_scores)} values for {n} item_ids"
            )
        extra = candidate_sources(n, *sources)
        query = ScoreQuery(
            user,
            item_ids,
            lambda loaded: self.items.features(loaded.encoder, item_ids),
            retrieval_scores,
            timeout_s,
            user_vector,
            vector_version,
            "user_vector_f32",
            explain,
            version,
            extra,
        )
        return await self._score_routed(query)

    async def _score_routed(self, query: ScoreQuery) -> Scored:
        """Scores with the user's version (stable on a candidate's failure);
        a vector from another version is not used, so a score never mixes two.
        A share of the stable version's answers is shadow-scored afterwards."""

        async def run(loaded: Loaded) -> Scored:
            if query.vector_version and query.vector_version != loaded.version:
                return await self._score(loaded, replace(query, user_vector=None))
            return await self._score(loaded, query)

        if query.version:
            return await run(self.models.loaded_version(query.version))
        result = await self._with_fallback(self.models.for_user(query.user.user_id), run)
        candidate = self.models.shadow_candidate(result.model_version)
        if candidate is not None:
            shadow = replace(
                query, user_vector=None, timeout_s=self.settings.shadow_timeout_s, explain=False
            )

            async def shadow_scores() -> np.ndarray:
                return (await self._score(candidate, shadow)).scores

            self.shadow.submit(result.scores, shadow_scores)
        return result

    async def _score(self, loaded: Loaded, query: ScoreQuery) -> Scored:
        """One ranking inference; the user's vector computed when not given."""
        encoder = loaded.encoder
        dim = encoder.spec.embedding_dim
        user_vector = query.user_vector
        if user_vector is None:
            vectors, _ = await self._embed(loaded, [query.user], query.timeout_s)
            user_vector = vectors[0]
        elif len(user_vector) != dim:
            raise InvalidArgument(
                query.vector_field, f"has {len(user_vector)} values; expected {dim}"
            )
        n = len(query.item_ids)
        rows = encoder.item_rows(query.item_ids)
        user_features, history = user_arrays(encoder, [query.user])
        # Once per request here, not once per candidate row in the graph.
        user_affinity = vectors_or_zeros(loaded.affinity, history)
        inputs: list[Tensor] = [
            ("item_id", rows[:, None]),
            ("user_vector", np.broadcast_to(user_vector, (n, dim))),
            ("user_features", np.broadcast_to(user_features, (n, user_features.shape[1]))),
            ("item_features", query.item_features(loaded)),
            ("retrieval_score", query.retrieval_scores.astype(np.float32, copy=False)[:, None]),
            # A version whose graph predates the affinity is fed without it
            # (infra/triton/onnx_model.py).
            ("user_affinity", np.broadcast_to(user_affinity, (n, AFFINITY_RANK))),
            # Graphs from before the candidate sources are fed without it.
            (
                "source_features",
                ann_only(n) if query.source_features is None else query.source_features,
            ),
        ]
        scores = await self._rank(loaded, inputs, query.timeout_s)
        if not np.isfinite(scores).all():
            # Never served: a candidate's request is answered by the stable
            # version; the stable version's is an error the gateway degrades.
            if self.models.rollout is not None:
                self.models.rollout.failed(loaded.version, "non_finite", counted=True)
            raise Unavailable(f"model version {loaded.version} returned non-finite scores")
        affinity = None
        if query.explain and loaded.affinity is not None:
            affinity = loaded.affinity.scores(user_affinity[0], rows)
        return Scored(scores[:, 0], loaded.version, int((rows == 0).sum()), affinity)

    async def _rank(self, loaded: Loaded, inputs: list[Tensor], timeout_s: float) -> np.ndarray:
        """One ranking inference: Triton's dynamic batcher merges what arrives
        together (an adaptive window in the ranker lost to it side by side:
        docs/benchmarks.md)."""
        model, number = self.settings.ranking_model, loaded.ranking_model_version
        track = self.models.tracker(loaded.version, timed=True)
        return await self.triton.infer(model, number, inputs, "score", timeout_s, track)

    async def close(self) -> None:
        await self.shadow.close()
        await self.models.replica.close()
        await self.triton.close()
