"""The taskstate data source from a Spark Connect client: a seed written, then read back.

argv: --remote URL --namespace NS --sidecar TARGET --report FILE
Writes 500 keys (JSON values) as component `seeded` with 3 partitions, reads the
component whole, with a key filter and with a partition filter, and writes what it read
to the report (JSON).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pyspark.sql import SparkSession

from taskstate.spark_plugin import configure

p = argparse.ArgumentParser()
for flag in ("--remote", "--namespace", "--sidecar", "--report"):
    p.add_argument(flag, required=True)
a = p.parse_args()
spark = SparkSession.builder.remote(a.remote).getOrCreate()
configure(spark, namespace=a.namespace, sidecar=a.sidecar)
seed = spark.range(500).selectExpr(
    "concat('k', cast(id as string)) AS key", "to_json(named_struct('n', id)) AS value"
)
seed.write.format("taskstate").option("component", "seeded").option("partitions", 3).mode(
    "overwrite"
).save()
state = spark.read.format("taskstate").option("component", "seeded").load()
report = {
    "whole": [r.asDict() for r in state.collect()],
    "key": [r.asDict() for r in state.where("key IN ('k7', 'k300')").collect()],
    "partition": [r.asDict() for r in state.where("partition = 2").collect()],
}
Path(a.report).write_text(json.dumps(report))
spark.stop()
