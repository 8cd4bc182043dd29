"""The frame lane: a task's unary calls, and reads, over a plain Unix socket beside gRPC.

A sidecar listening on `unix:///run/x.sock` also listens on `/run/x.frames.sock`
(`lane_path`). There a client that shares the machine sends the same protobuf messages as
over gRPC, framed by length, without HTTP/2 and grpc's per-call machinery: about 60 µs of
the sidecar's CPU per call against about 400 (docs/benchmarks.md, figure 19). Only the
calls in `METHODS` and the Read stream (`STREAMS`: a task's restores and on-demand reads,
the data source's and `taskstate show`'s reads) travel this way, whoever makes them; the
other calls and streams, TCP and TLS stay on gRPC. The same guard serves both: tokens,
limits, metrics and error codes.

One call at a time per connection, in order:

    request:  u32 length of the rest | u8 method | u32 the call's deadline, ms from now |
              u16 n | n bytes: the token (UTF-8, empty without one) | the request message
    response: u32 length of the rest | u8 status (a gRPC status code, 0 = OK) | either the
              response message, or u16 n | n bytes: the taskstate code | the details (UTF-8)

A stream's answer is a response frame per message, in order, up to the one that says it
is the last (Read: `last`) or an error frame; then the connection serves the next call.
A stream's deadline of 0 means none (a large read takes a while). A client that stops
reading a stream midway closes the connection; the sidecar ends the stream when its
next write fails.

Lengths are big-endian. A request longer than the sidecar's --max-message-bytes is read
and thrown away, then refused with RESOURCE_EXHAUSTED (code LIMIT); the connection serves
on. An answer longer than it is refused the same way, as gRPC refuses to send it. As
gRPC's deadline does, the deadline ends the call in the sidecar when the client stops
waiting for it (DEADLINE_EXCEEDED), so a call given up on never lands after its retry.
"""

from __future__ import annotations

import struct

SUFFIX = ".frames.sock"

# method ids on the wire; never reused for another call once released
# (3 was a unary read's, before the Read stream served every read)
METHODS: dict[str, int] = {"Open": 1, "Commit": 2, "Describe": 4, "OpenCommit": 6}
STREAMS: dict[str, int] = {"Read": 5}

LENGTH = struct.Struct(">I")
CALL_HEAD = struct.Struct(">BIH")  # after the length: method, deadline ms, token length
RESPONSE_HEAD = struct.Struct(">IB")  # length, status
ERROR_HEAD = struct.Struct(">H")  # taskstate code length

OK = 0
DEADLINE_EXCEEDED = 4
UNIMPLEMENTED = 12  # gRPC's code for a method the sidecar does not serve
INTERNAL = 13
RESOURCE_EXHAUSTED = 8
INVALID_ARGUMENT = 3

# the longest path a Unix socket can have on Linux (sun_path, with its NUL)
MAX_SOCKET_PATH = 107


def lane_path(socket_path: str) -> str:
    """The frame lane's socket beside a sidecar's gRPC socket."""
    return socket_path.removesuffix(".sock") + SUFFIX


def request(method: int, token: bytes, message: bytes, deadline_ms: int = 30_000) -> bytes:
    """One request frame."""
    size = CALL_HEAD.size + len(token) + len(message)
    return LENGTH.pack(size) + CALL_HEAD.pack(method, deadline_ms, len(token)) + token + message


def error_body(code: str, details: str) -> bytes:
    """The body of a failed call's response."""
    c = code.encode()
    return ERROR_HEAD.pack(len(c)) + c + details.encode()


def parse_error(body: bytes) -> tuple[str, str]:
    """(taskstate code, details) of a failed call's response body."""
    (n,) = ERROR_HEAD.unpack_from(body)
    end = ERROR_HEAD.size + n
    return body[ERROR_HEAD.size : end].decode(), body[end:].decode(errors="replace")
