"""Progressive delivery of a model version through the ranker.

A rollout moves users from the stable version to a candidate in steps (5%,
25%, 50%, 100% by default), each held for a soak time. Which users: a stable
hash of the user id, so a user stays on one version and, as the share grows,
only ever moves from stable to candidate. The judge looks at the candidate's
figures since its step began (ranking latency, Triton errors and non-finite
scores, Triton's memory) once a second and promotes, holds or rolls back;
every transition is persisted (recserve_model.rollout_state), logged with
its figures and counted in metrics.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from hdrh.histogram import HdrHistogram
from prometheus_client import Counter, Gauge, Histogram
from recserve_model import rollout_state
from recserve_model.rollout_state import Decision, RolloutState, Triggers

from recserve_kit.errors import FailedPrecondition, InvalidArgument

log = logging.getLogger(__name__)

MIN_ERRORS = 5  # errors that judge a rate before min_requests (a broken version)
MIN_SLOW = 10  # requests whose median alone can judge latency (a slow version)
HOLD_LOG_S = 10.0

SHARE = Gauge("recserve_ranker_rollout_share_percent", "Users on the candidate version.")
DECISIONS = Counter(
    "recserve_ranker_rollout_decisions_total", "The rollout judge's decisions.", ["action"]
)
CANDIDATE = Gauge(
    "recserve_ranker_rollout_candidate",
    "The candidate's figures at the judge's last look (this step).",
    ["figure"],
)
STATUS = Gauge("recserve_ranker_rollout_status", "1 for the rollout's status.", ["status"])
VERSION_SECONDS = Histogram(
    "recserve_ranker_version_seconds",
    "Ranking inference time by model version (recorded also when the caller gave up).",
    ["version"],
    buckets=(0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5),
)
VERSION_ERRORS = Counter(
    "recserve_ranker_version_errors_total",
    "Failed inferences by model version: Triton errors, non-finite scores.",
    ["version", "kind"],
)


def user_position(user_id: str) -> float:
    """Where a user falls in [0, 100): the same on every process and restart."""
    digest = hashlib.blake2b(user_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 * 100.0


class VersionWindow:
    """One version's figures since the current step began."""

    def __init__(self) -> None:
        self.latency_us = HdrHistogram(1, 60_000_000, 3)
        self.requests = 0
        self.errors = 0

    def completed(self, seconds: float) -> None:
        self.requests += 1
        self.latency_us.record_value(max(1, min(int(seconds * 1e6), 60_000_000)))

    def failed(self, counted: bool = False) -> None:
        """``counted``: the call was already counted as completed (bad output)."""
        self.requests += 0 if counted else 1
        self.errors += 1

    def percentile_ms(self, p: float) -> float:
        if not self.latency_us.get_total_count():
            return 0.0
        return float(self.latency_us.get_value_at_percentile(p)) / 1000.0

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0


@dataclass(frozen=True)
class Verdict:
    action: Literal["promote", "hold", "rollback"]
    reason: str
    figures: dict[str, float] = field(default_factory=dict)


