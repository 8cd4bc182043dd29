"""Stable error codes carried in the gRPC trailing metadata key `taskstate-code`.

The sidecar aborts with a gRPC status plus one of these codes; the client maps the code
to a `TaskStateError` subclass. Codes never change meaning once released.
"""

from __future__ import annotations

METADATA_KEY = "taskstate-code"

CONFIG = "CONFIG"
INVALID_ARGUMENT = "INVALID_ARGUMENT"
FENCED = "FENCED"
STATE_AHEAD = "STATE_AHEAD"
SIDECAR_UNAVAILABLE = "SIDECAR_UNAVAILABLE"
STORAGE_UNAVAILABLE = "STORAGE_UNAVAILABLE"
CODEC = "CODEC"
DURABILITY = "DURABILITY"
LIMIT = "LIMIT"
CORRUPT_STATE = "CORRUPT_STATE"
STATE_LOST = "STATE_LOST"  # Redis lost state that taskstate wrote (evicted, flushed, ...)
PARTITIONS = "PARTITIONS"  # the partition count changed (taskstate rescale), or one is under way
INTERNAL = "INTERNAL"
# operator commands (taskstate show/export/import)
NOT_FOUND = "NOT_FOUND"
ALREADY_EXISTS = "ALREADY_EXISTS"
CHANGED = "CHANGED"  # the state kept changing while it was read; read again
# a stored value of a schema version the reading code cannot read (TaskState(version=...))
SCHEMA_VERSION = "SCHEMA_VERSION"
# tokens (sidecar --tokens-file)
UNAUTHENTICATED = "UNAUTHENTICATED"
PERMISSION_DENIED = "PERMISSION_DENIED"

ALL = frozenset(
    {
        CONFIG,
        INVALID_ARGUMENT,
        FENCED,
        STATE_AHEAD,
        SIDECAR_UNAVAILABLE,
        STORAGE_UNAVAILABLE,
        CODEC,
        DURABILITY,
        LIMIT,
        CORRUPT_STATE,
        STATE_LOST,
        PARTITIONS,
        INTERNAL,
        NOT_FOUND,
        ALREADY_EXISTS,
        CHANGED,
        SCHEMA_VERSION,
        UNAUTHENTICATED,
        PERMISSION_DENIED,
    }
)
