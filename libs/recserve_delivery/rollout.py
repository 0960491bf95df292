"""Progressive delivery of a model version through the ranker.

A rollout moves users from the stable version to a candidate in steps (5%,
25%, 50%, 100% by default), each held for a soak time. Which users: a stable
hash of the user id, so a user stays on one version and, as the share grows,
only ever moves from stable to candidate. The judge looks at the candidate's
figures since its step began (ranking latency, Triton errors and non-finite
scores, Triton's memory) once a second and promotes, holds or rolls back;
every transition is persisted (recserve_delivery.state), logged with
its figures and counted in metrics.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

from recserve_delivery import sequential
from recserve_delivery import state as rollout_state
from recserve_delivery.assignment import user_position, version_at
from recserve_delivery.outcomes import ArmOutcomes
from recserve_delivery.plan import Plan
from recserve_delivery.state import Figures, RolloutState, Verdict, judge
from recserve_delivery.windows import RolloutMetrics, VersionWindow
from recserve_kit.errors import FailedPrecondition, InvalidArgument
from recserve_model import artifacts
from recserve_model.catalogue import FILE as CATALOGUE_FILE
from recserve_model.catalogue import CatalogueSchema

log = logging.getLogger(__name__)

HOLD_LOG_S = 10.0
TRAFFIC_WINDOW_S = 300.0  # the stable's recent lists: the guardrail's forecast at a start
STATUSES: tuple[str, ...] = get_args(rollout_state.Status)


class Rollout:
    """The state machine; the ranker applies what it decides (version pins)."""

    def __init__(
        self,
        data_dir: Path,
        stable: str,
        clock: Callable[[], float] = time.time,
        name: str = "ranker",
        metrics_prefix: str = "recserve_ranker",
    ) -> None:
        self.data_dir = data_dir
        self.metrics = RolloutMetrics.named(metrics_prefix)
        self.clock = clock
        self.name = name  # the state file: <data_dir>/rollout/<name>.json
        # False on a replica that follows another's rollout (recserve_delivery.replicas).
        self.writer = True
        # Called with the candidate as a promotion past the last step is
        # decided, before the state that says so is saved (the ranker makes
        # it the current artifact there: services/ranker/versions.py).
        self.before_promoted: Callable[[str], None] | None = None
        self._followed: tuple[int, int, int] | None = None  # the state file a follower read
        self.state = rollout_state.load(data_dir, name) or RolloutState(stable=stable)
        self.windows: dict[str, VersionWindow] = {}
        self.last: Verdict | None = None
        self._last_hold_log = 0.0
        self._arms: ArmOutcomes | None = None  # the guardrail's, made at its first look
        self._export()

    # -- routing ---------------------------------------------------------------

    def version_for(self, user_id: str) -> str:
        s = self.state
        if not s.active:
            return s.stable
        return version_at(user_position(user_id), s.stable, s.candidates, s.share_percent)

    def shadow_wanted(self) -> bool:
        s = self.state
        return s.active and random.random() * 100 < s.shadow_percent

    def completed(self, version: str, seconds: float) -> None:
        self.windows.setdefault(version, VersionWindow()).completed(seconds)
        self.metrics.version_seconds.labels(version).observe(seconds)

    def failed(self, version: str, kind: str, counted: bool = False) -> None:
        self.windows.setdefault(version, VersionWindow()).failed(counted)
        self.metrics.version_errors.labels(version, kind).inc()

    # -- transitions -------------------------------------------------------------

    def start(self, plan: Plan) -> None:
        plan.check()
        if self.state.active:
            raise FailedPrecondition(
                f"a rollout of {self.state.candidate} is {self.state.status}; abort it first"
            )
        if plan.candidate == self.state.stable:
            raise InvalidArgument("version", f"{plan.candidate} is already the stable version")
        if self.state.stable in plan.more_candidates:
            raise InvalidArgument("more_versions", f"{self.state.stable} is the stable version")
        lists_per_s, decision_s = self._forecast(plan)
        self.state = RolloutState(
            stable=self.state.stable,
            candidate=plan.candidate,
            status="running",
            steps_percent=plan.steps_percent,
            soak_s=plan.soak_s,
            min_requests=plan.min_requests,
            shadow_percent=plan.shadow_percent,
            triggers=plan.triggers,
            guardrail=plan.guardrail,
            started_at=self.clock(),
            experiment_until=self.clock() + plan.experiment_s if plan.experiment_s else 0.0,
            history=self.state.history,
            more_candidates=list(plan.more_candidates),
            measured_lists_per_s=lists_per_s,
            guardrail_decision_by=self.clock() + decision_s if decision_s else 0.0,
        )
        self._arms = None
        self._new_step()
        what = f"experiment of {plan.experiment_s:g} s" if plan.experiment_s else "candidate"
        arms = ", ".join(self.state.candidates)
        each = " each" if plan.more_candidates else ""
        expected = ""
        if plan.guardrail is not None:
            expected = (
                f"; the guardrail's decision in about {rollout_state.duration(decision_s)} "
                f"at the {lists_per_s:.3g} lists a second measured"
                if decision_s
                else "; no traffic measured: the guardrail's time to a decision is unknown"
            )
        self._decide("start", f"{what} {arms} at {plan.steps_percent[0]:g}%{each}{expected}")

    def _forecast(self, plan: Plan) -> tuple[float, float]:
        """The lists a second the stable served over the last TRAFFIC_WINDOW_S
        and the seconds the guardrail would take to decide at that rate (0, 0:
        no guardrail or no traffic); refuses a plan beyond its bound."""
        g = plan.guardrail
        directory = artifacts.artifacts_root(self.data_dir) / self.state.stable
        if g is None or not (directory / CATALOGUE_FILE).exists():
            return 0.0, 0.0
        now = self.clock()
        versions = {self.state.stable: "stable"}
        window = ArmOutcomes(
            self.data_dir, CatalogueSchema.load(directory), versions, now - TRAFFIC_WINDOW_S, now
        )
        lists_per_s = window.update()["stable"].lists / TRAFFIC_WINDOW_S
        if not lists_per_s:
            return 0.0, 0.0
        arms = 1 + len(plan.more_candidates)
        share = plan.steps_percent[0] / 100
        alpha = g.split_among(arms).alpha
        need = sequential.lists_to_decide(g.baseline_rate, g.min_detectable_drop, alpha, share)
        decision_s = need / lists_per_s
        if decision_s > g.max_decision_s:
            smallest = sequential.smallest_drop(
                g.baseline_rate, alpha, share, lists_per_s, g.max_decision_s
            )
            instead = (
                f"a minimum drop of {smallest:.1%} decides within it"
                if math.isfinite(smallest)
                else "no minimum drop decides within it: a larger first step might"
            )
            raise InvalidArgument(
                "guardrail_min_drop",
                f"at the {lists_per_s:.3g} lists a second the stable served over the last "
                f"{TRAFFIC_WINDOW_S / 60:.0f} min, the guardrail would take about "
                f"{rollout_state.duration(decision_s)} to decide a "
                f"{g.min_detectable_drop:.1%} drop with {share:.0%} of users on the candidate, "
                f"beyond its bound of {rollout_state.duration(g.max_decision_s)}; {instead}",
            )
        return lists_per_s, decision_s

    def resumed_after_restart(self) -> None:
        """Resume at the persisted step: its soak and figures start over."""
        self._new_step()
        self._decide("resume-after-restart", f"step {self.state.step + 1} starts over")

    def rebase(self, stable: str, reason: str) -> None:
        """Start over from ``stable`` (any rollout in progress ends)."""
        self.state = RolloutState(stable=stable, history=self.state.history)
        self._decide("reset", f"stable is {stable}: {reason}")

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
            share = s.share_percent  # the last step's: 100%
            if self.writer and self.before_promoted is not None:
                self.before_promoted(s.candidate)
            s.status = "promoted"
            s.stable, s.reason, s.ended_at = s.candidate, reason, self.clock()
            self._decide("promote", f"{s.candidate} is stable: {reason}", figures, share)

    def rollback(self, reason: str, figures: dict[str, float] | None = None) -> None:
        self._end("rolled_back", "rollback", reason, figures)

    def conclude(self, reason: str, figures: dict[str, float] | None = None) -> None:
        """An experiment's end: every user back on the stable; the candidate
        stays named, and the window is the report's."""
        self._end("concluded", "conclude", reason, figures)

    def abort(self) -> None:
        self._end("aborted", "abort", "by the operator")

    def _end(
        self,
        status: rollout_state.Status,
        action: str,
        reason: str,
        figures: dict[str, float] | None = None,
    ) -> None:
        """Every user back on the stable; recorded at the share it ended at."""
        self._require("running", "paused")
        share = self.state.share_percent
        self.state.status = status
        self.state.reason = reason
        self.state.ended_at = self.clock()
        self._decide(action, reason, figures, share)

    def tick(
        self,
        memory_fraction: float | None,
        figures: Figures | None = None,
        others: dict[str, list[dict[str, Any]]] | None = None,
    ) -> Verdict | None:
        """The judge's look on the candidate's figures (this process's own
        unless given, plus ``others``: the following replicas' windows), each
        arm's in an experiment of several: any arm's rollback ends it;
        applies a promotion or a rollback."""
        s = self.state
        if not s.active:
            return None
        verdicts = []
        for n, version in enumerate(s.candidates):
            mine = figures if figures is not None and n == 0 else None
            window = self.windows.setdefault(version, VersionWindow())
            mine = mine or window.plus((others or {}).get(version, [])).figures()
            if s.guardrail is not None and mine.arms is None:
                mine = dataclasses.replace(mine, arms=self._arm_outcomes().update())
            verdict = judge(s, mine, memory_fraction, self.clock(), rollout_state.arm_name(n))
            if len(s.candidates) > 1 and verdict.action == "rollback":
                verdict = dataclasses.replace(verdict, reason=f"{version}: {verdict.reason}")
            verdicts.append(verdict)
        verdict = next((v for v in verdicts if v.action == "rollback"), verdicts[0])
        self.last = verdict
        for name, value in verdict.figures.items():
            self.metrics.candidate.labels(name).set(value)
        if verdict.action == "rollback":
            self.rollback(verdict.reason, verdict.figures)
        elif verdict.action == "promote":
            self.promote(verdict.reason, verdict.figures)
        elif verdict.action == "conclude":
            self.conclude(verdict.reason, verdict.figures)
        else:
            self.metrics.decisions.labels("hold").inc()
            now = self.clock()
            if now - self._last_hold_log >= HOLD_LOG_S:
                self._last_hold_log = now
                log.info(
                    "rollout holds",
                    extra={"fields": {"reason": verdict.reason, **verdict.figures}},
                )
        return verdict

    # -- internals ---------------------------------------------------------------

    def _arm_outcomes(self) -> ArmOutcomes:
        """Lists and conversions per arm since the rollout started, from the
        gateways' impression and event logs under the data directory."""
        if self._arms is None:
            s = self.state
            directory = artifacts.artifacts_root(self.data_dir) / s.stable
            self._arms = ArmOutcomes(
                self.data_dir, CatalogueSchema.load(directory), s.arms(), s.started_at
            )
        return self._arms

    def _require(self, *statuses: str) -> None:
        if self.state.status not in statuses:
            raise FailedPrecondition(
                f"the rollout is {self.state.status}; this needs it {' or '.join(statuses)}"
            )

    def _new_step(self) -> None:
        self.state.step_started_at = self.clock()
        self.windows = {}
        self.last = None

    def _decide(
        self,
        action: str,
        reason: str,
        figures: dict[str, float] | None = None,
        share: float | None = None,
    ) -> None:
        """Records a transition; ``share``: the share it was taken at, when the
        transition ended the rollout (the state's is then 0)."""
        s = self.state
        decision = rollout_state.Decision(
            at=self.clock(),
            action=action,
            reason=reason,
            share_percent=s.share_percent if share is None else share,
            figures=figures or {},
        )
        s.record(decision)
        self._save()
        self.metrics.decisions.labels(action).inc()
        log.info(
            "rollout %s",
            action,
            extra={
                "fields": {
                    "reason": reason,
                    "stable": s.stable,
                    "candidate": s.candidate,
                    "share_percent": decision.share_percent,
                    **(figures or {}),
                }
            },
        )

    def follow(self) -> bool:
        """A follower's look: the writer's saved state, when it changed (a
        new step: this replica's figures start over). True if it changed."""
        try:  # a save is a new file (os.replace): unchanged, nothing to parse
            stat = rollout_state.path(self.data_dir, self.name).stat()
        except FileNotFoundError:
            return False
        seen, self._followed = self._followed, (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        if seen == self._followed:
            return False
        saved = rollout_state.load(self.data_dir, self.name)
        if saved is None or saved == self.state:
            return False
        if saved.step_started_at != self.state.step_started_at or not saved.active:
            self.windows, self.last, self._arms = {}, None, None
        self.state = saved
        self._export()
        return True

    def _save(self) -> None:
        if self.writer:  # a follower's state is the writer's, read back (follow)
            rollout_state.save(self.data_dir, self.state, self.name)
        self._export()

    def _export(self) -> None:
        self.metrics.share.set(self.state.share_percent)
        for status in STATUSES:
            self.metrics.status.labels(status).set(1 if status == self.state.status else 0)