def judge(
    state: RolloutState, window: VersionWindow, memory_fraction: float | None, now: float
) -> Verdict:
    """The decision for the candidate's current step (a pure function)."""
    t = state.triggers
    elapsed = now - state.step_started_at
    figures = {
        "requests": float(window.requests),
        "errors": float(window.errors),
        "error_rate": window.error_rate,
        "p50_ms": window.percentile_ms(50),
        "p99_ms": window.percentile_ms(99),
        "step_elapsed_s": round(elapsed, 3),
    }
    if memory_fraction is not None:
        figures["memory_fraction"] = memory_fraction
        if memory_fraction > t.max_memory_fraction:
            return Verdict(
                "rollback",
                f"Triton memory {memory_fraction:.1%} > {t.max_memory_fraction:.1%}",
                figures,
            )
    enough = window.requests >= state.min_requests
    if window.error_rate > t.max_error_rate and (enough or window.errors >= MIN_ERRORS):
        return Verdict(
            "rollback",
            f"error rate {window.error_rate:.2%} ({window.errors}/{window.requests}) "
            f"> {t.max_error_rate:.2%}",
            figures,
        )
    latency_count = window.latency_us.get_total_count()
    if enough and figures["p99_ms"] > t.max_p99_ms:
        return Verdict(
            "rollback", f"p99 {figures['p99_ms']:.0f} ms > {t.max_p99_ms:.0f} ms", figures
        )
    if latency_count >= MIN_SLOW and figures["p50_ms"] > t.max_p99_ms:
        return Verdict(
            "rollback",
            f"median {figures['p50_ms']:.0f} ms > the p99 limit {t.max_p99_ms:.0f} ms",
            figures,
        )
    if state.status == "paused":
        return Verdict("hold", "paused by the operator", figures)
    if not enough:
        return Verdict("hold", f"{window.requests}/{state.min_requests} requests", figures)
    if elapsed < state.soak_s:
        return Verdict("hold", f"soaking {elapsed:.0f}/{state.soak_s:.0f} s", figures)
    return Verdict("promote", "soaked with every figure inside its limit", figures)


@dataclass(frozen=True)
class Plan:
    candidate: str
    steps_percent: list[float]
    soak_s: float
    min_requests: int
    shadow_percent: float
    triggers: Triggers

    def check(self) -> None:
        steps = self.steps_percent
        if not steps or any(not 0 < s <= 100 for s in steps):
            raise InvalidArgument("steps_percent", "each step must be in (0, 100]")
        if any(b <= a for a, b in itertools.pairwise(steps)) or steps[-1] != 100:
            raise InvalidArgument("steps_percent", "must increase and end at 100")
        if not 0 <= self.shadow_percent <= 100:
            raise InvalidArgument("shadow_percent", "must be in [0, 100]")


