"""A long batch mapPartitions job that checkpoints with resume(); one task dies at ~70%.

argv: NAMESPACE SIDECAR LOG_DIR ROWS_PER_PARTITION KILL_AT EVERY OUT_JSON
Each processed record is appended to LOG_DIR/p<part>-a<attempt>.log, so the test can see
which attempt processed which record.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

from pyspark import TaskContext
from pyspark.sql import SparkSession

from taskstate.client import TaskState
from taskstate.spark_plugin import configure, resume

ns, sidecar, log_dir = sys.argv[1], sys.argv[2], sys.argv[3]
per_part, kill_at, every, out_json = map(str, sys.argv[4:8])
per_part_n, kill_at_n, every_n = int(per_part), int(kill_at), int(every)


def work(rows: Any) -> Any:
    ctx = TaskContext.get()
    assert ctx is not None
    part, attempt = ctx.partitionId(), ctx.attemptNumber()
    with (
        TaskState(ctx, component="batch-sum", sidecar=sidecar) as s,
        open(os.path.join(log_dir, f"p{part}-a{attempt}.log"), "a") as log,
    ):
        start = s.position or 0
        for i, row in enumerate(resume(rows, s, every=every_n), start=start):
            s["count"] = s.get("count", 0) + 1
            s["sum"] = s.get("sum", 0) + row.id
            log.write(f"{row.id}\n")
            log.flush()
            if part == 0 and attempt == 0 and i == kill_at_n:
                os.kill(os.getpid(), signal.SIGKILL)  # the Python worker dies mid-task
        yield (part, attempt, start, s["count"], s["sum"])


spark = (
    SparkSession.builder.master("local[2,4]")
    .appName("batch-resume")
    .config("spark.ui.enabled", "false")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
configure(spark, namespace=ns)
df = spark.range(0, 2 * per_part_n, numPartitions=2)
result = df.rdd.mapPartitions(work).collect()
with open(out_json, "w") as f:
    json.dump(result, f)
spark.stop()
