"""The frame lane: a task's unary calls, and the Read stream, over a plain Unix socket.

The wire is taskstate.proto.frames. Each call is handled by the very callable gRPC serves
it with (service.UnaryCall or StreamCall: the guard, the RPC body, the same parse of the
request), given a context that carries the frame's token and turns an abort into an
error frame. So tokens, limits, metrics, logs and error codes are those of gRPC; only
the transport differs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

from taskstate.proto import codes, frames

from .. import metrics
from ..deadline import Deadline
from ..errors import SidecarError
from .service import StreamCall, UnaryCall


class _AbortedError(Exception):
    def __init__(self, status: int, code: str, details: str) -> None:
        super().__init__(details)
        self.status, self.code, self.details = status, code, details


class FrameCall:
    """One frame's call as a CallContext (rpc/guard.py)."""

    __slots__ = ("_token",)

    def __init__(self, token: bytes) -> None:
        self._token = token.decode(errors="replace").strip() if token else None

    def token(self) -> str | None:
        """The frame's token."""
        return self._token

    async def fail(self, error: SidecarError) -> NoReturn:
        """End the call: its status, code and details go back as an error frame."""
        raise _AbortedError(error.status.value[0], error.code, error.message)


def _error(status: int, code: str, details: str) -> bytes:
    body = frames.error_body(code, details)
    return frames.RESPONSE_HEAD.pack(1 + len(body), status) + body


async def _discard(reader: asyncio.StreamReader, n: int) -> None:
    while n > 0:
        chunk = await reader.read(min(n, 1 << 16))
        if not chunk:
            raise asyncio.IncompleteReadError(b"", n)
        n -= len(chunk)


