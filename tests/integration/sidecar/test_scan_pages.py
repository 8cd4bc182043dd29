"""Scanner.flat_pages: HSCAN's reply as Redis sends it, without redis-py's dict.

The command goes as bytes so that redis-py's reply callback (keyed by the str name) leaves
the reply alone; this holds redis-py to that, so an upgrade that changes it fails here,
not in a read that would then yield a dict.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from taskstate.sidecar.retry import RetryPolicy
from taskstate.sidecar.storage.redis.connect import RedisSettings
from taskstate.sidecar.storage.redis.routing import Connection
from taskstate.sidecar.storage.redis.scan import Scanner
from taskstate.testing import RedisServer

pytestmark = pytest.mark.integration


def test_flat_pages_are_the_same_fields_as_pages_without_a_dict(
    redis_server: RedisServer, namespace: str
) -> None:
    key = f"{namespace}:h"
    want = {f"k{i}".encode(): f"v{i}".encode() for i in range(5000)}
    redis_server.client().hset(key, mapping=want)

    async def run() -> tuple[list[list[bytes]], dict[bytes, bytes]]:
        conn = Connection(RedisSettings(url=redis_server.url), RetryPolicy(), 10.0)
        try:
            scanner = Scanner(conn)
            flat = [page async for page in scanner.flat_pages(key, 1000, None, "read")]
            as_dict: dict[bytes, bytes] = {}
            async for page in scanner.pages(key, 1000, None, "read"):
                as_dict.update(page)
            return flat, as_dict
        finally:
            await conn.close()

    flat, as_dict = asyncio.run(run())
    assert all(isinstance(page, list) and len(page) % 2 == 0 for page in flat)
    got = {k: v for page in flat for k, v in zip(page[0::2], page[1::2], strict=True)}
    assert got == want == as_dict


def test_flat_pages_ask_for_the_next_page_while_the_caller_holds_one(
    redis_server: RedisServer, namespace: str
) -> None:
    key = f"{namespace}:ahead"
    redis_server.client().hset(key, mapping={f"k{i}": "v" for i in range(5000)})
    r = redis_server.client()

    def hscans() -> int:
        return int(r.info("commandstats").get("cmdstat_hscan", {}).get("calls", 0))

    async def run() -> tuple[int, int, set[asyncio.Task[Any]], int]:
        conn = Connection(RedisSettings(url=redis_server.url), RetryPolicy(), 10.0)
        try:
            scanner = Scanner(conn)
            before = hscans()
            pages = scanner.flat_pages(key, 500, None, "read")
            await anext(pages)  # the first page; the second is asked for meanwhile
            for _ in range(40):  # until Redis has seen it (a loaded machine is slow to)
                await asyncio.sleep(0.05)
                if hscans() - before >= 2:
                    break
            await asyncio.sleep(0.2)  # and no third one follows
            asked = hscans() - before
            await pages.aclose()  # the caller stops: the page in flight is cancelled
            await asyncio.sleep(0.05)
            left = asyncio.all_tasks() - {asyncio.current_task()}
            after = hscans()
            await asyncio.sleep(0.2)
            stray = hscans() - after
            again = sum([len(p) // 2 async for p in scanner.flat_pages(key, 500, None, "read")])
            return asked, stray, left, again
        finally:
            await conn.close()

    asked, stray, left, again = asyncio.run(run())
    assert asked == 2, f"flat_pages asked for {asked} pages while the caller held the first"
    # a caller that stops early: nothing more is asked, and the connection still serves
    assert stray == 0 and not left, f"a stopped scan left {left} running"
    assert again == 5000


def test_the_next_page_is_asked_for_before_the_caller_gets_this_one(
    redis_server: RedisServer, namespace: str
) -> None:
    """The ask for page 2 is on its way to Redis when the caller gets page 1, before the
    caller's handling of it lets the loop run (a restore packs and sends the page first)."""
    key = f"{namespace}:early"
    redis_server.client().hset(key, mapping={f"k{i}": "v" for i in range(5000)})
    r = redis_server.client()

    def hscans() -> int:
        return int(r.info("commandstats").get("cmdstat_hscan", {}).get("calls", 0))

    async def run() -> int:
        conn = Connection(RedisSettings(url=redis_server.url), RetryPolicy(), 10.0)
        try:
            before = hscans()
            pages = Scanner(conn).flat_pages(key, 500, None, "read")
            await anext(pages)
            # the loop does not run while this waits: only what was sent already counts
            for _ in range(40):  # until Redis has seen it (a loaded machine is slow to)
                time.sleep(0.05)
                if hscans() - before >= 2:
                    break
            asked = hscans() - before
            await pages.aclose()
            return asked
        finally:
            await conn.close()

    asked = asyncio.run(run())
    assert asked == 2, f"{asked} HSCAN(s) had reached Redis when the caller got page 1"


def test_both_page_forms_name_the_server_that_answered(
    redis_server: RedisServer, namespace: str
) -> None:
    """The run id that tells a failover mid-scan: flat pages find it in INFO's text as Redis
    sends it (no dict parsed), dict pages in redis-py's dict; both are the server's."""
    key = f"{namespace}:rid"
    redis_server.client().hset(key, mapping={"a": "1"})
    want = str(redis_server.client().info("server")["run_id"])

    async def run() -> tuple[str, str]:
        conn = Connection(RedisSettings(url=redis_server.url), RetryPolicy(), 10.0)
        try:
            scanner = Scanner(conn)
            flat = await scanner.page(key, 0, 100, flat=True)
            plain = await scanner.page(key, 0, 100)
            return flat[0], plain[0]
        finally:
            await conn.close()

    flat, plain = asyncio.run(run())
    assert len(want) == 40 and flat == want and plain == want
