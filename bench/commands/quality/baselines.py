"""`python -m bench baselines`: EASE at several regularisations, on a
dataset's temporal split, so the build's gate is held against the strongest
EASE that dataset allows, not only the one the build uses."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.table import Table

from bench.output import console, write


def ease_by_lambda(dataset_dir: Path | None, raw_dir: Path, lambdas: list[float]) -> dict:
    from pipelines import baselines, dataset
    from pipelines.evaluate import CUTOFFS, metrics_at
    from pipelines.inputs import build_spec
    from pipelines.ranker_examples import seen_rows
    from recserve_model.encoding import Encoder

    data = dataset.load_movielens(raw_dir, dataset_dir)
    split = dataset.temporal_split(data.interactions)
    encoder = Encoder(build_spec(data, 8))
    seen = seen_rows(split.train, encoder)
    truth = seen_rows(split.test, encoder)
    users = sorted(truth)
    matrix = baselines.interactions(split.train, encoder, users)
    never = encoder.item_rows(sorted(data.inactive))  # as the build's evaluation
    results: dict[str, dict[str, float]] = {}
    for lam in lambdas:
        weights = baselines.ease(matrix, lam)
        totals: dict[str, float] = {}
        for i, user in enumerate(users):
            scores = matrix[i] @ weights
            scores[list(seen.get(user, ()))] = -np.inf
            scores[never] = -np.inf
            scores[0] = -np.inf
            ranked = np.argsort(-scores, kind="stable")[: max(CUTOFFS)]
            for key, value in metrics_at(ranked, truth[user]).items():
                totals[key] = totals.get(key, 0.0) + value / len(users)
        results[f"{lam:g}"] = totals
    return {
        "dataset": data.title,
        "users": len(users),
        "build_lambda": baselines.EASE_LAMBDA,
        "ease": results,
    }


def baselines_command(
    dataset_dir: Annotated[
        Path | None, typer.Option("--dataset", help="A dataset directory; default: ML-100K.")
    ] = None,
    data_dir: Annotated[Path, typer.Option(help="Where the demo's raw data is.")] = Path("data"),
    lambdas: Annotated[str, typer.Option(help="EASE's L2 weights, comma-separated.")] = (
        "100,300,1000,3000"
    ),
    out: Path | None = None,
) -> None:
    """EASE's held-out recall and NDCG at each regularisation."""
    result = ease_by_lambda(dataset_dir, data_dir / "raw", [float(x) for x in lambdas.split(",")])
    table = Table(title=f"EASE on {result['dataset']} ({result['users']} held-out users)")
    for column in ("lambda", "recall@10", "recall@100", "ndcg@10"):
        table.add_column(column, justify="right")
    for lam, metrics in result["ease"].items():
        table.add_row(lam, *(f"{metrics[k]:.4f}" for k in ("recall@10", "recall@100", "ndcg@10")))
    console.print(table)
    console.print(f"the build uses lambda {result['build_lambda']:g}")
    write(out, {"benchmark": "ease_by_lambda", **result})