class Rollout:
    """The state machine; the ranker applies what it decides (version pins)."""

    def __init__(self, data_dir: Path, stable: str, clock: Callable[[], float] = time.time) -> None:
        self.data_dir = data_dir
        self.clock = clock
        self.state = rollout_state.load(data_dir) or RolloutState(stable=stable)
        self.windows: dict[str, VersionWindow] = {}
        self.last: Verdict | None = None
        self._last_hold_log = 0.0
        self._export()

    # -- routing ---------------------------------------------------------------

    def version_for(self, user_id: str) -> str:
        s = self.state
        if s.active and user_position(user_id) < s.share_percent:
            return s.candidate
        return s.stable

    def shadow_wanted(self) -> bool:
        s = self.state
        return s.active and random.random() * 100 < s.shadow_percent

    def completed(self, version: str, seconds: float) -> None:
        self.windows.setdefault(version, VersionWindow()).completed(seconds)
        VERSION_SECONDS.labels(version).observe(seconds)

    def failed(self, version: str, kind: str, counted: bool = False) -> None:
        self.windows.setdefault(version, VersionWindow()).failed(counted)
        VERSION_ERRORS.labels(version, kind).inc()

    # -- transitions -------------------------------------------------------------

    def start(self, plan: Plan) -> None:
        plan.check()
        if self.state.active:
            raise FailedPrecondition(
                f"a rollout of {self.state.candidate} is {self.state.status}; abort it first"
            )
        if plan.candidate == self.state.stable:
            raise InvalidArgument("version", f"{plan.candidate} is already the stable version")
        self.state = RolloutState(
            stable=self.state.stable,
            candidate=plan.candidate,
            status="running",
            steps_percent=plan.steps_percent,
            soak_s=plan.soak_s,
            min_requests=plan.min_requests,
            shadow_percent=plan.shadow_percent,
            triggers=plan.triggers,
            history=self.state.history,
        )
        self._new_step()
        self._decide("start", f"candidate {plan.candidate} at {plan.steps_percent[0]:g}%")

    def resumed_after_restart(self) -> None:
        """Resume at the persisted step: its soak and figures start over."""
        self._new_step()
        self._decide("resume-after-restart", f"step {self.state.step + 1} starts over")

    def set_stable(self, version: str) -> None:
        """An operator's LoadModel outside a rollout."""
        if self.state.active:
            raise FailedPrecondition(
                f"a rollout of {self.state.candidate} is {self.state.status}; "
                "promote or abort it instead"
            )
        self.state = self.state.model_copy(update={"stable": version})
        self._save()

    def pause(self) -> None:
        self._require("running")
        self.state.status = "paused"
        self._decide("pause", "by the operator")

    def resume(self) -> None:
        self._require("paused")
        self.state.status = "running"
        self._new_step()
        self._decide("resume", f"step {self.state.step + 1}'s soak starts over")

    def promote(
        self, reason: str = "by the operator", figures: dict[str, float] | None = None
    ) -> None:
        """Next step now; past the last one the candidate becomes stable."""
        self._require("running", "paused")
        s = self.state
        if s.step + 1 < len(s.steps_percent):
            s.step += 1
            self._new_step()
            self._decide("promote", f"to {s.share_percent:g}%: {reason}", figures)
        else:
            s.status = "promoted"
            s.stable, s.reason = s.candidate, reason
            self._decide("promote", f"{s.candidate} is stable: {reason}", figures)

    def rollback(self, reason: str, figures: dict[str, float] | None = None) -> None:
        self._require("running", "paused")
        self.state.status = "rolled_back"
        self.state.reason = reason
        self._decide("rollback", reason, figures)

    def abort(self) -> None:
        self._require("running", "paused")
        self.state.status = "aborted"
        self.state.reason = "by the operator"
        self._decide("abort", "by the operator")

    def tick(self, memory_fraction: float | None) -> Verdict | None:
        """The judge's look; applies a promotion or a rollback."""
        s = self.state
        if not s.active:
            return None
        window = self.windows.setdefault(s.candidate, VersionWindow())
        verdict = judge(s, window, memory_fraction, self.clock())
        self.last = verdict
        for name, value in verdict.figures.items():
            CANDIDATE.labels(name).set(value)
        if verdict.action == "rollback":
            self.rollback(verdict.reason, verdict.figures)
        elif verdict.action == "promote":
            self.promote(verdict.reason, verdict.figures)
        else:
            DECISIONS.labels("hold").inc()
            now = self.clock()
            if now - self._last_hold_log >= HOLD_LOG_S:
                self._last_hold_log = now
                log.info(
                    "rollout holds",
                    extra={"fields": {"reason": verdict.reason, **verdict.figures}},
                )
        return verdict

    # -- internals ---------------------------------------------------------------

    def _require(self, *statuses: str) -> None:
        if self.state.status not in statuses:
            raise FailedPrecondition(
                f"the rollout is {self.state.status}; this needs it {' or '.join(statuses)}"
            )

    def _new_step(self) -> None:
        self.state.step_started_at = self.clock()
        self.windows = {}

    def _decide(self, action: str, reason: str, figures: dict[str, float] | None = None) -> None:
        s = self.state
        decision = Decision(
            at=self.clock(),
            action=action,
            reason=reason,
            share_percent=s.share_percent,
            figures=figures or {},
        )
        s.record(decision)
        self._save()
        DECISIONS.labels(action).inc()
        log.info(
            "rollout %s",
            action,
            extra={
                "fields": {
                    "reason": reason,
                    "stable": s.stable,
                    "candidate": s.candidate,
                    "share_percent": s.share_percent,
                    **(figures or {}),
                }
            },
        )

    def _save(self) -> None:
        rollout_state.save(self.data_dir, self.state)
        self._export()

    def _export(self) -> None:
        SHARE.set(self.state.share_percent)
        STATUS.clear()
        STATUS.labels(self.state.status).set(1)
