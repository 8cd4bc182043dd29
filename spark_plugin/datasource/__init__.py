"""The `taskstate` PySpark data source: a component's state as a DataFrame, and back.

    spark.dataSource.register(TaskStateDataSource)      # configure(spark, ...) does it,
                                                         # with filter pushdown
    df = spark.read.format("taskstate").option("namespace", "shop").option("component",
        "totals").load()                                 # partition, key, value, batch
    seed.write.format("taskstate").option("namespace", "shop").option("component",
        "totals").option("partitions", 8).mode("overwrite").save()

Reads are consistent per task (one committed version each); writes are all or nothing
for the component. docs/reference/data-source.md has the options and guarantees.
Needs pyspark and pyarrow (the `[spark]` extra).
"""

from ..compat import require

require("data source")  # Python data sources are Spark 4.0+

from .source import TaskStateDataSource  # noqa: E402

__all__ = ["TaskStateDataSource"]
