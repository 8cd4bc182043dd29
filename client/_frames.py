"""The frame lane's client side (taskstate.proto.frames): one socket per process and thread.

A call either returns the response message's bytes, or raises `FrameStatusError` (the sidecar
answered with an error), `LaneUnreachableError` (no connection: nothing was sent) or
`LaneDownError` (the socket failed: no answer, or a part of one). A stream (`stream`)
yields its messages as they come, and fails the same ways.
After any failure the socket is closed, so a late answer is never read as the next
call's; so is a stream's socket when its reader stops before the last message.
`_transport.LaneWire` decides when the lane is used and maps the errors.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from taskstate.proto import frames

T = TypeVar("T")


class FrameStatusError(Exception):
    """The sidecar answered the call with an error."""

    def __init__(self, status: int, code: str, details: str) -> None:
        super().__init__(details)
        self.status, self.code, self.details = status, code, details


class LaneDownError(Exception):
    """The lane's socket failed mid-call (reset, timed out, or closed mid-answer)."""


class _TooLargeError(LaneDownError):
    """An answer over the client's limit (the socket is dropped: it is not read)."""


class LaneUnreachableError(Exception):
    """No connection to the lane (no sidecar there now, or a stale socket): nothing sent."""


class FrameLane:
    """Calls over the frame socket at `path`; usable from any thread, and after a fork."""

    def __init__(self, path: str, token: str | None) -> None:
        self.path = path
        self._token = token.encode() if token else b""
        self._local = threading.local()
        self._paused_until = 0.0

    # after a connection could not be made, the lane is not tried again for this long
    # (a sidecar without one, or a restart under way: gRPC serves meanwhile)
    PAUSE_S = 1.0

    def open_now(self) -> bool:
        """Whether to try the lane now (not within PAUSE_S of a failed connection)."""
        return self._paused_until == 0.0 or time.monotonic() >= self._paused_until

    def _socket(self, timeout_s: float) -> socket.socket:
        local = self._local
        if getattr(local, "reading", False):  # a call made while this thread reads (the
            # callback of a read at once, e.g. a schema's upgrade): gRPC serves it
            raise LaneUnreachableError("this thread's connection is in the middle of a read")
        sock: socket.socket | None = getattr(local, "sock", None)
        if sock is not None and local.pid == os.getpid():
            return sock
        # none yet, or the parent's before a fork: leave the parent's alone, open our own
        sock = self._connect(timeout_s)
        local.sock, local.pid = sock, os.getpid()
        return sock

    def _connect(self, timeout_s: float) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout_s)
        try:
            sock.connect(self.path)
        except OSError as exc:
            sock.close()
            self._paused_until = time.monotonic() + self.PAUSE_S
            raise LaneUnreachableError(f"cannot connect to {self.path}: {exc}") from None
        return sock

    def close(self) -> None:
        """Close this thread's connection (the next call opens another)."""
        self._drop()

    def _drop(self) -> None:
        sock: socket.socket | None = getattr(self._local, "sock", None)
        self._local.sock = None
        if sock is not None and self._local.pid == os.getpid():
            sock.close()

    def call(self, method: str, message: bytes, timeout_s: float, max_bytes: int) -> bytes:
        """One call: the response message, or FrameStatusError / LaneDownError.

        The sidecar ends the call when `timeout_s` passes, as gRPC's deadline does. An
        answer over `max_bytes` is refused as gRPC refuses to receive it.
        """
        deadline = time.monotonic() + timeout_s
        sock = self._socket(timeout_s)
        try:
            sock.settimeout(timeout_s)
            sock.sendall(
                frames.request(frames.METHODS[method], self._token, message, int(timeout_s * 1000))
            )
            frame = _read_frame(sock, deadline, max_bytes)
        except _TooLargeError as exc:
            self._drop()
            raise FrameStatusError(frames.RESOURCE_EXHAUSTED, "", str(exc)) from None
        except (OSError, LaneDownError) as exc:
            self._drop()
            raise LaneDownError(f"{self.path}: {exc or type(exc).__name__}") from None
        except BaseException:
            # anything else (an interrupt, a signal handler's exception): the answer is
            # still owed on this socket, and must never be read as the next call's
            self._drop()
            raise
        status = frame[0]
        body = frame[1:]
        if status != frames.OK:
            code, details = frames.parse_error(body)
            raise FrameStatusError(status, code, details)
        return body

    def stream(
        self,
        method: str,
        message: bytes,
        wait_s: float,
        max_bytes: int,
        parse: Callable[[Any], T],
        last: Callable[[T], bool],
        whole: bool = False,
    ) -> Iterator[T]:
        """A server stream: each message parsed, up to the one `last` says ends it.

        Each message must come within `wait_s` of the one before. FrameStatusError when
        the sidecar ends the stream with an error; LaneDownError when the socket fails.
        By default the whole has no deadline (a large read takes a while) and the stream
        has a connection of its own, closed at its end: the thread's calls may come
        between two of its messages (a generator read in turns), and a reader that stops
        early leaves nothing unread on a shared socket. `whole`: a stream read to its end
        at once, as a unary call is, within `wait_s` all told, on the thread's connection.
        """
        if whole:
            sock, ends, deadline_ms = self._socket(wait_s), time.monotonic() + wait_s, wait_s * 1000
            self._local.reading = True
        else:
            sock, ends, deadline_ms = self._connect(wait_s), 0.0, 0.0
        ended = False  # the last frame read, and nothing after it: the socket serves on
        try:
            sock.settimeout(wait_s)
            number = frames.STREAMS[method]
            sock.sendall(frames.request(number, self._token, message, int(deadline_ms)))
            reader = _FrameReader(sock, "a message")
            done = False
            while not done:
                frame = reader.frame(ends or time.monotonic() + wait_s, max_bytes)
                if frame[0] != frames.OK:
                    ended = not reader.pending  # an error frame ends the stream
                    code, details = frames.parse_error(bytes(frame[1:]))
                    raise FrameStatusError(frame[0], code, details)
                item = parse(memoryview(frame)[1:])
                done = last(item)  # nothing past the last is read, even if some came
                ended = done and not reader.pending
                yield item
        except _TooLargeError as exc:
            raise FrameStatusError(frames.RESOURCE_EXHAUSTED, "", str(exc)) from None
        except (OSError, LaneDownError) as exc:
            raise LaneDownError(f"{self.path}: {exc or type(exc).__name__}") from None
        finally:
            if not whole:
                sock.close()
            else:
                self._local.reading = False
                if not ended:  # a frame may still be owed: never read as the next call's
                    self._drop()


