"""Nightly re-scoring throughput: pairs scored per second end to end.

End to end = Spark reads the user tables, retrieves each user's candidates,
scores every pair with the ranker and writes scores and top-N parquet. One
Spark session; fp32 and int8 rankers side by side on the same users.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from rich.console import Console

from pipelines.rescore import spark
from pipelines.rescore.job import RunConfig, run_job
from pipelines.rescore.synthetic import write_users
from recserve_model import artifacts

NIGHTLY_PAIRS = 100_000_000


def run(
    data_dir: Path,
    work_dir: Path,
    users: int,
    candidates: int,
    master: str,
    console: Console,
) -> dict[str, object]:
    artifact = artifacts.current(data_dir).resolve()
    users_dir = work_dir / f"users-{users}"
    if not (users_dir / "user_activity.parquet").exists():
        write_users(artifact, users_dir, users)
    session = spark.session(master)
    cores = session.sparkContext.defaultParallelism
    results: dict[str, object] = {"users": users, "candidates": candidates, "spark_cores": cores}
    # A short warm-up run: JVM, Python workers and model loading start once.
    for name, model, n_users in (
        ("warmup", "ranker", 0),
        ("fp32", "ranker", users),
        ("int8", "ranker_int8", users),
    ):
        run_dir = work_dir / "runs" / name
        shutil.rmtree(run_dir, ignore_errors=True)
        features = users_dir if n_users else artifact / "features"
        config = RunConfig(
            run_id=name,
            artifact_dir=str(artifact),
            artifact_version=artifact.name,
            features_dir=str(features),
            ranking_model=model,
            candidates=candidates,
            buckets=2 * cores,
        )
        result = run_job(session, config, run_dir, console)
        if name == "warmup":
            continue
        results[name] = {
            "pairs": result.pairs,
            "seconds": round(result.seconds, 2),
            "pairs_per_second": round(result.pairs_per_second),
            "minutes_for_100M_pairs": round(NIGHTLY_PAIRS / result.pairs_per_second / 60, 1),
        }
    session.stop()
    return results
