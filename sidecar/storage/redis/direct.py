"""One connection kept aside for the hot path's single commands (a task's Open and Commit).

redis-py's `execute_command` costs the sidecar about 110-190 µs of CPU per command on this
kind of machine (a pool checkout, a retry wrapper, a task made by `asyncio.wait_for` for
each send, a timeout around each read), against about 55 µs for the same EVALSHA written
to a socket and its reply read by hiredis (docs/benchmarks.md, figure 19). `DirectLine`
takes one connection from redis-py's pool (so connecting, TLS, AUTH and SELECT stay
redis-py's), writes commands to it as they come and reads their replies in order in one
task, each reply to the caller that waits for it.

A reply belongs to the command at the head of the queue, so nothing may leave the queue
out of turn: a caller cancelled while it waits (the retry policy's deadline) drops the
whole connection, and every other caller waiting on it gets a ConnectionError, which the
retry policy repeats (every script is idempotent). The next command connects again.
What Redis sends unasked is no reply: RESP3 push messages (client tracking, a managed
service's maintenance notices) are skipped, and "not enough data yet" is a sentinel of its
own, never `False` (a RESP3 boolean).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import Any

import hiredis
import redis.exceptions as rex
from redis._parsers.base import BaseParser

_MORE = object()  # hiredis' "not enough data yet" (its default, False, is a RESP3 reply)
_PUSH: type = getattr(hiredis, "PushNotification", type(None))


class DirectLine:
    """Commands on one connection of `pool`, answered in order."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self._conn: Any = None
        self._writer: asyncio.StreamWriter | None = None
        self._waiting: deque[asyncio.Future[Any]] = deque()
        self._reading: asyncio.Task[None] | None = None
        self._connecting = asyncio.Lock()  # binds no loop before its first use (3.10+)
        self._closing: set[asyncio.Task[None]] = set()
        self._closed = False

    async def call(self, pieces: list[bytes]) -> Any:
        """Send one packed command; its reply (a Redis error reply raised as redis-py's)."""
        writer = self._writer
        if writer is None:
            writer = await self._connect()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        waiting = self._waiting
        waiting.append(future)
        if len(pieces) == 1:
            writer.write(pieces[0])
        else:
            writer.writelines(pieces)
        try:
            return await future
        except asyncio.CancelledError:
            # its reply is still owed (a reply already given: the future holds a result)
            if waiting is self._waiting and (future.cancelled() or not future.done()):
                self._drop(rex.ConnectionError("a command was abandoned while Redis had it"))
            raise

    async def _connect(self) -> asyncio.StreamWriter:
        async with self._connecting:
            if self._writer is not None:
                return self._writer
            if self._closed:
                raise rex.ConnectionError("the sidecar is stopping")
            conn = await self.pool.get_connection()
            if self._closed:  # closed while connecting
                await self._give_back(conn)
                raise rex.ConnectionError("the sidecar is stopping")
            # redis-py's streams, connected, authenticated and ready (redis is pinned in
            # requirements/constraints.txt; tests/integration/sidecar/test_direct_line.py)
            reader: asyncio.StreamReader | None = conn._reader  # noqa: SLF001
            writer: asyncio.StreamWriter | None = conn._writer  # noqa: SLF001
            if reader is None or writer is None:  # pragma: no cover - get_connection connects
                await self.pool.release(conn)
                raise rex.ConnectionError("redis-py gave a connection that is not connected")
            self._conn, self._writer = conn, writer
            self._reading = asyncio.create_task(self._read(reader))
            return writer

    async def _read(self, reader: asyncio.StreamReader) -> None:
        parser = hiredis.Reader(
            protocolError=rex.InvalidResponse,
            replyError=BaseParser.parse_error,
            notEnoughData=_MORE,
        )
        waiting = self._waiting
        try:
            while True:
                data = await reader.read(1 << 16)
                if not data:
                    raise rex.ConnectionError("Redis closed the connection")
                parser.feed(data)
                while (reply := parser.gets()) is not _MORE:
                    if reply.__class__ is _PUSH:
                        continue  # sent unasked: not the answer to anything
                    if not waiting:
                        raise rex.InvalidResponse("Redis sent a reply nobody asked for")
                    future = waiting.popleft()
                    if future.done():
                        continue
                    if isinstance(reply, Exception):  # an error reply, as redis-py raises it
                        future.set_exception(reply)
                    else:
                        future.set_result(reply)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if self._reading is asyncio.current_task():  # else its connection was dropped
                error = exc if isinstance(exc, rex.RedisError) else rex.ConnectionError(str(exc))
                self._drop(error)

    def _drop(self, error: Exception) -> None:
        """Forget the connection (closed in the background): each caller waiting gets `error`."""
        conn = self._forget(error)
        if conn is not None:
            task = asyncio.get_running_loop().create_task(self._give_back(conn))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    def _forget(self, error: Exception) -> Any:
        conn, self._conn, self._writer = self._conn, None, None
        reading, self._reading = self._reading, None
        waiting, self._waiting = self._waiting, deque()
        for future in waiting:
            if not future.done():
                future.set_exception(error)
        if reading is not None and reading is not asyncio.current_task():
            reading.cancel()
        return conn

    async def _give_back(self, conn: Any) -> None:
        with contextlib.suppress(Exception):
            await conn.disconnect()
        with contextlib.suppress(Exception):
            await self.pool.release(conn)

    async def close(self) -> None:
        """Drop the connection (the sidecar is stopping)."""
        self._closed = True
        conn = self._forget(rex.ConnectionError("the sidecar is stopping"))
        if conn is not None:
            await self._give_back(conn)
        if self._closing:
            await asyncio.wait(list(self._closing), timeout=5)
