"""The errors task code sees. One root, stable codes, picklable (positional args only).

Every message says what happened, to which task, and what the operator does next.
"""

from __future__ import annotations

from taskstate.proto import codes


class TaskStateError(Exception):
    """Root of every taskstate error. `code` is stable; `task` is `ns/component/partition`."""

    code: str = codes.INTERNAL

    def __init__(self, message: str, task: str | None = None) -> None:
        super().__init__(message, task)
        self.message = message
        self.task = task

    def __str__(self) -> str:
        return self.message


class ConfigError(TaskStateError, ValueError):
    """A bad argument or setting; raised before anything is sent or stored.

    A bad component, namespace, mode, durability, codec or sidecar address; no namespace;
    no task context; a task of a streaming query without a micro-batch id (a Spark Connect
    foreachBatch function not wrapped with `with_batch_id`); a feature the running Spark
    lacks (`SparkVersionError`).
    """

    code = codes.CONFIG


class InvalidRequestError(TaskStateError, ValueError):
    """A malformed request, refused by the sidecar or, before sending, by the client.

    An id, batch or epoch out of range, an empty encoded value, a client and sidecar that
    disagree on the wire format; a data-source write whose `value` is not JSON text or
    whose `key` is null.
    """

    code = codes.INVALID_ARGUMENT


class CodecError(TaskStateError, ValueError):
    """A key or value the codec cannot encode, or stored bytes it cannot decode.

    A key that is not `str`, or a value JSON cannot hold (NaN, infinity, an object) is
    refused at the assignment, before anything is sent. Stored bytes that are not JSON
    are refused by the read of that key (by the restore, for code of schema version 2 and
    later, which upgrades what it restores).
    """

    code = codes.CODEC


class LimitError(TaskStateError, ValueError):
    """A request over a size limit; the message names the limit and its setting."""

    code = codes.LIMIT


class FencedError(TaskStateError):
    """A newer attempt claimed the task; this attempt's commit was not written.

    The normal end of a zombie attempt (Spark retried the task elsewhere): the newer
    attempt owns the state. A few after an executor loss are expected.
    """

    code = codes.FENCED


class StateAheadError(TaskStateError):
    """The stored state is at a later batch than the one Spark runs; nothing changed.

    The query's checkpoint was reset or replaced while its taskstate namespace was kept.
    """

    code = codes.STATE_AHEAD


class DurabilityError(TaskStateError):
    """The requested durability is impossible, or was not reached in time.

    For example `durability="replicated:2"` against a Redis with fewer replicas; the
    commit may have been applied on the primary.
    """

    code = codes.DURABILITY


class CorruptStateError(TaskStateError):
    """Stored metadata that taskstate did not write; nothing changed."""

    code = codes.CORRUPT_STATE


class StateLostError(TaskStateError):
    """Redis lost part or all of a task's state; the task refuses to start over silently.

    Evicted, deleted, flushed, a restart without persistence, a failover to a replica that
    missed commits. Nothing is changed. A streaming query that adds taskstate past its
    batch 0 gets it too, until `taskstate adopt NAMESPACE`.
    """

    code = codes.STATE_LOST


class PartitionCountError(TaskStateError):
    """A component run under another partition count than its state's; nothing changed.

    Also a partition outside the count, or a run while `taskstate rescale` moves the
    component's keys. Stop the query and run `taskstate rescale NS/COMPONENT --to N`.
    """

    code = codes.PARTITIONS


class SidecarUnavailableError(TaskStateError, ConnectionError):
    """The sidecar did not answer within the retry deadline (`TASKSTATE_RETRY_DEADLINE`)."""

    code = codes.SIDECAR_UNAVAILABLE


class StorageUnavailableError(TaskStateError, ConnectionError):
    """The sidecar is up but Redis is not, or Redis lost the attempt's claim.

    Redis did not answer within the sidecar's deadline, or a failover lost the attempt's
    claim (its epoch is behind the attempt's): a new attempt opens again.
    """

    code = codes.STORAGE_UNAVAILABLE


class NotFoundError(TaskStateError, LookupError):
    """The task has no stored state, or a read asked for changes the change log lost.

    `taskstate show` and AdminClient on a task without state; a data source read whose
    `changesSinceBatch` is older than the change log keeps.
    """

    code = codes.NOT_FOUND


class AlreadyExistsError(TaskStateError):
    """`taskstate import` onto a task that has state: drop it first, or pass `--replace`."""

    code = codes.ALREADY_EXISTS


class StateChangedError(TaskStateError):
    """The state changed under a call that needs it still; try again.

    A read without a claim (`taskstate show`, `export`, `AdminClient.read`, the data
    source) kept meeting commits mid-read; or a rescale or data-source write was refused
    because a task of the component was opened or written within its quiet period.
    """

    code = codes.CHANGED


class PermissionDeniedError(TaskStateError, PermissionError):
    """The caller's token does not grant the task's namespace.

    Only where the sidecar runs with `--tokens-file` (see the security how-to).
    """

    code = codes.PERMISSION_DENIED


class UnauthenticatedError(PermissionDeniedError):
    """The sidecar requires a token and the call carried none it knows.

    Set `TASKSTATE_TOKEN_FILE` or `TASKSTATE_TOKEN` where the tasks run. (A subclass of
    PermissionDeniedError.)
    """

    code = codes.UNAUTHENTICATED


class SchemaVersionError(TaskStateError, ValueError):
    """A stored value of a schema version this code cannot read; nothing was written.

    Newer than the block's `version=`, or older with no `upgrade` step to it
    (`TaskState(..., version=N, upgrade={...})`).
    """

    code = codes.SCHEMA_VERSION


ERROR_BY_CODE: dict[str, type[TaskStateError]] = {
    cls.code: cls
    for cls in (
        ConfigError,
        InvalidRequestError,
        CodecError,
        LimitError,
        FencedError,
        StateAheadError,
        DurabilityError,
        CorruptStateError,
        StateLostError,
        PartitionCountError,
        SidecarUnavailableError,
        StorageUnavailableError,
        NotFoundError,
        AlreadyExistsError,
        StateChangedError,
        SchemaVersionError,
        PermissionDeniedError,
        UnauthenticatedError,
        TaskStateError,
    )
}
