"""The taskstate sidecar: a gRPC server beside each executor that talks to Redis.

Run it with `taskstate sidecar --redis-url URL --listen unix:///PATH` or
`python -m taskstate.sidecar ...`.
"""

from .server import Sidecar, SidecarConfig

__all__ = ["Sidecar", "SidecarConfig"]
