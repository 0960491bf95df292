"""CURRENT, as the ranker follows it. Every way to change what users get
writes CURRENT (a first build, a build's --promote, a promoted rollout,
LoadModel), and the retriever, the features service and the gateways
follow it; outside a rollout the ranker does too (docs/delivery.md, "What
a build changes")."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from recserve_model import artifacts

RETRY_S = 30.0  # a CURRENT that failed to load is tried again after this


class CurrentPointer:
    def __init__(self, data_dir: Path, ranking_versions: Callable[[], dict[str, int]]) -> None:
        self.data_dir = data_dir
        self.ranking_versions = ranking_versions  # artifact -> Triton version
        self._retry_at = 0.0
        # (CURRENT, the pinned version) last found to need no switch.
        self._settled: tuple[str, str] | None = None

    def served_by(self, version: str, ranking: dict[str, int], current: str | None = None) -> bool:
        """Whether ``version`` serves what CURRENT (``current``, read here
        when not given) names (its files: a rehearsal copy links to them),
        as far as the ranker can follow: CURRENT's version must be in the
        Triton repository, and without CURRENT there is nothing to follow."""
        current = current or artifacts.current_version(self.data_dir)
        if current is None or current not in ranking:
            return True
        return artifacts.same_files(self.data_dir, version, current)

    def to_follow(self, pinned: str) -> str | None:
        """CURRENT's version when the ranker, pinned to ``pinned``, must
        switch to it; asked once a second, it reads one small file while
        nothing changes."""
        current = artifacts.current_version(self.data_dir)
        if current is None or (current, pinned) == self._settled:
            return None
        try:
            ranking = self.ranking_versions()
        except ValueError:  # being written
            return None
        if self.served_by(pinned, ranking, current):
            self._settled = (current, pinned)
            return None
        return current

    def may_try(self) -> bool:
        return time.monotonic() >= self._retry_at

    def failed(self) -> None:
        self._retry_at = time.monotonic() + RETRY_S
