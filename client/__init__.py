"""What a Spark task imports: `TaskState`, its config, `LocalContext` and the errors.

from taskstate.client import TaskState

    with TaskState(TaskContext.get(), component="hashtag-ewma") as s:
        s["#spark"] = {"rate": 1.7, "last": 12}
"""

from ._block import Phase
from ._config import DurabilitySpec, TaskStateConfig
from ._context import LocalContext
from ._errors import (
    AlreadyExistsError,
    CodecError,
    ConfigError,
    CorruptStateError,
    DurabilityError,
    FencedError,
    InvalidRequestError,
    LimitError,
    NotFoundError,
    PartitionCountError,
    PermissionDeniedError,
    SchemaVersionError,
    SidecarUnavailableError,
    StateAheadError,
    StateChangedError,
    StateLostError,
    StorageUnavailableError,
    TaskStateError,
    UnauthenticatedError,
)
from ._session import OpenInfo
from ._state import TaskState
from .address import DEFAULT_SIDECAR

__all__ = [
    "DEFAULT_SIDECAR",
    "AlreadyExistsError",
    "CodecError",
    "ConfigError",
    "CorruptStateError",
    "DurabilitySpec",
    "DurabilityError",
    "FencedError",
    "InvalidRequestError",
    "LimitError",
    "LocalContext",
    "NotFoundError",
    "PartitionCountError",
    "OpenInfo",
    "PermissionDeniedError",
    "Phase",
    "SchemaVersionError",
    "SidecarUnavailableError",
    "StateAheadError",
    "StateChangedError",
    "StateLostError",
    "StorageUnavailableError",
    "TaskState",
    "TaskStateConfig",
    "TaskStateError",
    "UnauthenticatedError",
]
