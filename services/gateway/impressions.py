"""What each answer showed, recorded off the request path: one impression
per Recommend and SimilarItems answer, under the answer's
``recommendation_id``, in the append-only log the outcome metrics and the
next build read (``<data_dir>/events/impressions/``, recserve_kit.jsonl_log).

The rollout arm is the version's role in the ranker's rollout state
(re-read with the fallback lists): "stable" or "candidate" while a rollout
runs, "" otherwise.
"""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path

from prometheus_client import Counter

from recserve_delivery import state as rollout_state
from recserve_kit.errors import InvalidArgument
from recserve_kit.jsonl_log import JsonlLog
from services.gateway.outcome_metrics import OutcomeMetrics
from services.gateway.query import Answer, Query

IMPRESSIONS = Counter(
    "recserve_gateway_impressions_total",
    "Answers recorded as impressions, or dropped (the log's queue was full).",
    ["outcome"],
)
RECORDED, DROPPED = IMPRESSIONS.labels("recorded"), IMPRESSIONS.labels("dropped")
SURFACE = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
DEFAULT_SURFACE = "default"


def check_surface(surface: str) -> str:
    if not surface:
        return DEFAULT_SURFACE
    if not SURFACE.fullmatch(surface):
        raise InvalidArgument("surface", "1 to 64 letters, digits and -_.:")
    return surface


def new_recommendation_id() -> str:
    return uuid.uuid4().hex


class RolloutArms:
    """Which arm a model version is in, from the ranker's rollout state."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.arms: dict[str, str] = {}  # model version -> arm, while a rollout runs

    def reload(self) -> None:
        try:
            state = rollout_state.load(self.data_dir)
        except rollout_state.RolloutStateError:
            return  # keep what was known; the ranker reports the broken file
        active = state is not None and state.status in rollout_state.ACTIVE
        self.arms = state.arms() if state is not None and active else {}

    def arm(self, version: str) -> str:
        """ "stable", "candidate", "candidate-2", ... or "" outside a rollout."""
        return self.arms.get(version, "") if version else ""


class Impressions:
    def __init__(
        self, log: JsonlLog | None, arms: RolloutArms, outcomes: OutcomeMetrics | None = None
    ) -> None:
        self.log = log
        self.arms = arms
        self.outcomes = outcomes or OutcomeMetrics()

    def record(
        self, recommendation_id: str, kind: str, query: Query, answer: Answer, surface: str
    ) -> None:
        arm = self.arms.arm(answer.model_version)
        self.outcomes.shown(recommendation_id, answer.model_version, arm, surface)
        if self.log is None:
            return
        record = {
            "recommendation_id": recommendation_id,
            "at": round(time.time(), 3),
            "kind": kind,
            "user_id": query.user_id,
            "item_id": query.item_id,
            "surface": surface,
            "items": [i.item_id for i in answer.items],
            "model_version": answer.model_version,
            "arm": arm,
            "degraded": answer.degraded,
            "degraded_reason": answer.reason,
            "fallback_source": answer.source,
        }
        (RECORDED if self.log.append(record) else DROPPED).inc()

    def close(self) -> None:
        if self.log is not None:
            self.log.close()
