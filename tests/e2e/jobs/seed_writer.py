"""A driver that writes a component's state with the taskstate data source, with a fault.

argv: MASTER NAMESPACE COMPONENT SIDECAR ROWS PARTS FAULT MARKER_DIR REDIS_URL
Rows `k<i>` -> {"v": i, "pad": "..."} for i < ROWS, in PARTS Spark partitions, written
with partitions=3 and pageKeys=100, so each Spark task stages many pages. FAULT:
- `slow`: every Spark task yields its rows 100 at a time, 0.2 s apart (the test kills
  this driver while it writes);
- `executor`: the first attempt of Spark partition 0 yields half its rows, waits until
  the sidecar holds some of them staged (it asks Redis), notes how many in
  MARKER_DIR/staged, and SIGKILLs its executor JVM; Spark runs it again elsewhere.
Prints `done` when the write was committed.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyspark import TaskContext
from pyspark.sql import SparkSession

master, ns, component, sidecar, rows, parts, fault, marker, redis_url = sys.argv[1:10]
N, PARTS = int(rows), int(parts)
PAD = "x" * 60


def executor_pid() -> int:
    from taskstate.demo.faults import executor_pid as find

    pid = find()
    assert pid is not None
    return pid


def staged_keys() -> int:
    import redis

    c = redis.Redis.from_url(redis_url)
    return sum(
        c.hlen(k)
        for k in c.scan_iter(match=f"ts:*{ns}/{component}*:seed:*")
        if not k.endswith((b":att", b":stage"))
    )


def generate(batches: Iterator[Any]) -> Iterator[Any]:
    import pandas as pd

    ctx = TaskContext.get()
    assert ctx is not None
    part, attempt = ctx.partitionId(), ctx.attemptNumber()
    ids = [int(i) for b in batches for i in b["id"]]
    for start in range(0, len(ids), 100):
        chunk = ids[start : start + 100]
        yield pd.DataFrame(
            {
                "key": [f"k{i}" for i in chunk],
                "value": [json.dumps({"v": i, "pad": PAD}) for i in chunk],
            }
        )
        if fault == "slow":
            time.sleep(0.2)
        elif fault == "executor" and part == 0 and attempt == 0 and start + 100 >= len(ids) // 2:
            deadline = time.monotonic() + 60
            while staged_keys() == 0 and time.monotonic() < deadline:
                time.sleep(0.2)
            (Path(marker) / "staged").write_text(str(staged_keys()))
            os.kill(executor_pid(), signal.SIGKILL)
            time.sleep(60)


spark = (
    SparkSession.builder.master(master)
    .appName("seed-writer")
    .config("spark.ui.enabled", "false")
    .config("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
    .config("spark.task.maxFailures", "4")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
from taskstate.spark_plugin.datasource import TaskStateDataSource  # noqa: E402

spark.dataSource.register(TaskStateDataSource)
df = spark.range(0, N, numPartitions=PARTS).mapInPandas(generate, "key string, value string")
(
    df.write.format("taskstate")
    .option("namespace", ns)
    .option("component", component)
    .option("sidecar", sidecar)
    .option("partitions", "3")
    .option("pageKeys", "100")
    .option("leaseSeconds", "4")
    .mode("overwrite")
    .save()
)
print("done", flush=True)
spark.stop()
