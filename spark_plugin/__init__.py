"""Spark glue: run TaskState inside the Spark APIs users already have.

- `configure(spark, namespace=..., sidecar=...)` on the driver.
- `with_batch_id(fn)` for foreachBatch functions.
- `resume(items, state, every=N)` for long batch tasks.
- `TaskStateProcessor` (in `taskstate.spark_plugin.processor`; needs pyspark) for
  transformWithStateInPandas / transformWithState.
- The executor plugin `io.taskstate.spark.TaskStatePlugin` and `taskstate spark-package`.
"""

from typing import Any

from .glue import configure, resume, with_batch_id

__all__ = ["TaskStateProcessor", "configure", "resume", "with_batch_id"]


def __getattr__(name: str) -> Any:
    if name == "TaskStateProcessor":  # imported on use: it needs pyspark
        from .processor import TaskStateProcessor

        return TaskStateProcessor
    raise AttributeError(name)
