"""The errors task code sees. One root, stable codes, picklable (positional args only).

Every message says what happened, to which task, and what the operator does next.
"""

from __future__ import annotations

from taskstate.proto import codes


class TaskStateError(Exception):
    """Root of every taskstate error. `code` is stable; `task` is the fq task id or None."""

    code: str = codes.INTERNAL

    def __init__(self, message: str, task: str | None = None) -> None:
        super().__init__(message, task)
        self.message = message
        self.task = task

    def __str__(self) -> str:
        return self.message


class ConfigError(TaskStateError, ValueError):
    """A bad argument or setting (task id, mode, durability, codec, sidecar address)."""

    code = codes.CONFIG


class InvalidRequestError(TaskStateError, ValueError):
    """The sidecar refused a request as malformed."""

    code = codes.INVALID_ARGUMENT


class CodecError(TaskStateError, ValueError):
    """A key or value the codec cannot encode, or stored bytes it cannot decode."""

    code = codes.CODEC


class LimitError(TaskStateError, ValueError):
    """A request over a size limit; the message names the limit and its setting."""

    code = codes.LIMIT


class FencedError(TaskStateError):
    """A newer attempt claimed the task; this attempt's commit was not written."""

    code = codes.FENCED


class StateAheadError(TaskStateError):
    """The stored state is at a later batch than the one Spark runs (checkpoint reset)."""

    code = codes.STATE_AHEAD


class DurabilityError(TaskStateError):
    """The requested durability is impossible, or was not reached in time."""

    code = codes.DURABILITY


class CorruptStateError(TaskStateError):
    """Stored data that taskstate did not write."""

    code = codes.CORRUPT_STATE


class StateLostError(TaskStateError):
    """Redis lost state that taskstate wrote; the task refuses to start over silently.

    Evicted, deleted, flushed, a restart without persistence, a failover.
    """

    code = codes.STATE_LOST


class PartitionCountError(TaskStateError):
    """A component run under another partition count than its state's; nothing changed.

    Also while `taskstate rescale` moves the component's keys.
    """

    code = codes.PARTITIONS


class SidecarUnavailableError(TaskStateError, ConnectionError):
    """The sidecar could not be reached within the deadline."""

    code = codes.SIDECAR_UNAVAILABLE


class StorageUnavailableError(TaskStateError, ConnectionError):
    """The sidecar is up but Redis did not answer within its deadline."""

    code = codes.STORAGE_UNAVAILABLE


class NotFoundError(TaskStateError, LookupError):
    """The task has no stored state (operator commands)."""

    code = codes.NOT_FOUND


class AlreadyExistsError(TaskStateError):
    """An import onto a task that has state (drop it first, or replace it)."""

    code = codes.ALREADY_EXISTS


class StateChangedError(TaskStateError):
    """The state changed while it was read without a claim; read it again."""

    code = codes.CHANGED


class PermissionDeniedError(TaskStateError, PermissionError):
    """The sidecar's tokens do not let this caller touch that namespace."""

    code = codes.PERMISSION_DENIED


class UnauthenticatedError(PermissionDeniedError):
    """The sidecar requires a token and the call had none it knows."""

    code = codes.UNAUTHENTICATED


class SchemaVersionError(TaskStateError, ValueError):
    """A stored value of a schema version this code cannot read.

    Newer than its `version`, or older with no upgrade step for it
    (TaskState(version=N, upgrade={...})).
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
