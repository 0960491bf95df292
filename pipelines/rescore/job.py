"""The Spark job: users -> retrieval candidates -> ranker scores -> top-N.

Users are hashed into a fixed number of buckets (stored with the run), and
each bucket is processed by exactly one task, which writes its own files
(``scores/bucket=B/``, ``top_n/bucket=B/``) through a temporary name and
then a ``_done/B.json`` marker. A restarted run skips every bucket with a
marker, so a job killed midway redoes only unfinished buckets; a bucket
redone after a crash overwrites its own files, never another's.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pipelines.rescore import layout
from pipelines.rescore.scoring import load_bundle, score_users, tables
from recserve_cli import console as cli_console

STATUS_SCHEMA = "bucket int, users long, pairs long, seconds double"
USER_COLUMNS = [
    "user_id",
    "age",
    "gender",
    "occupation",
    "rating_count",
    "mean_rating",
    "recent_item_ids",
    "seen_item_ids",
    "attributes",
]


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines a run's output; stored as ``run.json``."""

    run_id: str
    artifact_dir: str
    artifact_version: str
    features_dir: str
    ranking_model: str = "ranker"
    candidates: int = 200
    top_n: int = 100
    buckets: int = 8
    users_per_batch: int = 256
    inactive_items: list[str] = field(default_factory=list)

    def save(self, path: Path) -> None:
        layout.write_json(path, asdict(self))

    @classmethod
    def load(cls, path: Path) -> RunConfig:
        return cls(**json.loads(path.read_text()))


@dataclass
class JobResult:
    users: int
    pairs: int
    seconds: float
    buckets_run: int
    buckets_skipped: int

    @property
    def pairs_per_second(self) -> float:
        return self.pairs / self.seconds if self.seconds else 0.0


def users_frame(spark: SparkSession, features_dir: Path) -> DataFrame:
    """Users joined with their activity, from the features' parquet snapshots."""
    profile = spark.read.parquet(str(features_dir / "user_profile.parquet"))
    activity = spark.read.parquet(str(features_dir / "user_activity.parquet"))
    joined = profile.join(activity.drop("event_timestamp"), "user_id", "left")
    empty = F.array().cast("array<string>")
    # An artifact built before declared attributes has no such column.
    attributes = F.col("attributes") if "attributes" in profile.columns else F.lit("{}")
    return joined.select(
        F.col("user_id").cast("string"),
        F.col("age").cast("double"),
        F.col("gender"),
        F.col("occupation"),
        F.coalesce(F.col("rating_count"), F.lit(0)).cast("double").alias("rating_count"),
        F.coalesce(F.col("mean_rating"), F.lit(0.0)).cast("double").alias("mean_rating"),
        F.coalesce(F.col("recent_item_ids"), empty).alias("recent_item_ids"),
        F.coalesce(F.col("seen_item_ids"), empty).alias("seen_item_ids"),
        F.coalesce(attributes, F.lit("{}")).alias("attributes"),
    )


def bucket_of(buckets: int) -> F.Column:
    """Spark's own hash partitioning: ``repartition(buckets, "user_id")`` puts
    exactly the users of bucket b into partition b, one task per bucket."""
    return F.pmod(F.hash("user_id"), F.lit(buckets)).cast("int")


def completed_buckets(run_dir: Path) -> dict[int, dict[str, float]]:
    done = run_dir / "_done"
    if not done.exists():
        return {}
    return {int(p.stem): json.loads(p.read_text()) for p in done.glob("*.json")}


