"""Which version a user is served: a stable hash of the user id, the same on
every process and restart. Pure and free of the rollout's machinery, so the
gateway, which only assigns, imports nothing it does not run."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

__all__ = ["user_position", "version_at"]


def user_position(user_id: str) -> float:
    """Where a user falls in [0, 100): the same on every process and restart."""
    digest = hashlib.blake2b(user_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 * 100.0


def version_at(position: float, stable: str, candidates: Sequence[str], share: float) -> str:
    """The version of a user at ``position``: the n-th candidate on
    [n x share, (n + 1) x share), the stable beyond the last."""
    if share > 0 and position < share * len(candidates):
        return candidates[int(position // share)]
    return stable
