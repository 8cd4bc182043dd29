"""Spark Connect sessions: what `configure` and `with_batch_id` do there.

A Connect client has no SparkContext: no local properties, no `applicationId`. What it
has, and what every task sees, are the session's SQL confs: Spark hands each SQL conf
whose name starts with `spark` to the tasks of the session's jobs as a local property,
in batch jobs and streaming micro-batches alike (docs/design-notes.md, "Spark Connect").
So `configure` sets `spark.taskstate.namespace` (and `.app`, `.sidecar`) on the session,
and `with_batch_id` sets `spark.taskstate.batchId` on the session a foreachBatch function
runs in: a session Spark clones for each streaming query (per query and per run), so the
value reaches that function's jobs and no other query's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from taskstate.client import ConfigError
from taskstate.proto.properties import APP_CONF, BATCH_ID_CONF, NAMESPACE_CONF, SIDECAR_CONF

from .server_check import PLUGIN_CLASS, problems

T = TypeVar("T")


def is_connect(spark: Any) -> bool:
    """Whether `spark` is a Spark Connect session (pyspark.sql.connect, pyspark-client)."""
    return type(spark).__module__.startswith("pyspark.sql.connect.")


def configure(spark: Any, namespace: str, sidecar: str | None, check: bool) -> None:
    """`configure` for a Connect session: session confs, then (`check`) the server check."""
    conf = spark.conf
    if str(conf.get("spark.speculation", "false")).strip().lower() == "true":
        raise ConfigError(SPECULATION)
    app = conf.get("spark.app.id", None)
    conf.set(NAMESPACE_CONF, namespace)
    if app:
        conf.set(APP_CONF, app)
    if sidecar is not None:
        conf.set(SIDECAR_CONF, sidecar)
    if check:
        check_server(spark, namespace, sidecar)


SPECULATION = (
    "spark.speculation=true runs two copies of a task at once; for a stateful task "
    "the copy Spark abandons can leave its batch rolled back. Operator action: set "
    "spark.speculation=false for jobs that use taskstate."
)


def call_with_batch_id(session: Any, batch_id: int, fn: Callable[[Any, int], T], df: Any) -> T:
    """Run `fn(df, batch_id)` with `spark.taskstate.batchId` set on the query's session."""
    conf = session.conf
    previous = conf.get(BATCH_ID_CONF, None)
    conf.set(BATCH_ID_CONF, str(int(batch_id)))
    try:
        return fn(df, batch_id)
    finally:
        if previous is None:
            conf.unset(BATCH_ID_CONF)
        else:
            conf.set(BATCH_ID_CONF, previous)


def _task_probe(_: object) -> str:
    """Runs in one task on the server: what a TaskState there would find, as JSON.

    Pickled by value (see below), so that it runs, and says so, where the server's
    Python cannot import taskstate at all.
    """
    import json

    try:
        from taskstate.spark_plugin.server_check import task_report
    except Exception as exc:  # reported to the client, which names the fix
        return json.dumps({"import": f"{type(exc).__name__}: {exc}"})
    return json.dumps(task_report())


# cloudpickle pickles functions of importable modules by reference; a function of
# `__main__` goes by value, with its code. The probe must unpickle on a server where
# `taskstate` is missing, to report exactly that.
_task_probe.__module__ = "__main__"


def check_server(spark: Any, namespace: str, sidecar: str | None) -> None:
    """Run one task on the Connect server; ConfigError naming whatever it lacks."""
    import warnings

    from pyspark.sql.functions import udf

    with warnings.catch_warnings():  # "cannot infer the eval type from type hints": a plain UDF
        warnings.simplefilter("ignore", UserWarning)
        probe = udf(_task_probe, "string")
    try:
        rows = spark.range(1).select(probe("id").alias("report")).collect()
    except Exception as exc:  # Spark's own error, wrapped
        raise ConfigError(
            "taskstate could not check the Spark Connect server: its one-task check job "
            f"failed ({type(exc).__name__}: {str(exc)[:2000]}). Pass check=False to skip "
            "the check."
        ) from exc
    report = json.loads(rows[0]["report"])
    plugins = str(spark.conf.get("spark.plugins", "") or "")
    found = problems(report, namespace=namespace, sidecar=sidecar, plugin=PLUGIN_CLASS in plugins)
    if found:
        raise ConfigError(
            "the Spark Connect server cannot run taskstate's tasks yet:\n- "
            + "\n- ".join(found)
            + "\n(docs/how-to/spark-connect.md; `taskstate spark-package --connect` prints the "
            "server's flags)"
        )
