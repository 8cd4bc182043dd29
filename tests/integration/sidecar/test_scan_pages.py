"""Scanner.flat_pages: HSCAN's reply as Redis sends it, without redis-py's dict.

The command goes as bytes so that redis-py's reply callback (keyed by the str name) leaves
the reply alone; this holds redis-py to that, so an upgrade that changes it fails here,
not in a read that would then yield a dict.
"""

from __future__ import annotations

import asyncio

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
