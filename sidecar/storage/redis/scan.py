"""Paging through a hash with HSCAN, on one server.

An HSCAN cursor means something only to the server that issued it: after a failover, a
restart or a slot migration, another server answers and the cursor is meaningless there.
`hscan_pages` raises `ServerChanged` then; a restore starts again (fields sent twice are
identical, the epoch fences writers), a consistent read refuses with CHANGED.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

# (key, cursor, count, match) -> (run id of the answering server, next cursor, fields)
ScanPage = Callable[[str, int, int, str | None], Awaitable[tuple[str, int, dict[Any, Any]]]]
# (what, the call) -> its result, with the backend's retries
Run = Callable[[str, Callable[[], Awaitable[Any]]], Awaitable[Any]]


class ServerChangedError(Exception):
    """Another server answered a page than the one that answered the scan so far."""


async def hscan_pages(
    run: Run, scan_page: ScanPage, key: str, count: int, match: str | None, what: str
) -> AsyncIterator[dict[Any, Any]]:
    """Yield the non-empty HSCAN pages of `key` (at most about `count` fields each)."""
    server = None
    cursor = 0
    while True:
        cur = cursor

        async def page(cur: int = cur) -> tuple[str, int, dict[Any, Any]]:
            return await scan_page(key, cur, count, match)

        served_by, cursor, items = await run(what, page)
        if server is not None and served_by != server:
            raise ServerChangedError(key)
        server = served_by
        if items:
            yield items
        if cursor == 0:
            return
