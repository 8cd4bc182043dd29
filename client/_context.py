"""Who is running: the task identity from a Spark TaskContext or a LocalContext."""

from __future__ import annotations

import functools
import hashlib
import itertools
import os
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

from taskstate.proto import ids
from taskstate.proto.properties import (
    APP_CONF,
    APP_ID_PROPERTY,
    APP_OVERRIDE,
    BATCH_ID_CONF,
    BATCH_ID_OVERRIDE,
    BATCH_ID_PROPERTY,
    JOB_GROUP_PROPERTY,
    QUERY_ID_PROPERTY,
    STREAMING_SESSION_CONF,
)

from ._errors import ConfigError

_local_attempts = itertools.count(-1, -1)  # negative: never collides with Spark's ids
_PROCESS_SCOPE = f"process-{uuid.uuid4().hex[:16]}"


class ContextLike(Protocol):
    """What TaskState needs of a context: PySpark's TaskContext has all of it."""

    def partitionId(self) -> int: ...  # noqa: N802
    def attemptNumber(self) -> int: ...  # noqa: N802
    def taskAttemptId(self) -> int: ...  # noqa: N802
    def getLocalProperty(self, key: str) -> str | None: ...  # noqa: N802


@dataclass
class LocalContext:
    """A stand-in for `pyspark.TaskContext` outside Spark (tests, scripts, notebooks).

    Each LocalContext is one task attempt: `with TaskState(ctx, ...)` blocks that share
    one LocalContext share one claim, like the group-scoped blocks of one Spark task,
    also when the context is pickled to another process (as Spark serves one attempt
    with several Python workers); a new LocalContext is a new attempt and claims the
    task again.

    Args:
        partition_id: the task's partition (its stable index).
        batch_id: the micro-batch id, or None for a batch (non-streaming) job.
        attempt: the attempt number, recorded for operators.
        properties: extra Spark local properties (e.g. `taskstate.namespace`).
        app_id: the application the attempt belongs to (`spark.app.id`); by default a
            new unique id per LocalContext.
        task_attempt_id: Spark's task attempt id (unique within the application); by
            default a new one per LocalContext.
        plugin_flush: whether something plays the executor plugin's part for this attempt
            and sends the sidecar its FLUSH when the attempt ends (tests of the flush do).
            By default a LocalContext's blocks always commit at their exit, also beside a
            sidecar of the plugin: nothing would flush changes held for a LocalContext,
            and they would be lost with its process.
    """

    partition_id: int
    batch_id: int | None = None
    attempt: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    app_id: str = field(default_factory=lambda: f"local-{uuid.uuid4().hex[:16]}")
    task_attempt_id: int = field(default_factory=lambda: next(_local_attempts))
    plugin_flush: bool = False

    def partitionId(self) -> int:  # noqa: N802 - TaskContext's name
        """The partition id."""
        return self.partition_id

    def attemptNumber(self) -> int:  # noqa: N802
        """The attempt number."""
        return self.attempt

    def taskAttemptId(self) -> int:  # noqa: N802
        """The id of this attempt, unique within `app_id`."""
        return self.task_attempt_id

    def getLocalProperty(self, key: str) -> str | None:  # noqa: N802
        """Spark local properties; the batch id under `streaming.sql.batchId`."""
        if key in (BATCH_ID_OVERRIDE, BATCH_ID_CONF):
            return self.properties.get(key)
        if key == BATCH_ID_PROPERTY:
            return None if self.batch_id is None else str(self.batch_id)
        if key == APP_ID_PROPERTY:
            return self.properties.get(key, self.app_id)
        return self.properties.get(key)


@dataclass(frozen=True, slots=True)
class TaskIdentity:
    """The parts of a context TaskState uses."""

    partition: int
    batch: int | None
    attempt: int
    attempt_id: str  # SCOPE:N, the same in every process serving the attempt
    # the local property that shows the task belongs to a streaming query (None: it does
    # not, or it has a batch id); TaskState refuses to open such a task (check_batch)
    streaming_without_batch: str | None = None

    @property
    def task_attempt(self) -> int:
        """N of SCOPE:N: Spark's task attempt id, unique within an executor's application."""
        return int(self.attempt_id.rpartition(":")[2])

    def property(self, ctx: Any, key: str) -> str | None:
        """A local property of the context."""
        value = ctx.getLocalProperty(key)
        return None if value is None else str(value)


def current_context(ctx: Any | None) -> Any:
    """`ctx`, or PySpark's TaskContext.get() when ctx is None."""
    if ctx is not None:
        return ctx
    found = None
    try:
        from pyspark import TaskContext

        found = TaskContext.get()
    except ImportError:
        pass
    if found is None:
        raise ConfigError(
            "TaskState needs a task context and there is none: this code is not running "
            "inside a Spark task. Pass ctx=taskstate.client.LocalContext(partition_id, "
            "batch_id) to use it outside Spark."
        )
    return found


# The last PySpark TaskContext read (held, so that its id stays its own), its attempt id
# and its identity. Spark makes a TaskContext per task attempt (worker.py:
# `to_task_context()`) and never changes it, so the group calls of an attempt (one block
# each) read it once; the attempt id is compared too, as a guard.
# A LocalContext can be changed in place: read every time. One tuple, replaced whole, so
# that a block in another thread never mixes two contexts' parts.
_read: tuple[Any, Any, Any] = (None, None, None)


