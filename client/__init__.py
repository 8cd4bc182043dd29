"""What a Spark task imports: `TaskState`, its config, `LocalContext` and the errors.

from taskstate.client import TaskState

with TaskState(TaskContext.get(), component="hashtag-ewma") as s:
s["#spark"] = {"rate": 1.7, "last": 12}
"""

from ._config import DEFAULT_SIDECAR, DurabilitySpec, TaskStateConfig
from ._context import LocalContext
from ._errors import (
    CodecError,
    ConfigError,
    CorruptStateError,
    DurabilityError,
    FencedError,
    InvalidRequestError,
    LimitError,
    SidecarUnavailableError,
    StateAheadError,
    StorageUnavailableError,
    TaskStateError,
)
from ._state import OpenInfo, Phase, TaskState

__all__ = [
    "DEFAULT_SIDECAR",
    "CodecError",
    "ConfigError",
    "CorruptStateError",
    "DurabilitySpec",
    "DurabilityError",
    "FencedError",
    "InvalidRequestError",
    "LimitError",
    "LocalContext",
    "OpenInfo",
    "Phase",
    "SidecarUnavailableError",
    "StateAheadError",
    "StorageUnavailableError",
    "TaskState",
    "TaskStateConfig",
    "TaskStateError",
]
