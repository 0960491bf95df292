"""Runs the gates on a staged run and writes its report, sample and plot."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

from pipelines import dataset
from pipelines.build import artifact_attributes, popular_lists
from pipelines.rescore import gates, layout
from pipelines.rescore.job import RunConfig


def movielens_split(
    data_dir: Path, dataset_dir: Path | None = None
) -> tuple[dict[str, set[str]], pd.DataFrame]:
    """The held-out (latest) interactions of the pipeline's temporal split,
    and everything before them (what EASE, the reference, learns from); of
    the demo dataset, or of ``dataset_dir``."""
    raw = data_dir / "raw"
    if not raw.exists() and dataset_dir is None:
        return {}, pd.DataFrame({"user_id": [], "item_id": []})
    split = dataset.temporal_split(dataset.load_movielens(raw, dataset_dir).interactions)
    truth = {str(u): set(map(str, g)) for u, g in split.test.groupby("user_id")["item_id"]}
    return truth, split.train.astype({"user_id": str, "item_id": str})


def baseline(data_dir: Path) -> tuple[str | None, np.ndarray | None, dict[str, float] | None]:
    """The live run's id, score sample and quality metrics, if one is published."""
    path = layout.pointer(data_dir)
    if not path.exists():
        return None, None, None
    run_id = layout.read_json(path)["run_id"]
    run_dir = layout.published_run(data_dir, run_id)
    report = layout.read_json(run_dir / "report.json")
    return run_id, np.load(run_dir / "score_sample.npy"), report["metrics"]


def plot(path: Path, current: np.ndarray, previous: np.ndarray | None, run_id: str) -> None:
    fig, ax = plt.subplots(figsize=(7, 3.5), dpi=110)
    finite = current[np.isfinite(current)]
    bins = np.linspace(*np.percentile(finite, [0.1, 99.9]), 80) if len(finite) else 10
    if previous is not None:
        ax.hist(
            previous[np.isfinite(previous)], bins=bins, alpha=0.5, density=True, label="published"
        )
    ax.hist(finite, bins=bins, alpha=0.5, density=True, label=f"run {run_id}")
    ax.set_xlabel("ranker score")
    ax.set_ylabel("density")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def table(report: gates.Report) -> Table:
    out = Table(
        title=f"gates for run {report.run_id} (baseline: {report.baseline_run_id or 'none'})"
    )
    for column in ("group", "gate", "value", "limit", "result"):
        out.add_column(column)
    for g in report.gates:
        value = "-" if g.value is None else f"{g.value:.4g}"
        result = "[green]pass[/]" if g.passed else "[bold red]FAIL[/]"
        out.add_row(
            g.group, g.name, value, g.limit + (f" ({g.detail})" if g.detail else ""), result
        )
    return out


def validate(
    data_dir: Path,
    run_dir: Path,
    thresholds: gates.Thresholds | None = None,
    console: Console | None = None,
) -> gates.Report:
    thresholds = thresholds or gates.Thresholds()
    config = RunConfig.load(run_dir / "run.json")
    features = Path(config.features_dir)
    users = pd.read_parquet(features / "user_profile.parquet", columns=["user_id"]).merge(
        pd.read_parquet(features / "user_activity.parquet", columns=["user_id", "seen_item_ids"]),
        on="user_id",
        how="left",
    )
    base_id, base_sample, base_metrics = baseline(data_dir)
    report = gates.Report(config.run_id, base_id)
    sample, counts = gates.score_sample(run_dir)
    report.score_stats = {
        **counts,
        "mean": float(np.nanmean(sample)) if len(sample) else float("nan"),
        "std": float(np.nanstd(sample)) if len(sample) else float("nan"),
    }
    report.gates += gates.statistical(sample, counts, base_sample, thresholds)
    report.gates += gates.invariants(run_dir, config, users)
    catalog = Path(config.artifact_dir) / "features"
    stats = pd.read_parquet(catalog / "item_stats.parquet").set_index("item_id")["popularity"]
    # The holdout of the dataset the artifact was built from (the demo's by default).
    built_from = dataset.artifact_dataset(Path(config.artifact_dir))
    truth, before_holdout = movielens_split(data_dir, built_from)
    holdout = gates.holdout_sample(truth, set(users["user_id"]))
    inactive = set(config.inactive_items)
    references = {
        "popularity": gates.popularity_lists(users, stats, holdout, config.top_n, inactive),
        "ease": gates.ease_lists(before_holdout, users, holdout, config.top_n, inactive),
    }
    quality_gates, report.metrics = gates.quality(
        run_dir, config, holdout, references, base_metrics, thresholds
    )
    report.gates += quality_gates
    np.save(run_dir / "score_sample.npy", sample)
    plot(run_dir / "scores.png", sample, base_sample, config.run_id)
    tables = {
        "item_profile": pd.read_parquet(catalog / "item_profile.parquet"),
        "item_stats": pd.read_parquet(catalog / "item_stats.parquet"),
    }
    attributes = artifact_attributes(Path(config.artifact_dir))
    indexed = pd.read_parquet(
        Path(config.artifact_dir) / "item_vectors.parquet", columns=["item_id", "active"]
    )
    never = inactive | set(indexed.loc[~indexed["active"].astype(bool), "item_id"])
    layout.write_json(run_dir / "popular.json", popular_lists(tables, attributes, frozenset(never)))
    layout.write_json(run_dir / "report.json", report.as_dict())
    if console is not None:
        console.print(table(report))
    return report
