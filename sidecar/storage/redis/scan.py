"""Paging through a hash with HSCAN, on one server.

An HSCAN cursor means something only to the server that issued it: after a failover, a
restart or a slot migration, another server answers and the cursor is meaningless there.
`Scanner.pages` raises `ServerChangedError` then; a restore starts again (fields sent
twice are identical, the epoch fences writers), a consistent read refuses with CHANGED.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from .routing import Connection


class ServerChangedError(Exception):
    """Another server answered a page than the one that answered the scan so far."""


class Scanner:
    """HSCAN pages of one connection, each with the run id of the server that answered."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    async def page(
        self, key: str, cursor: int, count: int, match: str | None = None
    ) -> tuple[str, int, dict[Any, Any]]:
        """One HSCAN page: (run id of the answering server, next cursor, fields)."""
        scan: tuple[Any, ...] = ("HSCAN", key, cursor, "COUNT", count)
        if match is not None:
            scan += ("MATCH", match)
        _, replies = await self._conn.send(key, [scan, ("INFO", "server")])
        for r in replies:
            if isinstance(r, Exception):
                raise r
        (next_cursor, items), info = replies
        return str(info.get("run_id", "")), int(next_cursor), items

    async def flat_pages(
        self, key: str, count: int, match: str | None, what: str
    ) -> AsyncIterator[list[bytes]]:
        """`pages`, each as Redis sends it: [field1, value1, field2, ...] (no dict built).

        The command goes as bytes (b"HSCAN"), which redis-py's reply callbacks (keyed by
        str) do not match: the reply stays the list Redis sent (tests/integration/
        sidecar/test_scan_pages.py holds redis-py to that). A cluster's pages come through
        `pages`.
        """
        if self._conn.kind == "cluster":
            async for items in self.pages(key, count, match, what):
                yield [x for kv in items.items() for x in kv]
            return
        server = None
        cursor = 0
        while True:
            scan: tuple[Any, ...] = (b"HSCAN", key, cursor, "COUNT", count)
            if match is not None:
                scan += ("MATCH", match)

            async def page(scan: tuple[Any, ...] = scan) -> list[Any]:
                return (await self._conn.send(key, [scan, ("INFO", "server")]))[1]

            replies = await self._conn.run(what, page)
            for r in replies:
                if isinstance(r, Exception):
                    raise r
            (next_cursor, flat), info = replies
            served_by = str(info.get("run_id", ""))
            if server is not None and served_by != server:
                raise ServerChangedError(key)
            server = served_by
            cursor = int(next_cursor)
            if flat:
                yield flat
            if cursor == 0:
                return

    async def pages(
        self, key: str, count: int, match: str | None, what: str
    ) -> AsyncIterator[dict[Any, Any]]:
        """Yield the non-empty HSCAN pages of `key` (at most about `count` fields each)."""
        server = None
        cursor = 0
        while True:
            cur = cursor

            async def page(cur: int = cur) -> tuple[str, int, dict[Any, Any]]:
                return await self.page(key, cur, count, match)

            served_by, cursor, items = await self._conn.run(what, page)
            if server is not None and served_by != server:
                raise ServerChangedError(key)
            server = served_by
            if items:
                yield items
            if cursor == 0:
                return
