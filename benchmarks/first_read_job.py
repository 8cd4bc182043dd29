"""The first small read of a Spark session, against the first reads of other sources.

    python -m benchmarks.first_read_job SIDECAR NAMESPACE COMPONENT JSON_DIR KIND --out FILE

One fresh SparkSession (local[2]) per run, as a user's job or notebook starts: the JVM is
warmed with `spark.range(10).count()` (no Python), then KIND is read first and timed, then
read again three times (the median: a later read). KIND: `taskstate` (the component, after
`configure()`), `json` (the same rows as JSON lines in JSON_DIR) or `python` (a Python
data source of 4 partitions that yields the same number of constant rows: what any first
Python data source read costs in Spark here, before a row of state is read).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from .datasource_job import TASKS, constant_source

LATER = 3


def main() -> None:
    """Time the first read of KIND in a fresh session, then later reads."""
    p = argparse.ArgumentParser()
    for name in ("sidecar", "namespace", "component", "json_dir", "rows"):
        p.add_argument(name)
    p.add_argument("kind", choices=["taskstate", "json", "python"])
    p.add_argument("--out", required=True)
    a = p.parse_args()
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("taskstate-bench-first-read")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.range(10).count()  # the JVM warms up; no Python worker starts
    configure_s = 0.0
    if a.kind == "taskstate":
        from taskstate.spark_plugin import configure

        t0 = time.perf_counter()
        configure(spark, namespace=a.namespace, sidecar=a.sidecar)
        configure_s = time.perf_counter() - t0

    constant = constant_source(spark, int(a.rows) // TASKS) if a.kind == "python" else ""

    def load() -> Any:
        if a.kind == "taskstate":
            return spark.read.format("taskstate").option("component", a.component).load()
        if a.kind == "json":
            return spark.read.json(a.json_dir)
        return spark.read.format(constant).load()

    took = []
    for _ in range(1 + LATER):
        t0 = time.perf_counter()
        n = load().count()
        took.append(time.perf_counter() - t0)
        if n != int(a.rows):
            raise AssertionError(f"the {a.kind} read gave {n} rows of {a.rows}")
    Path(a.out).write_text(json.dumps({
        "first_s": took[0], "later_s": statistics.median(took[1:]), "configure_s": configure_s,
    }))  # fmt: skip
    spark.stop()
    os._exit(0)  # the JVM's shutdown hooks are not ours to wait for


if __name__ == "__main__":
    main()
