"""One connection kept aside for the hot path's single commands (a task's Open and Commit).

redis-py's `execute_command` costs the sidecar about 110-190 µs of CPU per command on this
kind of machine (a pool checkout, a retry wrapper, a task made by `asyncio.wait_for` for
each send, a timeout around each read), against about 55 µs for the same EVALSHA written
to a socket and its reply read by hiredis (docs/benchmarks.md, figure 19). `DirectLine`
takes one connection from redis-py's pool (so connecting, TLS, AUTH and SELECT stay
redis-py's), writes commands to it as they come and hands each reply, in order, to the
caller that waits for it, from the connection's own protocol (`_Replies`, no reading task).

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
        self._loop: asyncio.AbstractEventLoop | None = None  # the connection's, while held
        self._waiting: deque[asyncio.Future[Any]] = deque()
        self._replies: _Replies | None = None  # the connection's reader while it is held
        self._connecting = asyncio.Lock()  # binds no loop before its first use (3.10+)
        self._closing: set[asyncio.Task[None]] = set()
        self._closed = False

    async def call(self, pieces: list[bytes]) -> Any:
        """Send one packed command; its reply (a Redis error reply raised as redis-py's)."""
        writer, loop = self._writer, self._loop
        if writer is None or loop is None:
            writer, loop = await self._connect()
        # the connection's loop: asyncio.get_running_loop asks for the pid on 3.11
        future: asyncio.Future[Any] = loop.create_future()
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

    async def _connect(self) -> tuple[asyncio.StreamWriter, asyncio.AbstractEventLoop]:
        async with self._connecting:
            if self._writer is not None and self._loop is not None:
                return self._writer, self._loop
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
            transport = writer.transport
            if transport.is_closing() or reader.at_eof() or reader.exception() is not None:
                # it died in the pool by an error (a reset: redis-py's check before handing
                # it out sees only a clean end); the caller's retry connects afresh
                await self._give_back(conn)
                raise rex.ConnectionError("the pooled connection to Redis was already closed")
            if getattr(reader, "_buffer", None):  # pragma: no cover - the pool refuses these
                await self._give_back(conn)
                raise rex.InvalidResponse("Redis sent a reply nobody asked for")
            self._replies = _Replies(self, transport)
            self._conn, self._writer = conn, writer
            self._loop = loop = asyncio.get_running_loop()
            return writer, loop

    def _drop(self, error: Exception) -> None:
        """Forget the connection (closed in the background): each caller waiting gets `error`."""
        conn = self._forget(error)
        if conn is not None:
            task = asyncio.get_running_loop().create_task(self._give_back(conn))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    def _forget(self, error: Exception) -> Any:
        conn, self._conn, self._writer, self._loop = self._conn, None, None, None
        self._replies = None  # a reply still arriving on it is nobody's now
        waiting, self._waiting = self._waiting, deque()
        for future in waiting:
            if not future.done():
                future.set_exception(error)
        return conn

    def _lost(self, replies: _Replies, error: Exception) -> None:
        """The connection `replies` reads failed; dropped, unless it already was."""
        if replies is self._replies:
            self._drop(error)

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


class _Replies(asyncio.Protocol):
    """The protocol of the line's connection while the line holds it.

    Each reply is handed to its caller from `data_received`, as the bytes arrive: no task
    reads the connection, so a reply costs the event loop one turn less (the caller wakes
    in the turn after the bytes, not after a reading task's). The stream protocol redis-py
    connected with stays behind it: it still learns that the connection was lost (so that
    redis-py's disconnect, which waits for that, ends) and that writing paused or resumed
    (its state stays true, though the line never waits on it).
    """

    def __init__(self, line: DirectLine, transport: asyncio.BaseTransport) -> None:
        self._line = line
        self._waiting = line._waiting  # noqa: SLF001 - this connection's callers, in order
        self._stream: Any = transport.get_protocol()
        self._parser = hiredis.Reader(
            protocolError=rex.InvalidResponse,
            replyError=BaseParser.parse_error,
            notEnoughData=_MORE,
        )
        transport.set_protocol(self)

    def data_received(self, data: bytes) -> None:
        parser, waiting = self._parser, self._waiting
        try:
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
        except Exception as exc:
            error = exc if isinstance(exc, rex.RedisError) else rex.ConnectionError(str(exc))
            self._line._lost(self, error)  # noqa: SLF001

    def eof_received(self) -> bool:
        self._line._lost(self, rex.ConnectionError("Redis closed the connection"))  # noqa: SLF001
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        reason = (
            f"the connection to Redis was lost: {exc}" if exc else "Redis closed the connection"
        )
        self._line._lost(self, rex.ConnectionError(reason))  # noqa: SLF001
        self._stream.connection_lost(exc)

    def pause_writing(self) -> None:
        self._stream.pause_writing()

    def resume_writing(self) -> None:
        self._stream.resume_writing()
