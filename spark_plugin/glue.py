"""Driver-side setup and helpers for the Spark APIs that run TaskState in tasks.

- `configure(spark, namespace=..., sidecar=...)`: what tasks need, set once on the driver
  (a classic session or a Spark Connect one: connect.py).
- `with_batch_id(fn)`: wrap a foreachBatch function so its tasks see its batch id.
- `resume(items, state, every=N)`: skip what a batch task already checkpointed.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from taskstate.client import ConfigError, TaskState
from taskstate.client.address import grpc_target
from taskstate.proto import ids
from taskstate.proto.properties import (
    APP_OVERRIDE,
    BATCH_ID_OVERRIDE,
    NAMESPACE_PROPERTY,
    SIDECAR_PROPERTY,
)

from .compat import has, pin_problem, require
from .connect import SPECULATION, call_with_batch_id, is_connect
from .connect import configure as configure_connect

T = TypeVar("T")


def configure(
    spark: Any, *, namespace: str, sidecar: str | None = None, check: bool = True
) -> None:
    """Set the namespace (and optionally the sidecar address) for every task of `spark`.

    Classic session: sets Spark local properties, which tasks read through their
    TaskContext. Local properties belong to the calling thread and are inherited by the
    threads it starts, so call this before `writeStream.start()` (or before the batch
    actions), in the same thread.

    Spark Connect session: sets the session's SQL confs `spark.taskstate.namespace`,
    `.app` and `.sidecar`, which Spark hands every task of the session as local
    properties. A streaming query copies them when it starts: call this before
    `writeStream.start()`; a later call changes only the queries started after it.
    With `check` (the default), runs one task on the server and raises ConfigError naming
    what the server lacks (the taskstate package, a sidecar or the executor plugin, a
    namespace its tasks see).

    Both record the application id (`taskstate.app`), so that every task, RDD tasks
    included, names its attempt uniquely across driver restarts, and both refuse
    speculative execution (`spark.speculation=true`): a speculative copy of a stateful
    task that opens the task and is then killed would leave the batch rolled back while
    Spark keeps the other copy's output.

    Both get the `taskstate` data source (`spark.read.format("taskstate")`), registered
    with the namespace and sidecar as its default options, and the filter pushdown of
    Python data sources (`spark.sql.python.filterPushdown.enabled`) that its reads use
    (on Spark 4.0 and newer).

    Args:
        spark: The driver's SparkSession, classic or Spark Connect.
        namespace: The job's stable name: its state's namespace. Keep it across restarts;
            never the application id.
        sidecar: The sidecar tasks use (`unix:///PATH` or `tcp://HOST:PORT`); by default
            the executor plugin's, else the default socket.
        check: On a Spark Connect session, run one task on the server to check it.

    Raises:
        ConfigError: A bad namespace or sidecar, `spark.speculation=true`, or (Connect,
            with `check`) a server without what taskstate needs.
        SparkVersionError: A Spark Connect session of Spark older than 4.0.

    Example:
        ```python
        spark = SparkSession.builder.getOrCreate()
        configure(spark, namespace="trending-hashtags")  # before writeStream.start()
        ```
    """
    problem = ids.name_problem("namespace", namespace)
    if problem:
        raise ConfigError(problem)
    if sidecar is not None:
        grpc_target(sidecar)
    if is_connect(spark):
        require("Spark Connect", spark)
        configure_connect(spark, namespace, sidecar, check)
    else:
        _configure_classic(spark, namespace, sidecar)
    problem = pin_problem(spark)
    if problem:  # a warning: jobs that use no applyInPandasWithState run as they are
        warnings.warn(problem, RuntimeWarning, stacklevel=2)
    if has("data source", spark):  # both kinds alike
        register_data_source(spark, namespace=namespace, sidecar=sidecar)


def _configure_classic(spark: Any, namespace: str, sidecar: str | None) -> None:
    """Local properties of the calling thread (a classic session has a SparkContext)."""
    conf = spark.sparkContext.getConf()
    if conf.get("spark.speculation", "false").strip().lower() == "true":
        raise ConfigError(SPECULATION)
    sc = spark.sparkContext
    sc.setLocalProperty(NAMESPACE_PROPERTY, namespace)
    sc.setLocalProperty(APP_OVERRIDE, sc.applicationId)
    if sidecar is not None:
        sc.setLocalProperty(SIDECAR_PROPERTY, sidecar)


def register_data_source(spark: Any, **defaults: str | None) -> None:
    """Register the `taskstate` data source, with filter pushdown where Spark has it (4.1+).

    `defaults`: options its reads and writes need not give (namespace, sidecar).
    """
    require("data source", spark)
    from .datasource import TaskStateDataSource  # needs pyspark, as `spark` does

    pushdown = has("filter pushdown", spark)
    if pushdown:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(TaskStateDataSource.with_defaults(pushdown=pushdown, **defaults))


def with_batch_id(fn: Callable[[Any, int], T]) -> Callable[[Any, int], T]:
    """Wrap a `foreachBatch` function so the tasks it starts commit under `batch_id`.

    Spark passes the micro-batch id to a foreachBatch function explicitly; this puts it
    in the `taskstate.batchId` local property for the jobs the function runs, so a
    replayed batch (same id after a restart) rolls back before it is applied again.

    Under Spark Connect the function runs in a Python process of the server, and its
    jobs (the query's own steps that `df` runs included) carry no batch id of Spark's: a
    TaskState block there refuses to open without this wrapper. The wrapper sets the
    SQL conf `spark.taskstate.batchId` on `df.sparkSession`, the session Spark cloned
    for this query, for the duration of the call.

    Example:
        ```python
        @with_batch_id
        def write(df, batch_id):
            df.foreachPartition(update_partition)  # its TaskState blocks commit batch_id

        query = events.writeStream.foreachBatch(write).start()
        ```
    """

    @functools.wraps(fn)
    def wrapper(df: Any, batch_id: int) -> T:
        session = df.sparkSession
        if is_connect(session):
            return call_with_batch_id(session, batch_id, fn, df)
        sc = session.sparkContext
        previous = sc.getLocalProperty(BATCH_ID_OVERRIDE)
        sc.setLocalProperty(BATCH_ID_OVERRIDE, str(int(batch_id)))
        try:
            return fn(df, batch_id)
        finally:
            sc.setLocalProperty(BATCH_ID_OVERRIDE, previous)

    return wrapper


def resume(items: Iterable[T], state: TaskState, *, every: int = 1000) -> Iterator[T]:
    """Yield the items a batch task has not checkpointed yet, checkpointing as it goes.

    The position is the number of items already processed: a retried attempt skips that
    many and continues *after* them. Every `every` items (after the caller has handled
    the item) the state is committed with the new position, so work is redone only back
    to the last checkpoint.

    Needs a deterministic input order: the retried attempt must see the same items in
    the same order. Spark gives that for a partition read from files or a fixed
    collection, and after a sort within partitions; not after a shuffle without a sort
    (the order of rows within a shuffled partition depends on fetch order).

    Skipped items produce no output in the retried attempt: keep the results in the
    state (emit them after the loop), as an aggregation does.

    Args:
        items: The task's input, in a deterministic order.
        state: The open TaskState of the task (a batch job's: no micro-batch).
        every: Commit the state and the position after this many items.

    Raises:
        ConfigError: `every` below 1, or a stored position resume() did not write.

    Example:
        ```python
        def work(rows):
            with TaskState(TaskContext.get(), component="enrich") as s:
                for row in resume(rows, s, every=500):
                    s[str(row.id)] = enrich(row)
                yield from s.items()
        ```
    """
    if every < 1:
        raise ConfigError(f"every={every}: checkpoint at least every 1 item")
    done = state.position or 0
    if not isinstance(done, int) or done < 0:
        raise ConfigError(
            f"task {state.task_id}: stored position {done!r} is not a count of items; it was "
            "not written by resume()",
            state.task_id,
        )
    for i, item in enumerate(items):
        if i < done:
            continue
        yield item
        if (i + 1) % every == 0:
            state.commit(position=i + 1)
