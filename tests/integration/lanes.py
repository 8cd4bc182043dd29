"""The frame lane in tests: a sidecar that asks for a token and answers on its lane alone,
and frames read off a raw socket."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from taskstate.proto import frames
from taskstate.testing import RedisServer, SidecarProcess

TOKEN = "token-for-the-lane-" + "t" * 24


@contextmanager
def lane_with_tokens(redis: RedisServer, folder: Path, namespace: str) -> Iterator[SidecarProcess]:
    """A sidecar granting TOKEN `namespace` only, whose gRPC socket is moved away."""
    tokens = folder / "tokens.json"
    tokens.write_text(json.dumps(
        {"tokens": [{"name": "job", "token": TOKEN, "namespaces": [namespace]}]}
    ))  # fmt: skip
    side = SidecarProcess(
        redis.url, folder / "s.sock", extra=["--tokens-file", str(tokens)]
    ).start()
    os.rename(folder / "s.sock", folder / "moved.sock")  # the lane alone answers
    try:
        yield side
    finally:
        side.kill()


def exactly(sock: socket.socket, n: int) -> bytes | None:
    """`n` bytes off `sock`, or None when it closes first."""
    buf = b""
    while len(buf) < n:
        data = sock.recv(n - len(buf))
        if not data:
            return None
        buf += data
    return buf


def read_frame(sock: socket.socket) -> bytes:
    """One frame's body (after its length), asserting the connection stays open."""
    head = exactly(sock, frames.LENGTH.size)
    assert head is not None, "the sidecar closed the connection"
    body = exactly(sock, frames.LENGTH.unpack(head)[0])
    assert body is not None, "the connection closed mid-frame"
    return body


def read_answer(sock: socket.socket) -> tuple[int, bytes]:
    """One answer frame: (its status, the rest)."""
    body = read_frame(sock)
    return body[0], body[1:]
