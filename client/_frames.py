"""The frame lane's client side (taskstate.proto.frames): one socket per process and thread.

A call either returns the response message's bytes, or raises `FrameStatusError` (the sidecar
answered with an error), `LaneUnreachableError` (no connection: nothing was sent) or
`LaneDownError` (the socket failed: no answer, or a part of one).
After any failure the socket is closed, so a late answer is never read as the next
call's. `_transport.GrpcTransport` decides when the lane is used and maps both errors.
"""

from __future__ import annotations

import os
import socket
import threading
import time

from taskstate.proto import frames


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
        sock: socket.socket | None = getattr(local, "sock", None)
        if sock is not None and local.pid == os.getpid():
            return sock
        # none yet, or the parent's before a fork: leave the parent's alone, open our own
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout_s)
        try:
            sock.connect(self.path)
        except OSError as exc:
            sock.close()
            self._paused_until = time.monotonic() + self.PAUSE_S
            raise LaneUnreachableError(f"cannot connect to {self.path}: {exc}") from None
        local.sock, local.pid = sock, os.getpid()
        return sock

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


def _read_frame(sock: socket.socket, deadline: float, max_bytes: int) -> bytes:
    """One response frame without its length (a small one in a single recv)."""
    first = _recv(sock, 1 << 16, deadline)
    while len(first) < frames.LENGTH.size:
        first += _recv(sock, 1 << 16, deadline)
    (n,) = frames.LENGTH.unpack_from(first)
    if n > max_bytes + 1:
        raise _TooLargeError(
            f"the answer of {n - 1} bytes is over the client's TASKSTATE_MAX_MESSAGE_BYTES "
            f"{max_bytes}"
        )
    end = frames.LENGTH.size + n
    if len(first) >= end:
        if len(first) > end:
            raise LaneDownError("the sidecar sent more than one answer")
        return first[frames.LENGTH.size :]
    buf = bytearray(n)
    got = len(first) - frames.LENGTH.size
    buf[:got] = first[frames.LENGTH.size :]
    view = memoryview(buf)
    while got < n:
        _wait(sock, deadline)
        k = sock.recv_into(view[got:])
        if k == 0:
            raise LaneDownError("the sidecar closed the connection before answering")
        got += k
    return bytes(buf)


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
