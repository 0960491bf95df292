"""The gateway's two request flows: Recommend (features -> user embedding ->
retrieval -> ranking -> top-k) and SimilarItems (retrieval around an item,
ranked for the user when one is given). A stage that fails raises
``StageFailed``; where the flow knows more than the caller of the flow (the
user, what they saw), it answers from the degrade policy itself."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

import numpy as np
from opentelemetry import trace

from recserve.features.v1 import features_pb2 as fpb
from recserve_kit import attributes as attr
from services.gateway.backends import Backends, Embedded, Ranked, Retrieved, ranker_profile
from services.gateway.degrade import Degrade, Known
from services.gateway.query import Answer, Explanation, Item, Query
from services.gateway.stages import StageFailed, Stages

RETRIEVER_EXCLUDE_LIMIT = 1000


class Flows:
    def __init__(self, backends: Backends, degrade: Degrade) -> None:
        self.backends = backends
        self.degrade = degrade
        self.catalogue = degrade.catalogue

    async def recommend(self, query: Query, stages: Stages) -> Answer:
        user = await self.backends.user(stages, query.user_id)
        trace.get_current_span().set_attribute(attr.USER_FOUND, user.found)
        if not user.found:
            return self.degrade.answer("new_user", "COLD_START", query, timings=stages.timings)
        seen = list(user.seen_item_ids)
        profile = ranker_profile(user)
        try:
            embedded = await self.backends.embed(stages, profile, user)
            exclude = list(query.exclude_item_ids)[:RETRIEVER_EXCLUDE_LIMIT]
            history = seen[: max(0, RETRIEVER_EXCLUDE_LIMIT - len(exclude))]
            retrieved = await self.backends.search(
                stages, embedded, query.categories, exclude, query.attribute_filters, history
            )
        except StageFailed as failure:
            known = Known(user, seen)
            answer = self.degrade.answer(
                failure.stage, failure.reason, query, known, stages.timings
            )
            if answer.source == "PRECOMPUTED":
                return await self._with_titles(answer, stages)
            return answer
        if len(seen) + len(query.exclude_item_ids) > RETRIEVER_EXCLUDE_LIMIT:
            # The retriever was sent only the first 1,000 exclusions; the
            # history it had may come back as repeats, where a shop has them.
            blocked = {*query.exclude_item_ids, *seen[len(history) :]}
            retrieved = retrieved.only([n for n, i in enumerate(retrieved.ids) if i not in blocked])
        return await self._rank_and_merge(query, profile, embedded, retrieved, stages)

    async def similar(self, query: Query, stages: Stages) -> Answer:
        user: fpb.UserFeatures | None = None
        seen: list[str] = []
        if query.user_id:
            user = await self.backends.user(stages, query.user_id)
            seen = list(user.seen_item_ids) if user.found else []
        depth = self.backends.settings.candidates if user is not None and user.found else query.k
        candidates = await self.backends.similar(
            stages,
            query.item_id,
            depth,
            query.categories,
            query.exclude_item_ids,
            query.attribute_filters,
        )
        blocked = {*query.exclude_item_ids, *seen}
        hits = [c for c in candidates if c.item_id not in blocked]
        retrieved = Retrieved(
            [c.item_id for c in hits], np.fromiter((c.score for c in hits), np.float32, len(hits))
        )
        if user is None or not user.found:
            return await self._rank_and_merge(query, None, None, retrieved, stages)
        profile = ranker_profile(user)
        embedded = await self.backends.embed(stages, profile, user)
        return await self._rank_and_merge(query, profile, embedded, retrieved, stages)

    async def _rank_and_merge(
        self,
        query: Query,
        profile: fpb.UserFeatures | None,
        embedded: Embedded | None,
        retrieved: Retrieved,
        stages: Stages,
    ) -> Answer:
        ids, retrieval_scores = retrieved.ids, retrieved.scores
        span = trace.get_current_span()
        span.set_attribute(attr.CANDIDATES, len(ids))
        if not ids:
            # Nothing passes the filters (every match seen or excluded): an
            # empty answer, not an outage.
            return Answer([], timings=stages.timings)
        scores, model_version, degraded = retrieval_scores, "", ""
        ranked = None
        if profile is not None and embedded is not None:
            try:
                ranked = await self.backends.score(
                    stages,
                    profile,
                    embedded,
                    retrieved,
                    query.debug,
                    query.model_version,
                )
                scores, model_version = ranked.scores, ranked.model_version
            except StageFailed as failure:
                # Retrieval order is still personal: better than popularity.
                degraded = failure.reason
                self.degrade.ranking_failed(degraded)
        started = time.perf_counter()
        items = self._top(query.k, ids, scores)
        if query.debug:
            items = explained(items, ids, retrieval_scores, ranked)
        answer = Answer(
            items,
            degraded=bool(degraded),
            reason=degraded,
            model_version=model_version,
            timings=stages.timings,
            source="RETRIEVAL_ORDER" if degraded else "",
        )
        answer = await self._with_titles(answer, stages)
        stages.timings.append(("merge", (time.perf_counter() - started) * 1000))
        span.set_attribute(attr.RESULTS, len(answer.items))
        span.set_attribute(attr.MODEL_VERSION, answer.model_version)
        span.set_attribute(attr.DEGRADED, answer.degraded)
        return answer

    def _top(self, k: int, ids: Sequence[str], scores: np.ndarray) -> list[Item]:
        chosen: dict[str, Item] = {}
        # Best first; ties keep retrieval order (a stable sort).
        for n in np.argsort(-scores, kind="stable").tolist():
            item_id = ids[n]
            if item_id not in chosen:
                chosen[item_id] = self.catalogue.item(item_id, float(scores[n]))
            if len(chosen) == k:
                break
        return list(chosen.values())

    async def _with_titles(self, answer: Answer, stages: Stages) -> Answer:
        """Titles the live catalogue lacks (not synced yet, or items newer than
        it: upserted since the last build), asked for just those items."""
        missing = [i.item_id for i in answer.items if not i.title]
        if not missing:
            return answer
        found = await self.backends.describe(stages, missing)
        if not found:
            return answer
        items = [
            Item(i.item_id, i.score, *found[i.item_id]) if i.item_id in found and not i.title else i
            for i in answer.items
        ]
        return dataclasses.replace(answer, items=items)


def explained(
    items: list[Item], ids: Sequence[str], retrieval_scores: np.ndarray, ranked: Ranked | None
) -> list[Item]:
    """Each item with where it came from and the parts of its score."""
    position = {item_id: n for n, item_id in reversed(list(enumerate(ids)))}
    affinity = ranked.affinity if ranked is not None else None
    out = []
    for item in items:
        n = position[item.item_id]
        explanation = Explanation(
            stage="rank" if ranked is not None else "retrieval_order",
            retrieval_score=float(retrieval_scores[n]),
            retrieval_rank=n,
            ranker_score=float(ranked.scores[n]) if ranked is not None else 0.0,
            affinity=float(affinity[n]) if affinity is not None and n < len(affinity) else 0.0,
        )
        out.append(dataclasses.replace(item, explanation=explanation))
    return out
