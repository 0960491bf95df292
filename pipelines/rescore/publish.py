"""Atomic publish of a validated run, one-command rollback, and the reader.

A publish moves the run from staging to ``runs/``, writes its top-N lists in
full into the idle Feast slot (``user_recommendations_a`` or ``_b``), and only
then replaces ``PUBLISHED.json``, which names the live run and its slot. A
reader resolves the pointer first and checks each row's ``run_id`` against it,
so it sees one run, never a mix. Rollback points back at the previous run,
rewriting the idle slot from that run's files if it no longer holds it.
"""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
from feast import FeatureStore

from pipelines.rescore import layout
from recserve_feast.repo import (
    RECOMMENDATION_SLOTS,
    recommendation_view,
    repo_config,
    user,
)
from recserve_model import published

HISTORY = 10


class PublishError(RuntimeError):
    pass


def feature_store(data_dir: Path, redis_url: str = "") -> FeatureStore:
    # Absolute: Feast resolves a relative SQLite path against its repo path.
    feast_dir = data_dir.resolve() / "feast"
    feast_dir.mkdir(parents=True, exist_ok=True)
    return FeatureStore(config=repo_config(feast_dir, redis_url))


def live(data_dir: Path) -> dict[str, Any] | None:
    return published.live_run(data_dir)


def _top_n(run_dir: Path, run_id: str) -> pd.DataFrame:
    frames = [
        pd.read_parquet(p) for p in sorted((run_dir / "top_n").glob("bucket=*/part-0.parquet"))
    ]
    frame = pd.concat(frames, ignore_index=True)
    frame["run_id"] = run_id
    frame["event_timestamp"] = pd.Timestamp.now(tz="UTC")
    return frame


def _write_slot(data_dir: Path, store: FeatureStore, slot: str, run_id: str) -> None:
    slots_dir = layout.root(data_dir) / "slots"
    slots_dir.mkdir(parents=True, exist_ok=True)
    frame = _top_n(layout.published_run(data_dir, run_id), run_id)
    store.apply([user, *(recommendation_view(s, slots_dir) for s in RECOMMENDATION_SLOTS)])
    tmp = slots_dir / f".{slot}.parquet.tmp"
    frame.to_parquet(tmp, index=False)
    os.replace(tmp, slots_dir / f"{slot}.parquet")  # the slot's offline copy
    store.write_to_online_store(published.slot_view(slot), frame)


def _flip(
    data_dir: Path, run_id: str, slot: str, previous: dict[str, Any] | None, history: list[str]
) -> dict[str, Any]:
    slots = dict(previous["slots"]) if previous else {}
    slots[slot] = run_id
    state = {
        "run_id": run_id,
        "slot": slot,
        "slots": slots,
        "history": history[:HISTORY],
        "published_at": datetime.now(UTC).isoformat(),
    }
    layout.write_json(layout.pointer(data_dir), state)
    return state


def _idle_slot(current: dict[str, Any] | None) -> str:
    if current is None:
        return RECOMMENDATION_SLOTS[0]
    return next(s for s in RECOMMENDATION_SLOTS if s != current["slot"])


def publish(data_dir: Path, run_id: str, redis_url: str = "") -> dict[str, Any]:
    staged = layout.staging(data_dir, run_id)
    target = layout.published_run(data_dir, run_id)
    if staged.exists():
        report_path = staged / "report.json"
        if not report_path.exists():
            raise PublishError(f"run {run_id} has not been validated; run the gates first")
        report = layout.read_json(report_path)
        if not report["passed"]:
            raise PublishError(f"run {run_id} failed gates: {', '.join(report['failed'])}")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(target, ignore_errors=True)
        staged.rename(target)
    elif not target.exists():
        raise PublishError(f"no staged or published run {run_id}")
    current = live(data_dir)
    if current and current["run_id"] == run_id:
        return current
    slot = _idle_slot(current)
    _write_slot(data_dir, feature_store(data_dir, redis_url), slot, run_id)
    history = [run_id] + ([h for h in current["history"] if h != run_id] if current else [])
    return _flip(data_dir, run_id, slot, current, history)


def rollback(data_dir: Path, redis_url: str = "") -> dict[str, Any]:
    current = live(data_dir)
    if current is None or len(current["history"]) < 2:
        raise PublishError("nothing to roll back to: fewer than two published runs")
    target = current["history"][1]
    slot = _idle_slot(current)
    if current["slots"].get(slot) != target:
        _write_slot(data_dir, feature_store(data_dir, redis_url), slot, target)
    return _flip(data_dir, target, slot, current, current["history"][1:])


def read_recommendations(
    data_dir: Path, store: FeatureStore, user_ids: list[str]
) -> tuple[str | None, dict[str, tuple[list[str], list[float]]]]:
    """The live run's lists for these users; users absent from it are left out."""
    for _ in range(3):
        state = live(data_dir)
        if state is None:
            return None, {}
        view = published.slot_view(state["slot"])
        rows = store.get_online_features(
            features=[f"{view}:item_ids", f"{view}:scores", f"{view}:run_id"],
            entity_rows=[{"user_id": u} for u in user_ids],
        ).to_dict()
        runs = {r for r in rows["run_id"] if r is not None}
        if runs <= {state["run_id"]}:
            return state["run_id"], {
                u: (list(items), list(scores))
                for u, items, scores, run in zip(
                    user_ids, rows["item_ids"], rows["scores"], rows["run_id"], strict=True
                )
                if run is not None
            }
        # The slot is being rewritten for a newer run: resolve the pointer again.
    raise PublishError("the published run changed during every read attempt")
