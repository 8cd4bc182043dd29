"""The taskstate sidecar: a gRPC server beside each executor that talks to Redis.

Run it with `taskstate sidecar --redis-url URL --listen unix:///PATH` or
`python -m taskstate.sidecar ...`.

`Sidecar` and `SidecarConfig` are imported on first use: a Python worker that only needs
`storage.redis.keys` (the jobs' state readers) does not load the server, grpc.aio and
redis-py's asyncio client (about 0.1 s of a new worker's start).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import SidecarConfig
    from .server import Sidecar

__all__ = ["Sidecar", "SidecarConfig"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import server

        return getattr(server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
