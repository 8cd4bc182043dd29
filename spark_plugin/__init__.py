"""Spark glue: run TaskState inside the Spark APIs users already have.

- `configure(spark, namespace=..., sidecar=...)` on the driver.
- `with_batch_id(fn)` for foreachBatch functions.
- `resume(items, state, every=N)` for long batch tasks.
- `TaskStateProcessor` (in `taskstate.spark_plugin.processor`; needs pyspark) for
  transformWithStateInPandas / transformWithState.
- `TaskStateDataSource` (in `taskstate.spark_plugin.datasource`; needs pyspark): the
  `taskstate` data source, a component's state as a DataFrame and back.
- The executor plugin `io.taskstate.spark.TaskStatePlugin` and `taskstate spark-package`.
"""

from typing import Any

from .glue import configure, resume, with_batch_id

__all__ = ["TaskStateDataSource", "TaskStateProcessor", "configure", "resume", "with_batch_id"]


def __getattr__(name: str) -> Any:
    if name == "TaskStateProcessor":  # imported on use: it needs pyspark
        from .processor import TaskStateProcessor

        return TaskStateProcessor
    if name == "TaskStateDataSource":  # likewise
        from .datasource import TaskStateDataSource

        return TaskStateDataSource
    raise AttributeError(name)