def identity(ctx: Any) -> TaskIdentity:
    """Read partition, batch id and attempt from a TaskContext-like object.

    Also notes a task of a streaming query that has no batch id, which TaskState refuses
    (`check_batch`).
    """
    global _read  # the memo above
    last = _read
    if ctx is last[0] and ctx.taskAttemptId() == last[1]:
        return last[2]  # type: ignore[no-any-return]
    found = _identity_of(ctx)
    if ctx.__class__.__module__ == "pyspark.taskcontext":
        _read = (ctx, ctx.taskAttemptId(), found)
    return found


def _identity_of(ctx: Any) -> TaskIdentity:
    try:
        partition = int(ctx.partitionId())
        attempt = int(ctx.attemptNumber())
        attempt_id = f"{attempt_scope(ctx)}:{int(ctx.taskAttemptId())}"
        raw_batch, where = None, BATCH_ID_PROPERTY
        for key in (BATCH_ID_OVERRIDE, BATCH_ID_CONF, BATCH_ID_PROPERTY):
            raw_batch, where = ctx.getLocalProperty(key), key
            if raw_batch not in (None, ""):
                break
        streaming = None if raw_batch not in (None, "") else _streaming_signal(ctx)
    except AttributeError as exc:
        raise ConfigError(
            f"ctx {ctx!r} is not a task context: pass pyspark.TaskContext.get() or "
            "taskstate.client.LocalContext(...)"
        ) from exc
    batch: int | None = None
    if raw_batch not in (None, ""):
        try:
            batch = int(str(raw_batch))
        except ValueError as exc:
            raise ConfigError(f"local property {where}={raw_batch!r} is not an integer") from exc
    return _identity(partition, batch, attempt, attempt_id, streaming)


# the blocks of an attempt (a group call each) share one TaskIdentity: building a frozen
# dataclass costs more than the lookups that name it
_identity = functools.lru_cache(maxsize=256)(TaskIdentity)


def _streaming_signal(ctx: Any) -> str | None:
    """The local property that shows a task belongs to a streaming query, if one does."""
    for key in (QUERY_ID_PROPERTY, STREAMING_SESSION_CONF):
        if ctx.getLocalProperty(key) not in (None, ""):
            return key
    return None


def check_batch(ident: TaskIdentity, component: str) -> None:
    """Refuse a task of a streaming query that has no micro-batch id; nothing is opened.

    Without a batch id its commits would be plain checkpoints (a batch job's), and Spark's
    replay of an uncommitted batch would count it twice.
    """
    signal = ident.streaming_without_batch
    if signal is None:
        return
    raise ConfigError(
        f"component {component!r}, partition {ident.partition}: this task belongs to a "
        f"streaming query (local property {signal}) but has no micro-batch id, so a "
        "replayed batch could not be rolled back. This is a foreachBatch function's job "
        "under Spark Connect (Spark gives its jobs, and the query's own steps its DataFrame "
        "runs, no streaming.sql.batchId). Operator action: wrap the foreachBatch function "
        "with taskstate.spark_plugin.with_batch_id (`@with_batch_id def each(df, "
        "batch_id): ...`). Nothing was opened or written."
    )


def attempt_scope(ctx: Any) -> str:
    """What makes Spark's task attempt ids unique: the application (or run) they belong to.

    A task attempt id restarts at 0 in every new application (a restarted driver), so the
    claim is named by SCOPE:taskAttemptId. Every Python process serving one attempt sees
    the same local properties and executor environment, so all of them find the same
    scope. First found:

    1. `spark.app.id`: Spark (4.x) sets it on SQL-planned tasks: mapInPandas,
       applyInPandasWithState, transformWithState(InPandas), pandas UDFs;
    2. `taskstate.app` (`spark.taskstate.app` on a Connect session): set by
       `taskstate.spark_plugin.configure` (the application id), which covers RDD tasks
       (`df.rdd.mapPartitions`, `foreachPartition`) of its jobs;
    3. a streaming query's run id (`spark.jobGroup.id` beside `sql.streaming.queryId`):
       new on each start of the query;
    4. the executor's `SPARK_LOCAL_DIRS`, which Spark gives every Python worker: a
       directory private to this executor of this application;
    5. outside all of these, this process (the attempt's blocks then share a claim only
       within one process).
    """

    def prop(key: str) -> str | None:
        value = ctx.getLocalProperty(key)
        return str(value) if value else None

    found = prop(APP_ID_PROPERTY) or prop(APP_OVERRIDE) or prop(APP_CONF)
    if found is None and prop(QUERY_ID_PROPERTY):
        found = prop(JOB_GROUP_PROPERTY)
    if found is None and os.environ.get("SPARK_LOCAL_DIRS"):
        found = "dirs-" + _digest(os.environ["SPARK_LOCAL_DIRS"])
    if found is None:
        return _PROCESS_SCOPE
    return _scope_name(found)


@functools.lru_cache(maxsize=64)
def _scope_name(found: str) -> str:
    """`found` as a scope: itself when it is a valid name, else a digest of it."""
    return found if ids.name_problem("scope", found) is None else "h-" + _digest(found)


@functools.lru_cache(maxsize=64)
def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:24]
