"""Validation gates a run must pass before it is published.

Statistical: the score distribution against the last published run (the
Kolmogorov-Smirnov statistic, mean shift in units of the old standard
deviation, variance ratio) and NaN and out-of-range rates. Invariants: every
user has N results, no duplicates, nothing the user has seen, nothing
inactive. Quality: recall@N and NDCG@10 on a fixed-seed holdout sample at
least as good as the last published run (within a tolerance) and better than
popularity. Outputs are read bucket by bucket, so memory stays bounded.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.compute as pc
import pyarrow.parquet as pq
from scipy import sparse
from scipy.stats import ks_2samp

from pipelines.rescore.job import RunConfig

SAMPLE_SIZE = 200_000
SAMPLE_SEED = 7
HOLDOUT_USERS = 500


@dataclass(frozen=True)
class Thresholds:
    max_nan_rate: float = 0.0
    score_range: tuple[float, float] = (-100.0, 100.0)
    max_out_of_range_rate: float = 0.0
    max_ks: float = 0.1
    max_mean_shift_sd: float = 0.25
    variance_ratio: tuple[float, float] = (0.5, 2.0)
    quality_tolerance: float = 0.02  # relative loss allowed against the last published run


@dataclass
class Gate:
    name: str
    group: str
    value: float | None
    limit: str
    passed: bool
    detail: str = ""


@dataclass
class Report:
    run_id: str
    baseline_run_id: str | None
    gates: list[Gate] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    score_stats: dict[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(g.passed for g in self.gates)

    @property
    def failed(self) -> list[str]:
        return [g.name for g in self.gates if not g.passed]

    def as_dict(self) -> dict[str, object]:
        return {
            "run_id": self.run_id,
            "baseline_run_id": self.baseline_run_id,
            "passed": self.passed,
            "failed": self.failed,
            "gates": [asdict(g) for g in self.gates],
            "metrics": self.metrics,
            "score_stats": self.score_stats,
        }


def bucket_tables(run_dir: Path, dataset: str) -> Iterator[pd.DataFrame]:
    for path in sorted((run_dir / dataset).glob("bucket=*/part-0.parquet")):
        yield pq.read_table(path).to_pandas()


def score_sample(run_dir: Path) -> tuple[np.ndarray, dict[str, float]]:
    """A fixed-seed sample of all candidate scores, and exact summary counts."""
    rng = np.random.default_rng(SAMPLE_SEED)
    parts, total, nans, inf = [], 0, 0, 0
    for path in sorted((run_dir / "scores").glob("bucket=*/part-0.parquet")):
        column = pq.read_table(path, columns=["scores"]).column("scores")
        values = pc.list_flatten(column).to_numpy(zero_copy_only=False).astype(np.float64)
        total += len(values)
        nans += int(np.isnan(values).sum())
        inf += int(np.isinf(values).sum())
        parts.append(values)
    values = np.concatenate(parts) if parts else np.empty(0)
    sample = (
        values if len(values) <= SAMPLE_SIZE else rng.choice(values, SAMPLE_SIZE, replace=False)
    )
    return sample, {"pairs": total, "nan": nans, "inf": inf}


def statistical(
    sample: np.ndarray, counts: dict[str, float], baseline: np.ndarray | None, t: Thresholds
) -> list[Gate]:
    total = max(int(counts["pairs"]), 1)
    nan_rate = counts["nan"] / total
    finite = sample[np.isfinite(sample)]
    lo, hi = t.score_range
    outside = float(((sample < lo) | (sample > hi)).sum() + np.isinf(sample).sum()) / max(
        len(sample), 1
    )
    gates = [
        Gate(
            "nan_rate", "statistical", nan_rate, f"<= {t.max_nan_rate}", nan_rate <= t.max_nan_rate
        ),
        Gate(
            "out_of_range_rate",
            "statistical",
            outside,
            f"<= {t.max_out_of_range_rate} outside [{lo}, {hi}]",
            outside <= t.max_out_of_range_rate,
        ),
    ]
    if baseline is None or len(baseline) == 0:
        detail = "no published run to compare with"
        for name in ("ks_statistic", "mean_shift_sd", "variance_ratio"):
            gates.append(Gate(name, "statistical", None, "-", True, detail))
        return gates
    base = baseline[np.isfinite(baseline)]
    if len(finite) == 0:
        for name in ("ks_statistic", "mean_shift_sd", "variance_ratio"):
            gates.append(Gate(name, "statistical", None, "-", False, "no finite scores"))
        return gates
    ks = float(ks_2samp(finite, base).statistic)
    sd = float(base.std()) or 1.0
    shift = abs(float(finite.mean()) - float(base.mean())) / sd
    ratio = float(finite.var()) / max(float(base.var()), 1e-12)
    low, high = t.variance_ratio
    gates += [
        Gate("ks_statistic", "statistical", ks, f"<= {t.max_ks}", ks <= t.max_ks),
        Gate(
            "mean_shift_sd",
            "statistical",
            shift,
            f"<= {t.max_mean_shift_sd}",
            shift <= t.max_mean_shift_sd,
        ),
        Gate("variance_ratio", "statistical", ratio, f"in [{low}, {high}]", low <= ratio <= high),
    ]
    return gates


def invariants(run_dir: Path, config: RunConfig, users: pd.DataFrame) -> list[Gate]:
    """Checked on every user's top-N list; ``users`` gives each user's seen items."""
    seen = users.set_index("user_id")["seen_item_ids"]
    inactive = set(config.inactive_items)
    n_users = short = duplicates = seen_hits = inactive_hits = 0
    for top in bucket_tables(run_dir, "top_n"):
        n_users += len(top)
        lengths = top["item_ids"].map(len)
        short += int((lengths != config.top_n).sum())
        pairs = top[["user_id", "item_ids"]].explode("item_ids")
        duplicates += int(pairs.duplicated().sum())
        blocked = seen.reindex(top["user_id"]).map(
            lambda s: set(s) if isinstance(s, (list, np.ndarray)) else set()
        )
        for items, blocked_items in zip(top["item_ids"], blocked, strict=True):
            seen_hits += len(blocked_items.intersection(items))
            inactive_hits += len(inactive.intersection(items))
    expected = len(users)
    return [
        Gate(
            "users_covered",
            "invariants",
            n_users,
            f"== {expected}",
            n_users == expected,
        ),
        Gate("lists_of_n", "invariants", short, f"0 lists shorter than {config.top_n}", short == 0),
        Gate("duplicates", "invariants", duplicates, "== 0", duplicates == 0),
        Gate("seen_items", "invariants", seen_hits, "== 0", seen_hits == 0),
        Gate("inactive_items", "invariants", inactive_hits, "== 0", inactive_hits == 0),
    ]


def ranking_metrics(
    ranked: dict[str, list[str]], truth: dict[str, set[str]], n: int
) -> dict[str, float]:
    recall, ndcg = [], []
    discounts = 1 / np.log2(np.arange(2, 12))
    for user, items in truth.items():
        hits = np.isin(ranked.get(user, [])[:n], list(items))
        recall.append(hits.sum() / len(items))
        ideal = discounts[: min(10, len(items))].sum()
        ndcg.append(float((hits[:10] * discounts[: len(hits[:10])]).sum() / ideal))
    return {f"recall@{n}": float(np.mean(recall)), "ndcg@10": float(np.mean(ndcg))}


def holdout_sample(truth: dict[str, set[str]], run_users: set[str]) -> dict[str, set[str]]:
    users = sorted(u for u in truth if u in run_users)
    rng = np.random.default_rng(SAMPLE_SEED)
    chosen = rng.choice(users, min(HOLDOUT_USERS, len(users)), replace=False) if users else []
    return {u: truth[u] for u in sorted(chosen)}


def popularity_lists(
    users: pd.DataFrame,
    popularity: pd.Series,
    holdout: dict[str, set[str]],
    n: int,
    inactive: set[str],
) -> dict[str, list[str]]:
    order = [
        i for i in popularity.sort_values(ascending=False, kind="stable").index if i not in inactive
    ]
    seen = users.set_index("user_id")["seen_item_ids"]
    out = {}
    for user in holdout:
        blocked = set(seen.get(user, []))
        out[user] = [i for i in order if i not in blocked][:n]
    return out


def ease_lists(
    interactions: pd.DataFrame,
    users: pd.DataFrame,
    holdout: dict[str, set[str]],
    n: int,
    inactive: set[str],
) -> dict[str, list[str]]:
    """EASE's top ``n`` for each holdout user from their seen items, the
    strongest classic baseline (pipelines/baselines.py). Past the dense
    forms' budget (``sparse_baselines.dense_ok``), low-rank EASE in its place, as the build's gate
    (pipelines/sparse_baselines.py): nothing items x items."""
    from pipelines import sparse_baselines
    from pipelines.baselines import EASE_LAMBDA, ease

    if not holdout or interactions.empty:
        return {}
    items = sorted(set(interactions["item_id"]))
    column = {item: j for j, item in enumerate(items)}
    by_user = interactions.groupby("user_id")["item_id"].agg(list)
    rows = np.repeat(np.arange(len(by_user)), by_user.map(len).to_numpy())
    columns = np.fromiter((column[i] for seen in by_user for i in seen), np.int64, len(rows))
    matrix = sparse.csr_matrix(
        (np.ones(len(rows), np.float32), (rows, columns)), shape=(len(by_user), len(items))
    )
    matrix.data[:] = 1.0  # a repeated (user, item) pair is one interaction
    if sparse_baselines.dense_ok(len(by_user), len(items)):
        history_side, item_side = ease(matrix.toarray()), None
    else:
        history_side, item_side = sparse_baselines.low_rank_ease(
            matrix, sparse_baselines.BASELINE_RANK, EASE_LAMBDA
        )
    blocked = np.array([item in inactive for item in items])
    seen_lists = users.set_index("user_id")["seen_item_ids"]
    out = {}
    for user in holdout:
        seen = [column[i] for i in seen_lists.get(user, []) if i in column]
        scores = history_side[seen].sum(0) if seen else np.zeros(history_side.shape[1], np.float32)
        if item_side is not None:
            scores = item_side @ scores
        scores = np.where(blocked, -np.inf, scores)
        scores[seen] = -np.inf
        out[user] = [items[j] for j in sparse_baselines.top(scores, n)]
    return out


def quality(
    run_dir: Path,
    config: RunConfig,
    holdout: dict[str, set[str]],
    references: dict[str, dict[str, list[str]]],
    baseline_metrics: dict[str, float] | None,
    t: Thresholds,
) -> tuple[list[Gate], dict[str, float]]:
    """The run's lists against each reference's (popularity, EASE) and
    against the published run's metrics."""
    ranked: dict[str, list[str]] = {}
    for top in bucket_tables(run_dir, "top_n"):
        mine = top[top["user_id"].isin(holdout)]
        ranked.update(zip(mine["user_id"], (list(x) for x in mine["item_ids"]), strict=True))
    if not holdout:
        return [Gate("quality", "quality", None, "-", True, "no holdout users in this run")], {}
    n = config.top_n
    metrics = ranking_metrics(ranked, holdout, n)
    reference_metrics = {}
    for name, lists in references.items():
        reference_metrics[name] = ranking_metrics(lists, holdout, n)
        metrics.update({f"{name}_{k}": v for k, v in reference_metrics[name].items()})
    gates = []
    for key in (f"recall@{n}", "ndcg@10"):
        for name, theirs in reference_metrics.items():
            gates.append(
                Gate(
                    f"beats_{name}_{key}",
                    "quality",
                    metrics[key],
                    f"> {name} {theirs[key]:.4f}",
                    metrics[key] > theirs[key],
                )
            )
        if baseline_metrics and key in baseline_metrics:
            floor = baseline_metrics[key] * (1 - t.quality_tolerance)
            gates.append(
                Gate(
                    f"vs_published_{key}",
                    "quality",
                    metrics[key],
                    f">= {floor:.4f} (published {baseline_metrics[key]:.4f})",
                    metrics[key] >= floor - 1e-12,
                )
            )
    return gates, metrics
