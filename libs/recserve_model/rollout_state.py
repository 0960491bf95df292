"""The ranker's model rollout, persisted: ``<data_dir>/rollout/ranker.json``.

Written by the ranker (every step, decision and operator action, atomically)
and read back when it restarts, so a rollout survives one; read by the Triton
repository's publisher, which never deletes a version a rollout uses.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

Status = Literal["idle", "running", "paused", "promoted", "rolled_back", "aborted"]
ACTIVE: frozenset[str] = frozenset({"running", "paused"})
HISTORY = 50  # decisions kept in the file (all of them go to the log)


class Triggers(BaseModel):
    """Roll back when the candidate crosses any of these (the seeds' defaults)."""

    max_p99_ms: float = Field(150.0, gt=0)
    max_error_rate: float = Field(0.005, ge=0, le=1)
    max_memory_fraction: float = Field(0.85, gt=0, le=1)


class Decision(BaseModel):
    at: float  # unix seconds
    action: str  # start, promote, hold, rollback, pause, resume, abort, resume-after-restart
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
    step_started_at: float = 0.0
    reason: str = ""
    history: list[Decision] = Field(default_factory=list)

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    @property
    def share_percent(self) -> float:
        """Users on the candidate now (0 unless running or paused)."""
        return self.steps_percent[self.step] if self.active else 0.0

    def record(self, decision: Decision) -> None:
        self.history = [*self.history, decision][-HISTORY:]


class RolloutStateError(RuntimeError):
    pass


def path(data_dir: Path) -> Path:
    return data_dir / "rollout" / "ranker.json"


def load(data_dir: Path) -> RolloutState | None:
    """The persisted state, None if there is none; a damaged file is an error
    (silently starting over could serve a version an operator rolled back)."""
    file = path(data_dir)
    if not file.exists():
        return None
    try:
        return RolloutState.model_validate_json(file.read_text())
    except ValidationError as exc:
        raise RolloutStateError(f"{file}: unreadable rollout state: {exc}") from None


def save(data_dir: Path, state: RolloutState) -> None:
    file = path(data_dir)
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.with_suffix(".tmp")
    tmp.write_text(state.model_dump_json(indent=2))
    os.replace(tmp, file)


def protected_versions(data_dir: Path) -> set[str]:
    """Artifact versions the ranker serves or may switch to: never deleted."""
    try:
        state = load(data_dir)
    except RolloutStateError:
        return set()
    if state is None:
        return set()
    return {v for v in (state.stable, state.candidate if state.active else "") if v}
