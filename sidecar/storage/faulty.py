"""A Backend that fails on request: fault injection as a wrapper, like metered.py.

`FaultyBackend(inner).fail_next("commit", exc)` makes the next call of a store method of
that name (`open`, `commit`, `restore`, `get`, `changes_since`, an admin or seed call)
raise `exc`; everything else is the inner backend's own. `taskstate.testing.FakeSidecar`
serves one over the Redis store, so that tests inject faults into the real protocol.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

from .base import AdminStore, Backend, SeedStore, TaskStore


class _Faulty:
    """`inner`'s methods, each raising first the fault armed for its name, if any."""

    def __init__(self, inner: object, armed: dict[str, BaseException]) -> None:
        self._inner = inner
        self._armed = armed

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr
        armed = self._armed

        def strike() -> None:
            exc = armed.pop(name, None)
            if exc is not None:
                raise exc

        if inspect.iscoroutinefunction(attr):

            async def call(*args: Any, **kwargs: Any) -> Any:
                strike()
                return await cast(Callable[..., Any], attr)(*args, **kwargs)

            return call

        if inspect.isasyncgenfunction(attr):

            async def stream(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
                strike()
                async for item in attr(*args, **kwargs):
                    yield item

            return stream

        def plain(*args: Any, **kwargs: Any) -> Any:  # one that returns an async iterator
            strike()
            return attr(*args, **kwargs)

        return plain


class FaultyBackend:
    """`inner`, whose next call of a given method can be made to raise."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self._armed: dict[str, BaseException] = {}
        self._tasks = _Faulty(inner.tasks, self._armed)
        self._admin = _Faulty(inner.admin, self._armed)
        self._seeds = _Faulty(inner.seeds, self._armed)

    def fail_next(self, op: str, exc: BaseException) -> None:
        """Make the next call of the store method named `op` raise `exc`."""
        self._armed[op] = exc

    @property
    def tasks(self) -> TaskStore:
        """The task protocol."""
        return cast(TaskStore, self._tasks)

    @property
    def admin(self) -> AdminStore:
        """The operators' calls."""
        return cast(AdminStore, self._admin)

    @property
    def seeds(self) -> SeedStore:
        """Writes of the data source."""
        return cast(SeedStore, self._seeds)

    async def ping(self) -> None:
        """The inner backend's."""
        await self.inner.ping()

    async def close(self) -> None:
        """The inner backend's."""
        await self.inner.close()
