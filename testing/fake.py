"""An in-process sidecar with in-memory storage and fault injection, for unit tests.

    with FakeSidecar() as fake:
        with TaskState(LocalContext(0, batch_id=1), component="c", namespace="t",
                       sidecar=fake.target) as s:
            ...
        fake.storage.fail_next("commit", SidecarError(codes.FENCED, "..."))

It runs the real gRPC service (the same validation and error translation) on a
temporary Unix socket in a background thread; no Redis and no other process.
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
from concurrent.futures import Future
from pathlib import Path

from taskstate.sidecar.config import SidecarConfig
from taskstate.sidecar.server import Sidecar
from taskstate.sidecar.storage.memory.backend import MemoryBackend


class FakeSidecar:
    """The sidecar's gRPC service over MemoryBackend, in a thread of this process."""

    def __init__(self, *, max_message_bytes: int = 64 << 20) -> None:
        self.storage = MemoryBackend()
        self._dir = tempfile.TemporaryDirectory(prefix="taskstate-fake-")
        self.socket = Path(self._dir.name) / "sidecar.sock"
        self.config = SidecarConfig(
            redis_url="memory://",
            listen=(f"unix://{self.socket}",),
            max_message_bytes=max_message_bytes,
            drain_seconds=1.0,
        )
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._sidecar: Sidecar | None = None

    @property
    def target(self) -> str:
        """The address to pass as `sidecar=`."""
        return f"unix://{self.socket}"

    def start(self) -> FakeSidecar:
        """Start serving."""
        self._thread.start()

        async def boot() -> None:
            self._sidecar = Sidecar(self.config, storage=self.storage)
            await self._sidecar.start()

        fut: Future[None] = asyncio.run_coroutine_threadsafe(boot(), self._loop)
        fut.result(timeout=10)
        return self

    def stop(self) -> None:
        """Stop serving and clean up."""
        if self._sidecar is not None:
            asyncio.run_coroutine_threadsafe(self._sidecar.stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._dir.cleanup()

    def __enter__(self) -> FakeSidecar:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
