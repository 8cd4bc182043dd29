"""A restore that pages with HSCAN starts again when another server answers mid-scan."""

from __future__ import annotations

import asyncio
from typing import Any
from unittest.mock import AsyncMock, MagicMock

import pytest

from taskstate.sidecar.errors import SidecarError
from taskstate.sidecar.storage.redis.backend import RedisBackend
from taskstate.sidecar.storage.values import TaskKey


async def _collect(st: RedisBackend) -> list[list[str | bytes]]:
    return [list(c) async for c in st.tasks.restore(TaskKey("ns", "c", 0), 1, 100)]


def _storage(pages: list[tuple[str, int, list[bytes]]], calls: list[int]) -> Any:
    st = RedisBackend("redis://127.0.0.1:1/0")
    st.conn.client = MagicMock(hlen=AsyncMock(return_value=1_000_000))
    st.tasks._check_epoch = AsyncMock()  # type: ignore[method-assign]
    it = iter(pages)

    async def scan(
        key: str, cursor: int, count: int, match: str | None = None, *, flat: bool = False
    ) -> tuple[str, int, list[bytes]]:
        assert match is None and flat  # a restore reads every field, as Redis sends them
        calls.append(cursor)
        return next(it)

    st.tasks._scanner.page = scan  # type: ignore[method-assign]
    return st


def test_server_change_mid_scan_restarts_from_cursor_zero() -> None:
    calls: list[int] = []
    st = _storage(
        [
            ("server-A", 5, [b"a", b"1"]),
            ("server-B", 7, [b"x", b"9"]),  # a failover: this cursor means nothing
            ("server-B", 3, [b"a", b"1"]),
            ("server-B", 0, [b"b", b"2"]),
        ],
        calls,
    )
    chunks = asyncio.run(_collect(st))
    assert calls == [0, 5, 0, 3]
    assert chunks == [[b"a", b"1"], [b"a", b"1"], [b"b", b"2"]]


def test_a_server_that_keeps_changing_fails_the_restore_clearly() -> None:
    pages = [(f"server-{i}", 1, [b"a", b"1"]) for i in range(20)]
    st = _storage(pages, [])
    with pytest.raises(SidecarError, match="changed 5 times during one restore"):
        asyncio.run(_collect(st))
