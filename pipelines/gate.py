"""The quality gate: an artifact whose served lists lose to a baseline on
the held-out split is built but not published, unless an operator
publishes it over the gate (recorded)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console

BASELINES = ("popularity", "item_knn", "ease", "ease_low_rank", "buy_again")  # as evaluated
GATED = ("ranked", "ranked_int8")
GATE_METRICS = ("recall@10", "ndcg@10")


class QualityGateError(Exception):
    """A new artifact that does not beat the baselines is not published."""

    def __init__(self, message: str, metrics: dict[str, dict[str, float]]) -> None:
        super().__init__(message)
        self.metrics = metrics


def quality_gate(metrics: dict[str, dict[str, float]]) -> list[str]:
    """What fails: the served lists against every baseline the evaluation ran."""
    failures = []
    for model in GATED:
        for key in GATE_METRICS:
            for baseline in BASELINES:
                if baseline in metrics and metrics[model][key] < metrics[baseline][key]:
                    failures.append(
                        f"{model} {key} {metrics[model][key]:.4f} < "
                        f"{baseline} {metrics[baseline][key]:.4f}"
                    )
    return failures


SOURCES = {"two_tower": "the two-tower's nearest neighbours", "item_neighbours": "item-to-item"}


def under_used(metrics: dict[str, dict[str, float]]) -> str:
    """Which candidate source, alone, ranks as well as the served list or
    better (the ranker under-used it), or how far each one is behind."""
    ranked = metrics["ranked"]["ndcg@10"]
    alone = {name: metrics[name]["ndcg@10"] for name in SOURCES if name in metrics}
    if not alone:
        return ""
    best = max(alone, key=lambda name: alone[name])
    figures = ", ".join(f"{SOURCES[n]} {v:.4f}" for n, v in alone.items())
    if alone[best] >= ranked:
        return f" (each source alone, ndcg@10: {figures}; the ranker under-used {SOURCES[best]})"
    return f" (each source alone, ndcg@10: {figures}; the served list {ranked:.4f})"


OVERRIDES = "OVERRIDES.jsonl"  # artifacts an operator published over a failing gate


def pass_the_gate(
    root: Path,
    version: str,
    metrics: dict[str, dict[str, float]],
    over_the_gate: bool,
    console: Console,
) -> None:
    """QualityGateError for an artifact that loses to a baseline, unless the
    operator publishes it over the gate: then one line of OVERRIDES.jsonl."""
    failures = quality_gate(metrics)
    if not failures:
        return
    if not over_the_gate:
        raise QualityGateError(
            f"artifact {version} is built but not published: "
            + "; ".join(failures)
            + under_used(metrics),
            metrics,
        )
    entry = {"version": version, "at": datetime.now(UTC).isoformat(), "failures": failures}
    with (root / OVERRIDES).open("a") as log:
        log.write(json.dumps(entry) + "\n")
    console.print(f"[yellow]published over the quality gate: {'; '.join(failures)}[/]")
