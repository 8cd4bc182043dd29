"""Helpers to test jobs that use taskstate.

- `FakeSidecar`: the sidecar's gRPC service and its real commit protocol, in-process,
  over a private redis-server it starts (or a Redis you name), with fault injection
  (`fake.storage.fail_next(op, exc)`) and `fake.client()` to look at what is stored.
- `RedisServer`, `SidecarProcess`: a real redis-server and the real sidecar on
  temporary Unix sockets, each killable (`kill()` sends SIGKILL). A sidecar started with
  `extra=["--metrics-port", "0"]` reads its own metrics: `side.metrics()`.
- `worker`: what a test may see of the worker process it runs in (the version of a task
  it holds, changes held for the plugin's flush; `forget_cached_state()` to start as a
  fresh Python worker).
"""

from .fake import FakeSidecar
from .processes import RedisServer, SidecarProcess, find_redis_server

__all__ = ["FakeSidecar", "RedisServer", "SidecarProcess", "find_redis_server"]
