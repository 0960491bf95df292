"""One way to start Spark: local mode on loopback by default, any master by URL."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession


def session(master: str = "local[*]", app_name: str = "recserve-rescore") -> SparkSession:
    # Workers must import from this interpreter (pandas, onnxruntime, our code),
    # and nothing may bind the machine's external interface.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app_name)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.driver.host", "127.0.0.1").config(
            "spark.driver.bindAddress", "127.0.0.1"
        )
    return (
        builder.config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.ui.showConsoleProgress", "false")  # the job shows its own progress
        .config("spark.sql.session.timeZone", "UTC")
        # pandas writes nanosecond timestamps, which Spark otherwise refuses to read.
        .config("spark.sql.legacy.parquet.nanosAsLong", "true")
        .config("spark.driver.memory", os.environ.get("RECSERVE_SPARK_DRIVER_MEMORY", "2g"))
        .getOrCreate()
    )
