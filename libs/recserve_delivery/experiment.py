"""An A/B experiment's report: each arm's lists and conversions over the
experiment's window, every candidate arm against the stable (difference,
its 95% interval, the two-sided p-value) and whether the sample planned up
front was reached. With several candidate arms the comparisons are
Bonferroni-corrected: each interval at 1 - 0.05 / arms, each p-value times
the arms (at most 1), so the chance that any of them shows a difference
that is not there stays 5%. Read from the gateways' logs under the data
directory, like the guardrail's figures."""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from recserve_delivery.outcomes import ArmOutcomes, Cell, Comparison, compare, required_lists
from recserve_delivery.state import RolloutState, arm_name
from recserve_model import artifacts
from recserve_model.catalogue import CatalogueSchema

CONFIDENCE = 0.95


@dataclass(frozen=True)
class ExperimentReport:
    stable: str
    candidate: str
    status: str
    share_percent: float  # of users on each candidate arm while it ran
    started_at: float
    ended_at: float  # or the report's time while it runs
    arms: dict[str, Cell]  # "stable", "candidate", "candidate-2", ...
    comparisons: dict[str, Comparison]  # each candidate arm against the stable
    required_lists: int | None  # each arm's planned sample, when one was given
    versions: dict[str, str]  # arm -> model version

    @property
    def comparison(self) -> Comparison:
        """The (first) candidate against the stable."""
        return self.comparisons["candidate"]

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
            "versions": self.versions,
            "arms": {
                arm: {"lists": c.lists, "converted": c.converted, "conversion": c.rate}
                for arm, c in self.arms.items()
            },
            "candidate_vs_stable": asdict(self.comparison),
            "comparisons": {arm: asdict(c) for arm, c in self.comparisons.items()},
            "correction": "bonferroni" if len(self.comparisons) > 1 else "none",
            "required_lists": self.required_lists,
            "sample_reached": self.reached,
        }


def corrected(stable: Cell, arm: Cell, arms: int) -> Comparison:
    """``arm`` against the stable, Bonferroni-corrected for ``arms`` comparisons."""
    result = compare(stable, arm, confidence=1 - (1 - CONFIDENCE) / arms)
    return dataclasses.replace(result, p_value=min(1.0, result.p_value * arms))


def experiment_report(
    data_dir: Path, state: RolloutState, now: float, baseline_rate: float = 0.0
) -> ExperimentReport:
    """The report of ``state``'s experiment (or rollout) so far. The planned
    sample is the guardrail's (alpha split among the arms), else one from
    ``baseline_rate`` (a 2% relative difference, alpha 0.05 split among the
    arms, power 0.8)."""
    if not state.candidate or not state.started_at:
        raise ValueError("no experiment or rollout has started here")
    schema = CatalogueSchema.load(artifacts.artifacts_root(data_dir) / state.stable)
    ended = state.ended_at or now
    versions = state.arms()
    cells = ArmOutcomes(data_dir, schema, versions, state.started_at, ended).update()
    arms = len(state.candidates)
    guardrail = state.arm_guardrail()
    if guardrail is not None:
        need: int | None = guardrail.required_lists
    elif baseline_rate:
        need = required_lists(baseline_rate, 0.02, 0.05 / arms, 0.8)
    else:
        need = None
    names = [arm_name(n) for n in range(arms)]
    return ExperimentReport(
        stable=state.stable,
        candidate=state.candidate,
        status=state.status,
        share_percent=state.steps_percent[state.step],
        started_at=state.started_at,
        ended_at=ended,
        arms=cells,
        comparisons={n: corrected(cells["stable"], cells[n], arms) for n in names},
        required_lists=need,
        versions={arm: version for version, arm in versions.items()},
    )
