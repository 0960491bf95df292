"""A rollout's state, persisted, and the judge that decides its steps.

``<data_dir>/rollout/ranker.json``: the ranker's model rollout, written at
every step, decision and operator action (atomically) and read back when the
ranker restarts; read by the Triton repository's publisher, which never
deletes a version a rollout uses. ``gateway.json``: the service canary at
Envoy (recserve_stack.service_canary). Both are judged by ``judge``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from recserve_delivery import sequential
from recserve_delivery.outcomes import Cell, required_lists
from recserve_model import artifacts

Status = Literal["idle", "running", "paused", "promoted", "rolled_back", "aborted", "concluded"]
ACTIVE: frozenset[str] = frozenset({"running", "paused"})
HISTORY = 50  # decisions kept in the file (all of them go to the log)


class Triggers(BaseModel):
    """Roll back when the candidate crosses any of these (the seeds' defaults)."""

    max_p99_ms: float = Field(150.0, gt=0)
    max_error_rate: float = Field(0.005, ge=0, le=1)
    max_memory_fraction: float = Field(0.85, gt=0, le=1)


class Guardrail(BaseModel):
    """The business guardrail, a sequential test (recserve_delivery.sequential):
    roll back as soon as the candidate converts significantly less than the
    stable; let the judge promote as soon as it is shown no worse than
    ``min_detectable_drop``; hold until one of the two. ``power`` sizes an
    experiment's fixed sample (its report), not the guardrail."""

    baseline_rate: float = Field(gt=0, lt=1, description="The stable's conversion, about.")
    min_detectable_drop: float = Field(
        0.02, gt=0, lt=1, description="The relative drop to detect (0.02: 2% down)."
    )
    alpha: float = Field(0.05, gt=0, lt=0.5, description="One-sided false alarm rate.")
    power: float = Field(0.8, gt=0.5, lt=1, description="Chance to catch a drop that large.")
    max_decision_s: float = Field(
        7 * 86400.0, gt=0, description="Refuse a start whose decision would take longer."
    )

    @property
    def required_lists(self) -> int:
        return required_lists(self.baseline_rate, self.min_detectable_drop, self.alpha, self.power)

    def split_among(self, arms: int) -> Guardrail:
        """The guardrail for each of ``arms`` candidate arms: alpha divided
        among them (Bonferroni), so the chance of a false alarm on any of
        them stays alpha; the sample each needs follows."""
        return self if arms <= 1 else self.model_copy(update={"alpha": self.alpha / arms})


class Decision(BaseModel):
    at: float  # unix seconds
    action: str  # start, promote, rollback, pause, resume, abort, resume-after-restart, reset
    reason: str
    share_percent: float
    figures: dict[str, float] = Field(default_factory=dict)


class RolloutState(BaseModel):
    stable: str
    candidate: str = ""
    status: Status = "idle"
    steps_percent: list[float] = Field(default_factory=lambda: [5.0, 25.0, 50.0, 100.0])
    step: int = 0
    soak_s: float = 60.0
    min_requests: int = 50
    shadow_percent: float = 0.0
    triggers: Triggers = Field(default_factory=Triggers)
    guardrail: Guardrail | None = None
    started_at: float = 0.0  # the rollout's start: the guardrail's sample since then
    # The guardrail's decision expected by (unix s) at the traffic measured at
    # the start, and that traffic (lists a second); 0: none measured.
    guardrail_decision_by: float = 0.0
    measured_lists_per_s: float = 0.0
    # An A/B experiment: one split held until then, never promoted by the
    # judge; at the end every user is back on the stable ("concluded").
    experiment_until: float = 0.0
    ended_at: float = 0.0
    step_started_at: float = 0.0
    reason: str = ""
    history: list[Decision] = Field(default_factory=list)
    # An experiment's further arms, each on the next range of users of the same share.
    more_candidates: list[str] = Field(default_factory=list)

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    @property
    def candidates(self) -> list[str]:
        """The candidate arms' versions in order (an experiment may have several)."""
        return [self.candidate, *self.more_candidates] if self.candidate else []

    def arms(self) -> dict[str, str]:
        """Model version -> arm: "stable", "candidate", "candidate-2", ..."""
        return {self.stable: "stable"} | {v: arm_name(n) for n, v in enumerate(self.candidates)}

    def arm_guardrail(self) -> Guardrail | None:
        """The guardrail each candidate arm is judged by (alpha split among them)."""
        g = self.guardrail
        return None if g is None else g.split_among(len(self.candidates))

    @property
    def share_percent(self) -> float:
        """Users on the candidate now (0 unless running or paused)."""
        return self.steps_percent[self.step] if self.active else 0.0

    def record(self, decision: Decision) -> None:
        self.history = [*self.history, decision][-HISTORY:]


def arm_name(n: int) -> str:
    """The n-th candidate arm's name (0-based): "candidate", "candidate-2", ..."""
    return "candidate" if n == 0 else f"candidate-{n + 1}"


class RolloutStateError(RuntimeError):
    pass


def path(data_dir: Path, name: str = "ranker") -> Path:
    return data_dir / "rollout" / f"{name}.json"


def load(data_dir: Path, name: str = "ranker") -> RolloutState | None:
    """The persisted state, None if there is none; a damaged file is an error
    (silently starting over could serve a version an operator rolled back)."""
    file = path(data_dir, name)
    if not file.exists():
        return None
    try:
        return RolloutState.model_validate_json(file.read_text())
    except ValidationError as exc:
        raise RolloutStateError(f"{file}: unreadable rollout state: {exc}") from None


def save(data_dir: Path, state: RolloutState, name: str = "ranker") -> None:
    file = path(data_dir, name)
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.with_suffix(".tmp")
    tmp.write_text(state.model_dump_json(indent=2))
    os.replace(tmp, file)


def protected_versions(data_dir: Path) -> set[str]:
    """Artifact versions the ranker serves or may switch to: never deleted
    (the current artifact's too: a candidate built beside it is newer)."""
    pointer = artifacts.artifacts_root(data_dir) / "CURRENT"
    current = {pointer.read_text().strip()} if pointer.exists() else set()
    try:
        state = load(data_dir)
    except RolloutStateError:
        return current
    if state is None:
        return current
    return current | {v for v in (state.stable, *(state.candidates if state.active else ())) if v}


# -- the judge -------------------------------------------------------------------

MIN_ERRORS = 5  # errors that judge a rate before min_requests (a broken version)
MIN_SLOW = 10  # timed requests whose median alone can judge latency (a slow version)
# Timed requests before a p99 can roll back: of fewer, the p99 is the
# slowest one, and a single cold call (a new version's first batch) rolled
# back a good retrained model. Over the limit with fewer, the judge holds.
MIN_P99 = 100


@dataclass(frozen=True)
class Figures:
    """The candidate's figures since its step began."""

    requests: int
    errors: int
    p50_ms: float
    p99_ms: float
    timed: int  # requests with a latency (the successful ones)
    # Lists shown and converted per arm since the rollout started (guardrail only).
    arms: Mapping[str, Cell] | None = None

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0


@dataclass(frozen=True)
class Verdict:
    action: Literal["promote", "hold", "rollback", "conclude"]
    reason: str
    figures: dict[str, float] = field(default_factory=dict)


def percent(fraction: float, decimals: int) -> str:
    """``fraction`` as a percentage with ``decimals`` places, or with two
    significant digits where those would show a limit such as 0.0001 as 0%."""
    shown = f"{fraction:.{decimals}%}"
    if fraction and float(shown.rstrip("%")) == 0:
        return f"{fraction * 100:.2g}%"
    return shown


def judge(
    state: RolloutState,
    figures: Figures,
    memory_fraction: float | None,
    now: float,
    arm: str = "candidate",
) -> Verdict:
    """The decision for a candidate arm's current step (a pure function)."""
    elapsed = now - state.step_started_at
    seen = {
        "requests": float(figures.requests),
        "errors": float(figures.errors),
        "error_rate": figures.error_rate,
        "p50_ms": figures.p50_ms,
        "p99_ms": figures.p99_ms,
        "step_elapsed_s": round(elapsed, 3),
    }
    if memory_fraction is not None:
        seen["memory_fraction"] = memory_fraction
    tripped = trigger_verdict(state, figures, memory_fraction, seen)
    if tripped is not None:
        return tripped
    guarded = guardrail_verdict(state, figures, seen, arm, now)
    if guarded is not None and guarded.action == "rollback":
        return guarded
    if state.experiment_until:
        # Triggers and the guardrail's rollback protect an experiment too;
        # its end is the clock's, whatever the sample (the report says).
        left = state.experiment_until - now
        if left <= 0:
            return Verdict("conclude", "the experiment's time is up", seen)
        return Verdict("hold", f"experiment: {left:.0f} s left", seen)
    if state.status == "paused":
        return Verdict("hold", "paused by the operator", seen)
    if guarded is not None:
        return guarded  # holding for the evidence: no promotion before it
    if figures.requests < state.min_requests:
        return Verdict("hold", f"{figures.requests}/{state.min_requests} requests", seen)
    if elapsed < state.soak_s:
        return Verdict("hold", f"soaking {elapsed:.0f}/{state.soak_s:.0f} s", seen)
    if figures.p99_ms > state.triggers.max_p99_ms:  # of fewer than MIN_P99: not yet judged
        return Verdict(
            "hold",
            f"p99 {figures.p99_ms:.0f} ms over the limit from {figures.timed} timed requests: "
            f"waiting for {MIN_P99} to judge it",
            seen,
        )
    return Verdict("promote", "soaked with every figure inside its limit", seen)


def trigger_verdict(
    state: RolloutState,
    figures: Figures,
    memory_fraction: float | None,
    seen: dict[str, float],
) -> Verdict | None:
    """A rollback when memory, errors or latency cross their limits."""
    t = state.triggers
    if memory_fraction is not None and memory_fraction > t.max_memory_fraction:
        return Verdict(
            "rollback",
            f"memory {percent(memory_fraction, 1)} > {percent(t.max_memory_fraction, 1)}",
            seen,
        )
    enough = figures.requests >= state.min_requests
    rate = figures.error_rate
    if rate > t.max_error_rate and (enough or figures.errors >= MIN_ERRORS):
        return Verdict(
            "rollback",
            f"error rate {percent(rate, 2)} ({figures.errors}/{figures.requests}) "
            f"> {percent(t.max_error_rate, 2)}",
            seen,
        )
    if enough and figures.timed >= MIN_P99 and figures.p99_ms > t.max_p99_ms:
        return Verdict("rollback", f"p99 {figures.p99_ms:.0f} ms > {t.max_p99_ms:.0f} ms", seen)
    if figures.timed >= MIN_SLOW and figures.p50_ms > t.max_p99_ms:
        return Verdict(
            "rollback",
            f"median {figures.p50_ms:.0f} ms > the p99 limit {t.max_p99_ms:.0f} ms",
            seen,
        )
    return None


def guardrail_verdict(
    state: RolloutState,
    figures: Figures,
    seen: dict[str, float],
    arm: str = "candidate",
    now: float = 0.0,
) -> Verdict | None:
    """The sequential guardrail's look: a rollback on a significant drop; a
    hold (no promotion) until the candidate is shown no worse than the
    minimum drop; None when it is (or the guardrail is off)."""
    g = state.arm_guardrail()
    if g is None:
        return None
    arms = figures.arms or {}
    stable, candidate = arms.get("stable", Cell()), arms.get(arm, Cell())
    result = sequential.evidence(stable, candidate, g.min_detectable_drop, g.alpha, g.baseline_rate)
    seen |= {
        "stable_lists": float(stable.lists),
        "candidate_lists": float(candidate.lists),
        "stable_conversion": stable.rate,
        "candidate_conversion": candidate.rate,
        "conversion_difference": result.difference,
        "guardrail_worse_p": result.worse_p,
        "guardrail_not_worse_p": result.not_worse_p,
    }
    rates = f"conversion {percent(candidate.rate, 2)} vs stable {percent(stable.rate, 2)}"
    lists = f"{candidate.lists} and {stable.lists} lists"
    if result.decision == "rollback":
        relative = result.difference / stable.rate if stable.rate else 0.0
        return Verdict(
            "rollback",
            f"{rates} ({relative:+.1%} relative, always-valid p = {result.worse_p:.3g}, {lists})",
            seen,
        )
    if result.decision == "pass":
        return None
    left = expected_left_s(state, stable, candidate, g, now)
    if math.isfinite(left):
        seen["guardrail_expected_s_left"] = round(left, 1)
    eta = f"; a decision in about {duration(left)} at this traffic" if math.isfinite(left) else ""
    return Verdict(
        "hold",
        f"guardrail: {rates} over {lists}, not yet shown no worse than "
        f"-{g.min_detectable_drop:.0%} (always-valid p {result.not_worse_p:.3g}, "
        f"alpha {g.alpha:g}){eta}",
        seen,
    )


def expected_left_s(
    state: RolloutState, stable: Cell, candidate: Cell, g: Guardrail, now: float
) -> float:
    """Seconds until a decision expected at the traffic since the start."""
    served = stable.lists + candidate.lists
    elapsed = now - state.started_at
    if not served or elapsed <= 0 or not candidate.lists:
        return math.inf
    share = candidate.lists / served
    need = sequential.lists_to_decide(g.baseline_rate, g.min_detectable_drop, g.alpha, share)
    return max(0.0, need - served) / (served / elapsed)


def duration(seconds: float) -> str:
    """A duration as people say it: 40 s, 12 min, 3.5 h, 2.1 days."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"
