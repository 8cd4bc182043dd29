"""The in-memory backend: one `MemoryState`, and over it the task store and admin.

As redis/backend.py composes them over one connection.
"""

from __future__ import annotations

from .admin import MemoryAdmin
from .seed import MemorySeeder
from .store import MemoryState, MemoryTaskStore


class MemoryBackend:
    """Task state in process memory (unit tests, `taskstate.testing.FakeSidecar`)."""

    def __init__(self) -> None:
        self.state = MemoryState()
        self._tasks = MemoryTaskStore(self.state)
        self._admin = MemoryAdmin(self.state, self._tasks)
        self._seeds = MemorySeeder(self.state)

    @property
    def tasks(self) -> MemoryTaskStore:
        """The task protocol."""
        return self._tasks

    @property
    def admin(self) -> MemoryAdmin:
        """The operators' calls."""
        return self._admin

    @property
    def seeds(self) -> MemorySeeder:
        """Writes of the data source."""
        return self._seeds

    def fail_next(self, op: str, exc: BaseException) -> None:
        """Make the next call of `op` (open, commit, restore, get, changes) raise `exc`."""
        self.state.fail_next(op, exc)

    async def ping(self) -> None:
        """Always reachable."""

    async def close(self) -> None:
        """Nothing to release."""
