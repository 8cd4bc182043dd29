"""Who is running: the task identity from a Spark TaskContext or a LocalContext."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Protocol

from ._errors import ConfigError

BATCH_ID_PROPERTY = "streaming.sql.batchId"
BATCH_ID_OVERRIDE = "taskstate.batchId"  # set by spark_plugin.with_batch_id (foreachBatch)
NAMESPACE_PROPERTY = "taskstate.namespace"
SIDECAR_PROPERTY = "taskstate.sidecar"

_local_attempts = itertools.count(-1, -1)  # negative: never collides with Spark's ids


class ContextLike(Protocol):
    """What TaskState needs of a context: PySpark's TaskContext has all of it."""

    def partitionId(self) -> int: ...  # noqa: D102, N802
    def attemptNumber(self) -> int: ...  # noqa: D102, N802
    def taskAttemptId(self) -> int: ...  # noqa: D102, N802
    def getLocalProperty(self, key: str) -> str | None: ...  # noqa: D102, N802


@dataclass
class LocalContext:
    """A stand-in for `pyspark.TaskContext` outside Spark (tests, scripts, notebooks).

    Each LocalContext is one task attempt: `with TaskState(ctx, ...)` blocks that share
    one LocalContext share one claim, like the group-scoped blocks of one Spark task;
    a new LocalContext is a new attempt and claims the task again.

    Args:
        partition_id: the task's partition (its stable index).
        batch_id: the micro-batch id, or None for a batch (non-streaming) job.
        attempt: the attempt number, recorded for operators.
        properties: extra Spark local properties (e.g. `taskstate.namespace`).
    """

    partition_id: int
    batch_id: int | None = None
    attempt: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    _attempt_id: int = field(default_factory=lambda: next(_local_attempts), repr=False)

    def partitionId(self) -> int:  # noqa: N802 - TaskContext's name
        """The partition id."""
        return self.partition_id

    def attemptNumber(self) -> int:  # noqa: N802
        """The attempt number."""
        return self.attempt

    def taskAttemptId(self) -> int:  # noqa: N802
        """A process-unique id of this attempt."""
        return self._attempt_id

    def getLocalProperty(self, key: str) -> str | None:  # noqa: N802
        """Spark local properties; the batch id under `streaming.sql.batchId`."""
        if key == BATCH_ID_OVERRIDE:
            return self.properties.get(key)
        if key == BATCH_ID_PROPERTY:
            return None if self.batch_id is None else str(self.batch_id)
        return self.properties.get(key)


@dataclass(frozen=True, slots=True)
class TaskIdentity:
    """The parts of a context TaskState uses."""

    partition: int
    batch: int | None
    attempt: int
    attempt_id: int

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


def identity(ctx: Any) -> TaskIdentity:
    """Read partition, batch id and attempt from a TaskContext-like object."""
    try:
        partition = int(ctx.partitionId())
        attempt = int(ctx.attemptNumber())
        attempt_id = int(ctx.taskAttemptId())
        raw_batch = ctx.getLocalProperty(BATCH_ID_OVERRIDE) or ctx.getLocalProperty(
            BATCH_ID_PROPERTY
        )
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
            raise ConfigError(
                f"local property {BATCH_ID_PROPERTY}={raw_batch!r} is not an integer"
            ) from exc
    return TaskIdentity(partition, batch, attempt, attempt_id)
