"""An A/B experiment's report: the two arms' lists and conversions over the
experiment's window, the candidate against the stable (difference, its 95%
interval, the two-sided p-value) and whether the sample planned up front was
reached. Read from the gateways' logs under the data directory, like the
guardrail's figures."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from recserve_delivery.outcomes import ArmOutcomes, Cell, Comparison, compare, required_lists
from recserve_delivery.state import RolloutState
from recserve_model import artifacts
from recserve_model.catalogue import CatalogueSchema


@dataclass(frozen=True)
class ExperimentReport:
    stable: str
    candidate: str
    status: str
    share_percent: float  # of users on the candidate while it ran
    started_at: float
    ended_at: float  # or the report's time while it runs
    arms: dict[str, Cell]
    comparison: Comparison
    required_lists: int | None  # each arm's planned sample, when one was given

    @property
    def reached(self) -> bool | None:
        if self.required_lists is None:
            return None
        return min(c.lists for c in self.arms.values()) >= self.required_lists

    def as_dict(self) -> dict[str, Any]:
        return {
            "stable": self.stable,
            "candidate": self.candidate,
            "status": self.status,
            "share_percent": self.share_percent,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "arms": {
                arm: {"lists": c.lists, "converted": c.converted, "conversion": c.rate}
                for arm, c in self.arms.items()
            },
            "candidate_vs_stable": asdict(self.comparison),
            "required_lists": self.required_lists,
            "sample_reached": self.reached,
        }


def experiment_report(
    data_dir: Path, state: RolloutState, now: float, baseline_rate: float = 0.0
) -> ExperimentReport:
    """The report of ``state``'s experiment (or rollout) so far. The planned
    sample is the guardrail's, else one from ``baseline_rate`` (a 2% relative
    difference, alpha 0.05, power 0.8)."""
    if not state.candidate or not state.started_at:
        raise ValueError("no experiment or rollout has started here")
    schema = CatalogueSchema.load(artifacts.artifacts_root(data_dir) / state.stable)
    ended = state.ended_at or now
    cells = ArmOutcomes(
        data_dir,
        schema,
        {state.stable: "stable", state.candidate: "candidate"},
        state.started_at,
        ended,
    ).update()
    if state.guardrail is not None:
        need: int | None = state.guardrail.required_lists
    elif baseline_rate:
        need = required_lists(baseline_rate, 0.02, 0.05, 0.8)
    else:
        need = None
    return ExperimentReport(
        stable=state.stable,
        candidate=state.candidate,
        status=state.status,
        share_percent=state.steps_percent[state.step],
        started_at=state.started_at,
        ended_at=ended,
        arms=cells,
        comparison=compare(cells["stable"], cells["candidate"]),
        required_lists=need,
    )
