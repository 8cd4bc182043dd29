"""What the Spark figures' queries share: their source, their child process, their reports.

Figures 5 and 10 (`recovery.py`, `groups.py`) each run one streaming query per variant
in a child process of its own (`python -m benchmarks.NAME ...`), over a replayable
Python source whose offsets are batch numbers, and read the query's progress reports.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# (options) -> (rows in batch b, row i of batch b): each half of a batch is one partition
Rows = Callable[[Any], tuple[Callable[[int], int], Callable[[int, int], tuple[Any, ...]]]]


def register_batch_source(spark: Any, name: str, schema: str, rows: Rows) -> None:
    """Register a streaming source: offsets are batch numbers, `options["batches"]` of them.

    A batch's rows depend only on the batch and the row index, so a replayed batch reads
    exactly the same rows. Each batch is read as two partitions (its two halves).
    """
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    class Part(InputPartition):
        def __init__(self, batch: int, lo: int, hi: int) -> None:
            self.batch, self.lo, self.hi = batch, lo, hi

    class Reader(DataSourceStreamReader):
        def __init__(self, options: Any) -> None:
            self.batches = int(options["batches"])
            self.size, self.row = rows(options)

        def initialOffset(self) -> dict[str, int]:  # noqa: N802 - Spark's name
            return {"batch": 0}

        def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:  # noqa: N802
            return {"batch": min(start["batch"] + 1, self.batches)}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[Any]:
            out = []
            for b in range(start["batch"], end["batch"]):
                n = self.size(b)
                out += [Part(b, 0, n // 2), Part(b, n // 2, n)]
            return out

        def read(self, partition: Any) -> Iterator[tuple[Any, ...]]:
            for i in range(partition.lo, partition.hi):
                yield self.row(partition.batch, i)

        def commit(self, end: dict[str, int]) -> None:
            pass

    class Source(DataSource):
        @classmethod
        def name(cls) -> str:
            return name

        def schema(self) -> str:
            return schema

        def streamReader(self, schema: Any) -> Reader:  # noqa: N802 - Spark's name
            return Reader(self.options)

    spark.dataSource.register(Source)


def plugin_session(app: str, variant: str, plugin_jar: str, redis_url: str) -> Any:
    """A `local[2]` SparkSession with 2 shuffle partitions, and the plugin unless "spark".

    The executor plugin is loaded for `variant` "deferred" and, its flush barrier off,
    "sync"; not for "spark" (Spark's own state). Figures 10 and 20 (`groups.py`,
    `sessions.py`) run their queries in it.
    """
    from pyspark.sql import SparkSession

    b = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
    )
    if variant != "spark":
        b = (
            b.config("spark.jars", plugin_jar)
            .config("spark.plugins", "io.taskstate.spark.TaskStatePlugin")
            .config("spark.taskstate.redisUrl", redis_url)
            .config("spark.taskstate.flushBarrier", str(variant == "deferred").lower())
        )
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run_child(module: str, args: list[str], work: Path, what: str, env: dict[str, str]) -> None:
    """Run `python -m MODULE ARGS` in its own process group, logging to WORK/query.log.

    `env` is added to this process's environment. Fails with the log's tail when the
    query fails, and kills the whole group when it runs past 900 s.
    """
    work.mkdir(parents=True, exist_ok=True)
    full = dict(os.environ)
    full.setdefault("PYSPARK_PYTHON", sys.executable)
    full.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    root = str(Path(__file__).resolve().parent.parent)  # workers import benchmarks.*
    full["PYTHONPATH"] = os.pathsep.join(filter(None, [root, full.get("PYTHONPATH")]))
    full.update(env)
    with open(work / "query.log", "wb") as log:
        proc = subprocess.Popen(  # noqa: S603 - our own module
            [sys.executable, "-m", module, *args],
            env=full,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout=900)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise RuntimeError(f"the {what} query did not finish in 900 s") from None
    if code != 0:
        tail = (work / "query.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"the {what} query exited with {code}:\n{tail}")


def progress(work: Path, batches: int, what: str) -> dict[int, dict[str, Any]]:
    """The query's progress reports by batch id; each of batches 0..`batches` - 1 must have one.

    A later batch may have one too: a query with event-time timeouts runs a batch without
    data once its source is dry, to fire them, and it may finish before the query stops.
    """
    reports = {int(r["batchId"]): r for r in json.loads((work / "progress.json").read_text())}
    if not set(range(batches)) <= set(reports):
        raise AssertionError(f"{what}: progress for batches {sorted(reports)}")
    return reports