class FrameLane:
    """Serves `calls` (by name) on one Unix socket per gRPC Unix listener."""

    def __init__(self, calls: Mapping[str, UnaryCall | StreamCall], max_message_bytes: int) -> None:
        self.calls: dict[int, UnaryCall] = {}
        self.streams: dict[int, StreamCall] = {}
        for name, number in frames.METHODS.items():
            unary = calls[name]
            if not isinstance(unary, UnaryCall):
                raise TypeError(f"{name} is served on the frame lane as a unary call")
            self.calls[number] = unary
        for name, number in frames.STREAMS.items():
            stream = calls[name]
            if not isinstance(stream, StreamCall):
                raise TypeError(f"{name} is served on the frame lane as a stream")
            self.streams[number] = stream
        self.max_message_bytes = max_message_bytes
        self._servers: list[asyncio.AbstractServer] = []
        self._connections: set[asyncio.Task[None]] = set()
        self._busy: set[asyncio.Task[None]] = set()  # connections inside a call
        self._stopping = False

    async def listen(self, path: Path) -> None:
        """Serve on `path` (a stale socket there is replaced)."""
        if path.exists() or path.is_symlink():
            path.unlink()
        self._servers.append(await asyncio.start_unix_server(self._serve, str(path)))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        me = asyncio.current_task()
        if me is None or self._stopping:  # stopping: no new connection is served
            writer.close()
            return
        self._connections.add(me)
        metrics.FRAME_CONNECTIONS.inc()
        try:
            while True:
                head = await reader.readexactly(frames.LENGTH.size)
                (n,) = frames.LENGTH.unpack(head)
                if n > self.max_message_bytes:
                    await _discard(reader, n)  # read, never held: then the client hears why
                    writer.write(self._too_large("the request", n, codes.LIMIT))
                    continue
                body = await reader.readexactly(n)
                self._busy.add(me)
                try:
                    if len(body) >= frames.CALL_HEAD.size and body[0] in self.streams:
                        await self._stream(body, writer)
                    else:
                        writer.write(await self._answer(body))
                finally:
                    self._busy.discard(me)
                if self._stopping:  # the call is answered; the client's next goes elsewhere
                    await writer.drain()
                    return
                if writer.transport.get_write_buffer_size() > 1 << 16:
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client went away (or was killed): nothing is owed to it
        except asyncio.CancelledError:
            pass  # the sidecar is stopping
        finally:
            self._connections.discard(me)
            metrics.FRAME_CONNECTIONS.dec()
            writer.close()

    def _too_large(self, what: str, n: int, code: str) -> bytes:
        """The error frame refusing `what` of `n` bytes, over --max-message-bytes."""
        return _error(
            frames.RESOURCE_EXHAUSTED,
            code,
            f"{what} of {n} bytes is over the sidecar's --max-message-bytes "
            f"{self.max_message_bytes}",
        )

    async def _answer(self, body: bytes) -> bytes:
        head = frames.CALL_HEAD.size
        if len(body) < head:
            return _error(frames.INVALID_ARGUMENT, codes.INVALID_ARGUMENT, "a frame too short")
        method, deadline_ms, tlen = frames.CALL_HEAD.unpack_from(body)
        call = self.calls.get(method)
        if call is None:
            return _error(
                frames.UNIMPLEMENTED, "", f"method {method} is not served on the frame lane"
            )
        ctx = FrameCall(body[head : head + tlen])
        try:
            with Deadline(deadline_ms / 1000):
                reply: Any = await call.handle(call.parse(body[head + tlen :]), ctx)
        except _AbortedError as exc:
            return _error(exc.status, exc.code, exc.details)
        except TimeoutError:
            return _error(frames.DEADLINE_EXCEEDED, "", "the call's deadline passed")
        out = call.serialize(reply)
        if len(out) > self.max_message_bytes:
            return self._too_large("the answer", len(out), "")
        return frames.RESPONSE_HEAD.pack(1 + len(out), frames.OK) + out

    async def _stream(self, body: bytes, writer: asyncio.StreamWriter) -> None:
        """A server stream: a response frame per message, written as each comes.

        Each waits for the socket to take the one before (`drain`), so a slow reader
        holds the stream back rather than the sidecar's memory. A stream that ends
        without its last message (which should not happen) ends with an error frame, so
        the client never waits for more.
        """
        head = frames.CALL_HEAD.size
        method, deadline_ms, tlen = frames.CALL_HEAD.unpack_from(body)
        call = self.streams[method]
        ctx = FrameCall(body[head : head + tlen])
        answers = call.handle(call.parse(body[head + tlen :]), ctx)
        ended = False
        try:
            with Deadline(deadline_ms / 1000 if deadline_ms else None):
                async for reply in answers:
                    if ended:  # a message past the last (a bug): never sent, the stream ends
                        break
                    out = call.serialize(reply)
                    if len(out) > self.max_message_bytes:
                        # as gRPC ends a stream whose message is over its limit (the
                        # handler is closed: counted as CANCELLED, as there)
                        writer.write(self._too_large("a message", len(out), codes.LIMIT))
                        return
                    writer.write(frames.RESPONSE_HEAD.pack(1 + len(out), frames.OK) + out)
                    ended = bool(getattr(reply, "last", False))
                    await writer.drain()
                # the last message sent: the handler ran to its end (counted "ok")
        except _AbortedError as exc:
            writer.write(_error(exc.status, exc.code, exc.details))
            return
        except TimeoutError:
            writer.write(_error(frames.DEADLINE_EXCEEDED, "", "the call's deadline passed"))
            return
        finally:
            await answers.aclose()
        if not ended:
            writer.write(
                _error(frames.INTERNAL, codes.INTERNAL, "the stream ended without its last message")
            )

    async def stop(self, grace_s: float) -> None:
        """Stop accepting; let calls under way finish (within `grace_s`); close the rest.

        As gRPC's stop: no new call is served from here on (an idle connection is closed
        now, a busy one once its call is answered), and the client's retry finds the
        next sidecar.
        """
        self._stopping = True
        for s in self._servers:
            s.close()
        for t in list(self._connections - self._busy):
            t.cancel()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        while self._busy and loop.time() < deadline:
            await asyncio.sleep(0.01)
        for t in list(self._connections):
            t.cancel()
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=1.0)
        for s in self._servers:  # after the connections: from 3.12 it waits for them
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(s.wait_closed(), 1.0)
