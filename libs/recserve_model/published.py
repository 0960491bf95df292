"""The live nightly re-scoring run: ``<data_dir>/rescoring/PUBLISHED.json``.

Written by ``pipelines.rescore.publish`` (atomically, after the run's lists
are complete in their Feast slot); read by the features service (which slot
holds the precomputed lists) and the gateway (whose fallback lists to use).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def pointer_path(data_dir: Path) -> Path:
    return data_dir / "rescoring" / "PUBLISHED.json"


def run_dir(data_dir: Path, run_id: str) -> Path:
    return data_dir / "rescoring" / "runs" / run_id


def live_run(data_dir: Path) -> dict[str, Any] | None:
    """{run_id, slot, slots, history, published_at}, or None before any publish."""
    path = pointer_path(data_dir)
    if not path.exists():
        return None
    state: dict[str, Any] = json.loads(path.read_text())
    return state


def slot_view(slot: str) -> str:
    return f"user_recommendations_{slot}"
