"""A stored value with its expiry and its schema version: the one spelling of the envelope.

A value written with a time to live, or by code of a schema version above 1, is stored as

    ~<expiry>:<version>~<JSON text>

`expiry` is when the key expires, in epoch milliseconds of the component's time (processing
or event time), empty for never; `version` is the schema version that wrote the value,
empty for 1. A value with neither is its JSON text alone. JSON text never starts with `~`,
so the two forms cannot be mistaken for each other. The client writes and reads it
(TaskState), the sidecar reads it (claim-free reads, sweeps), and the Lua scripts keep each
task's expiry index from it (prelude.lua `expiry_of`).
"""

from __future__ import annotations

MARK = b"~"
_MARK_STR = "~"


def wrap(json: bytes, expires_ms: int | None = None, version: int = 1) -> bytes:
    """The stored form of a value's JSON text."""
    if expires_ms is None and version == 1:
        return json
    exp = b"" if expires_ms is None else str(int(expires_ms)).encode()
    ver = b"" if version == 1 else str(int(version)).encode()
    return b"~" + exp + b":" + ver + b"~" + json


def parse(stored: bytes) -> tuple[int | None, int, bytes]:
    """(expiry or None, schema version, JSON text) of a stored value.

    ValueError when a value that starts with the mark is not an envelope.
    """
    if stored[:1] != MARK:
        return None, 1, stored
    end = stored.find(MARK, 1)
    head = stored[1:end] if end > 0 else b""
    exp, colon, ver = head.partition(b":")
    if end < 0 or not colon or not (exp.isdigit() or not exp) or not (ver.isdigit() or not ver):
        raise ValueError(
            f"{stored[:40]!r} starts like an envelope (~expiry:version~) but is not one"
        )
    return (int(exp) if exp else None), (int(ver) if ver else 1), stored[end + 1 :]


def parse_text(stored: str) -> tuple[int | None, int, str]:
    """`parse` for a value already decoded to text (msgpack str)."""
    if not stored.startswith(_MARK_STR):
        return None, 1, stored
    exp, version, json = parse(stored.encode())
    return exp, version, json.decode()


def expired(stored: bytes, now_ms: int) -> bool:
    """Whether a stored value's expiry is at or before `now_ms`."""
    if stored[:1] != MARK:
        return False
    exp = parse(stored)[0]
    return exp is not None and exp <= now_ms
