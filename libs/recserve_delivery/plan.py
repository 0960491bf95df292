"""What an operator asks a rollout for: its candidates, steps and limits."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from recserve_delivery.state import Guardrail, Triggers
from recserve_kit.errors import InvalidArgument


@dataclass(frozen=True)
class Plan:
    candidate: str
    steps_percent: list[float]
    soak_s: float
    min_requests: int
    shadow_percent: float
    triggers: Triggers
    guardrail: Guardrail | None = None
    experiment_s: float = 0.0  # > 0: an A/B experiment of this long at one split
    more_candidates: tuple[str, ...] = ()  # an experiment's further arms

    def check(self) -> None:
        steps = self.steps_percent
        if not steps or any(not 0 < s <= 100 for s in steps):
            raise InvalidArgument("steps_percent", "each step must be in (0, 100]")
        if self.experiment_s < 0:
            raise InvalidArgument("experiment_s", "must be 0 (a rollout) or more")
        arms = [self.candidate, *self.more_candidates]
        if self.more_candidates and not self.experiment_s:
            raise InvalidArgument("more_versions", "only an experiment has several candidates")
        if len(set(arms)) != len(arms) or not all(arms):
            raise InvalidArgument("more_versions", "each arm's version must be given once")
        if self.experiment_s:
            if len(steps) != 1 or steps[0] * len(arms) >= 100:
                times = f" (times its {len(arms)} candidate arms)" if len(arms) > 1 else ""
                raise InvalidArgument(
                    "steps_percent", f"an experiment holds one split: one share{times} below 100"
                )
        elif any(b <= a for a, b in itertools.pairwise(steps)) or steps[-1] != 100:
            raise InvalidArgument("steps_percent", "must increase and end at 100")
        if not 0 <= self.shadow_percent <= 100:
            raise InvalidArgument("shadow_percent", "must be in [0, 100]")