def _partition_writer(config: RunConfig, run_dir: str):
    """The mapInPandas function; runs on the executors."""

    def process(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        from pyspark import TaskContext

        bundle = load_bundle(
            config.artifact_dir, config.ranking_model, tuple(config.inactive_items)
        )
        context = TaskContext.get()
        attempt = context.attemptNumber() if context else 0
        root = Path(run_dir)
        writers: dict[tuple[str, int], pq.ParquetWriter] = {}
        counts: dict[int, list[float]] = {}
        started = time.perf_counter()
        partition = context.partitionId() if context else None
        for batch in batches:
            if partition is not None and (batch["bucket"] != partition).any():
                # Two tasks writing one bucket would overwrite each other's files.
                raise RuntimeError(f"partition {partition} received users of another bucket")
            for bucket, users in batch.groupby("bucket", sort=False):
                scored = score_users(bundle, users.reset_index(drop=True), config.candidates)
                for name, table in zip(
                    ("scores", "top_n"), tables(bundle, scored, config.top_n), strict=True
                ):
                    key = (name, int(bucket))
                    if key not in writers:
                        path = layout.bucket_file(root, name, int(bucket), attempt, temporary=True)
                        path.parent.mkdir(parents=True, exist_ok=True)
                        writers[key] = pq.ParquetWriter(path, table.schema)
                    writers[key].write_table(table)
                total = counts.setdefault(int(bucket), [0, 0])
                total[0] += len(users)
                total[1] += scored.pairs
        for (name, bucket), writer in writers.items():
            writer.close()
            os.replace(
                layout.bucket_file(root, name, bucket, attempt, temporary=True),
                layout.bucket_file(root, name, bucket, attempt),
            )
        seconds = time.perf_counter() - started
        for bucket, (n_users, n_pairs) in counts.items():
            layout.write_json(
                root / "_done" / f"{bucket}.json",
                {"users": n_users, "pairs": n_pairs, "seconds": seconds},
            )
        yield pd.DataFrame(
            {
                "bucket": list(counts),
                "users": [int(c[0]) for c in counts.values()],
                "pairs": [int(c[1]) for c in counts.values()],
                "seconds": [seconds] * len(counts),
            }
        )

    return process


def _watch(run_dir: Path, buckets: int, stop: threading.Event, console: Console) -> None:
    """Progress while Spark runs: buckets finished, users and pairs scored."""
    columns = (
        TextColumn("re-scoring"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("buckets  {task.fields[pairs]:,} pairs"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("buckets", total=buckets, pairs=0)
        while True:
            done = completed_buckets(run_dir)
            pairs = int(sum(d["pairs"] for d in done.values()))
            progress.update(task, completed=len(done), pairs=pairs)
            if stop.wait(0.5):
                done = completed_buckets(run_dir)
                progress.update(
                    task, completed=len(done), pairs=int(sum(d["pairs"] for d in done.values()))
                )
                return


def run_job(
    spark: SparkSession, config: RunConfig, run_dir: Path, console: Console | None = None
) -> JobResult:
    console = console or cli_console(stderr=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    stored = run_dir / "run.json"
    if stored.exists() and RunConfig.load(stored) != config:
        raise ValueError(f"{stored}: the run exists with a different configuration")
    config.save(stored)
    done = completed_buckets(run_dir)
    pending = [b for b in range(config.buckets) if b not in done]
    started = time.perf_counter()
    result = JobResult(0, 0, 0.0, len(pending), len(done))
    if pending:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(config.users_per_batch))
        users = (
            users_frame(spark, Path(config.features_dir))
            .withColumn("bucket", bucket_of(config.buckets))
            .where(F.col("bucket").isin(pending))
            .repartition(config.buckets, "user_id")
        )
        stop = threading.Event()
        watcher = threading.Thread(
            target=_watch, args=(run_dir, config.buckets, stop, console), daemon=True
        )
        watcher.start()
        try:
            status = users.mapInPandas(
                _partition_writer(config, str(run_dir)), STATUS_SCHEMA
            ).collect()
        finally:
            stop.set()
            watcher.join()
        result.users = sum(r.users for r in status)
        result.pairs = sum(r.pairs for r in status)
        for bucket in set(pending) - {r.bucket for r in status}:  # no users hashed there
            layout.write_json(run_dir / "_done" / f"{bucket}.json", {"users": 0, "pairs": 0})
    result.seconds = time.perf_counter() - started
    return result
