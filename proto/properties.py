"""The Spark properties a task reads, and the glue (`taskstate.spark_plugin`) sets.

A contract between a job's driver and its tasks, as ids.py is between client and
sidecar: spark_plugin.configure and with_batch_id set these, client/_context.py reads them.
"""

from __future__ import annotations

BATCH_ID_PROPERTY = "streaming.sql.batchId"
# What spark_plugin.configure and with_batch_id set, read by tasks. Two spellings, one
# meaning: a classic session sets local properties (`taskstate.*`, per thread); a Spark
# Connect session sets SQL confs (`spark.taskstate.*`), which Spark hands every
# SQL-planned task as local properties (docs/design-notes.md, "Spark Connect"). The
# `taskstate.*` spelling wins where both are present: it is the more specific one.
BATCH_ID_OVERRIDE = "taskstate.batchId"  # set by spark_plugin.with_batch_id (foreachBatch)
BATCH_ID_CONF = "spark.taskstate.batchId"  # the same, in a Connect foreachBatch
NAMESPACE_PROPERTY = "taskstate.namespace"
NAMESPACE_CONF = "spark.taskstate.namespace"
SIDECAR_PROPERTY = "taskstate.sidecar"
SIDECAR_CONF = "spark.taskstate.sidecar"
# The application a task attempt belongs to, first found wins (see attempt_scope):
APP_ID_PROPERTY = "spark.app.id"  # Spark sets it on SQL-planned tasks (pandas UDFs, ...)
APP_OVERRIDE = "taskstate.app"  # set by spark_plugin.configure: covers RDD tasks too
APP_CONF = "spark.taskstate.app"  # the same, set by configure on a Connect session
QUERY_ID_PROPERTY = "sql.streaming.queryId"
JOB_GROUP_PROPERTY = "spark.jobGroup.id"  # a streaming query's run id (new on each start)
# Spark sets this SQL conf on the session of every streaming query it runs
# (StreamExecution.runStream; internal, "DO NOT USE THIS CONFIG DIRECTLY"), and SQL
# confs reach the tasks: a task that carries it belongs to a streaming query, also when
# it carries no batch id (the jobs of a Spark Connect foreachBatch function).
STREAMING_SESSION_CONF = "spark.sql.streaming.internal.stateStore.partitions"