class _FrameReader:
    """Frames one by one: what a read brings past a frame is the next one's start."""

    def __init__(self, sock: socket.socket, what: str) -> None:
        self.sock = sock
        self.what = what  # "the answer" (a unary call's) or "a message" (a stream's)
        self._buf = bytearray()

    @property
    def pending(self) -> bool:
        """Whether bytes past the last frame read have arrived."""
        return bool(self._buf)

    def frame(self, deadline: float, max_bytes: int) -> bytearray:
        """The next frame without its length (a large one read straight into its buffer)."""
        buf = self._buf
        while len(buf) < frames.LENGTH.size:
            buf += _recv(self.sock, 1 << 16, deadline)
        (n,) = frames.LENGTH.unpack_from(buf)
        if n > max_bytes + 1:
            raise _TooLargeError(
                f"{self.what} of {n - 1} bytes is over the client's "
                f"TASKSTATE_MAX_MESSAGE_BYTES {max_bytes}"
            )
        end = frames.LENGTH.size + n
        if len(buf) >= end:
            out = buf[frames.LENGTH.size : end]
            del buf[:end]
            return out
        out = bytearray(n)
        got = len(buf) - frames.LENGTH.size
        out[:got] = buf[frames.LENGTH.size :]
        buf.clear()
        view = memoryview(out)
        while got < n:  # exactly the rest: nothing of the next frame
            _wait(self.sock, deadline)
            k = self.sock.recv_into(view[got:])
            if k == 0:
                raise LaneDownError(f"the sidecar closed the connection before {self.what} ended")
            got += k
        return out


def _read_frame(sock: socket.socket, deadline: float, max_bytes: int) -> bytes:
    """One unary call's response frame without its length (a small one in a single recv)."""
    reader = _FrameReader(sock, "the answer")
    frame = reader.frame(deadline, max_bytes)
    if reader.pending:
        raise LaneDownError("the sidecar sent more than one answer")
    return bytes(frame)


def _wait(sock: socket.socket, deadline: float) -> None:
    left = deadline - time.monotonic()
    if left <= 0:
        raise LaneDownError("no answer before the call's deadline")
    sock.settimeout(left)


def _recv(sock: socket.socket, n: int, deadline: float) -> bytes:
    _wait(sock, deadline)
    data = sock.recv(n)
    if not data:
        raise LaneDownError("the sidecar closed the connection before answering")
    return data
