"""The sidecar's direct line to Redis (storage/redis/direct.py), against a real redis-server.

Replies are matched to commands by their order alone, so these tests break the order on
purpose: many callers at once, error replies among them, a caller abandoned while Redis
holds its command, Redis killed under a waiting caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
import redis.exceptions as rex

from taskstate.sidecar.storage.redis.connect import pack
from taskstate.sidecar.storage.redis.direct import DirectLine
from taskstate.testing import RedisServer

from ..waiting import eventually_async

pytestmark = pytest.mark.integration


@contextlib.asynccontextmanager
async def line_to(r: RedisServer) -> AsyncIterator[DirectLine]:
    """A direct line on a RESP3 client of `r` (redis-py 8's default protocol)."""
    # redis-py's disconnect waits for the close at most its connect timeout: longer than
    # any test's deadline, so a close never heard is a hang a test sees
    client = aioredis.Redis(unix_socket_path=str(r.socket), protocol=3, socket_connect_timeout=30)
    line = DirectLine(client.connection_pool)
    try:
        yield line
    finally:
        await line.close()
        await client.aclose()


def test_what_redis_sends_unasked_is_no_reply(redis_server: RedisServer) -> None:
    """RESP3 pushes (here client tracking's invalidations) arrive between replies, and a
    RESP3 false is a reply: neither may shift the replies onto the wrong callers."""

    async def run() -> None:
        other = redis_server.client()
        async with line_to(redis_server) as line:
            assert await line.call(pack(("CLIENT", "TRACKING", "ON"))) == b"OK"
            for i in range(20):
                other.set(f"tracked{i}", i)
                assert await line.call(pack(("GET", f"tracked{i}"))) == str(i).encode()
                other.set(f"tracked{i}", -i)  # Redis pushes an invalidation to the line
            false = pack(("EVAL", "redis.setresp(3); return false", 0))
            replies = await asyncio.gather(
                *(line.call(pack(("ECHO", f"v{i}"))) if i % 2 else line.call(false)
                  for i in range(40))
            )  # fmt: skip
            assert replies == [f"v{i}".encode() if i % 2 else False for i in range(40)]

    asyncio.run(run())


def test_many_callers_at_once_each_get_their_own_reply(redis_server: RedisServer) -> None:
    async def run() -> None:
        async with line_to(redis_server) as line:
            calls = []
            for i in range(500):
                if i % 7 == 3:  # an error reply among the others
                    calls.append(line.call(pack(("EVALSHA", "0" * 40, 0))))
                else:
                    calls.append(line.call(pack(("ECHO", f"v{i}"))))
            replies = await asyncio.gather(*calls, return_exceptions=True)
            for i, reply in enumerate(replies):
                if i % 7 == 3:
                    assert isinstance(reply, rex.NoScriptError), (i, reply)
                else:
                    assert reply == f"v{i}".encode(), (i, reply)
            # a large argument, sent in pieces
            big = b"x" * (1 << 20)
            assert await line.call(pack(("ECHO", big))) == big

    asyncio.run(run())


def test_a_caller_abandoned_mid_command_never_hands_its_reply_to_the_next(
    redis_server: RedisServer,
) -> None:
    async def run() -> None:
        async with line_to(redis_server) as line:
            assert await line.call(pack(("ECHO", "warm"))) == b"warm"
            # Redis holds the line's next commands for 2 s (from the moment it answers): far
            # past the 0.1 s wait below, even on a loaded machine
            redis_server.client().execute_command("CLIENT", "PAUSE", "2000", "ALL")
            other = asyncio.ensure_future(line.call(pack(("ECHO", "other"))))
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(line.call(pack(("ECHO", "abandoned"))), 0.1)
            # the caller beside it lost the connection too: it may retry, never misread
            with pytest.raises(rex.ConnectionError):
                await other
            await asyncio.sleep(2.0)
            # a new connection: each reply its own, nothing late from before
            for i in range(20):
                assert await line.call(pack(("ECHO", f"after{i}"))) == f"after{i}".encode()

    asyncio.run(run())


def test_redis_killed_under_a_waiting_caller_then_back(redis_server: RedisServer) -> None:
    async def run() -> None:
        async with line_to(redis_server) as line:
            assert await line.call(pack(("SET", "k", "1"))) == b"OK"
            redis_server.client().execute_command("CLIENT", "PAUSE", "5000", "ALL")
            waiting = asyncio.ensure_future(line.call(pack(("INCR", "k"))))
            await asyncio.sleep(0.1)
            assert not waiting.done()  # Redis holds it
            redis_server.kill()
            with pytest.raises(rex.ConnectionError):
                await asyncio.wait_for(waiting, 10)
            redis_server.start()
            deadline = time.monotonic() + 10
            while True:  # the next call connects again once Redis is back
                try:
                    assert await line.call(pack(("PING",))) == b"PONG"
                    break
                except rex.ConnectionError:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.1)

    asyncio.run(run())


def test_a_connection_redis_closes_is_given_back_and_the_next_call_connects(
    redis_server: RedisServer,
) -> None:
    """The line reads its connection through a protocol of its own; the stream protocol
    redis-py connected with must still hear of the close, or redis-py's disconnect (which
    waits for it) would hold the connection forever."""

    async def run() -> None:
        async with line_to(redis_server) as line:
            assert await line.call(pack(("ECHO", "before"))) == b"before"
            redis_server.client().execute_command(
                "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"
            )
            # the close is seen with no call waiting, and the connection is given back at
            # once (redis-py's own wait for the close would give up only after 30 s)
            await eventually_async(
                lambda: line._writer is None and not line._closing,
                "the closed connection was never given back",
                2,
                0.01,
            )
            assert await line.call(pack(("ECHO", "after"))) == b"after"

    asyncio.run(run())


def test_a_pooled_connection_reset_while_idle_fails_at_once_then_the_next_call_connects(
    redis_server: RedisServer,
) -> None:
    """A connection that died in redis-py's pool by an error (a reset, a TLS close without
    notify) is handed out as connected: the line must refuse it at once (a connection
    error, which the retry policy repeats), never wait on it until the call's deadline."""

    async def run() -> None:
        client = aioredis.Redis(unix_socket_path=str(redis_server.socket), protocol=3)
        pool = client.connection_pool
        try:
            conn = await pool.get_connection()  # type: ignore[no-untyped-call]
            await pool.release(conn)  # idle in the pool, then reset under it
            conn._writer.transport._force_close(ConnectionResetError("reset by the test"))
            await asyncio.sleep(0.05)
            line = DirectLine(pool)
            try:
                with pytest.raises(rex.ConnectionError):
                    await asyncio.wait_for(line.call(pack(("PING",))), 3)
                assert await asyncio.wait_for(line.call(pack(("PING",))), 3) == b"PONG"
            finally:
                await line.close()
        finally:
            await client.aclose()

    asyncio.run(run())
