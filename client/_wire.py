"""A change set as CommitRequest pieces, and read chunks as decoded entries.

Both packed as `taskstate.proto.chunks` says: one msgpack blob per list, one C call each.
A change set over the message limit is cut into pieces under it; one entry over it is a
LimitError.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import chain
from typing import Any

from taskstate.proto import chunks
from taskstate.proto import taskstate_pb2 as pb

from ._errors import CodecError, LimitError

ENTRY_OVERHEAD = 16
REQUEST_HEADROOM = 64 << 10


def unpack_keys(task: str, blob: bytes) -> list[str]:
    """A packed list of keys (ReadChunk.packed_deletes)."""
    try:
        keys: list[str] = chunks.unpack(blob, text=True)
    except UnicodeDecodeError:
        raise CodecError(
            f"task {task}: a deleted key sent by the sidecar is not UTF-8 text; it was not "
            "written by taskstate.",
            task,
        ) from None
    return keys


def text_pairs(task: str | None, blob: bytes) -> tuple[list[str], list[bytes]]:
    """A chunk's keys as text and its values as stored; CodecError names a key not UTF-8."""
    raw: list[bytes] = chunks.unpack(blob, text=False)
    try:
        return list(map(bytes.decode, raw[0::2])), raw[1::2]
    except UnicodeDecodeError:  # a stored key that is not UTF-8: name it
        name_bad_utf8(task, raw)
        raise


def decode_chunk(
    task: str,
    chunk: pb.ReadChunk,
    decode: Callable[[str, str, bytes], Any],
    json: bool,
    into: dict[str, Any],
) -> None:
    """One chunk's entries into `into`.

    JSON (`json`: version 1 code, whose stored values need no upgrade): each value goes in
    as its stored bytes, decoded by the block that first reads it (`TaskState.get`, through
    `Schema.decode_stored`): a restore does no work per value, and a batch pays the decoding
    of the keys it reads only. No decoded JSON value is ever `bytes`, so the two cannot be
    confused. Otherwise every value is decoded (unwrapped and upgraded) here.
    """
    if not chunk.packed:
        return
    if json:
        into.update(zip(*text_pairs(task, chunk.packed), strict=True))
        return
    try:
        flat = chunks.unpack(chunk.packed, text=True)
    except UnicodeDecodeError:  # stored bytes that are not UTF-8: name the key
        flat = name_bad_utf8(task, chunks.unpack(chunk.packed, text=False))
    for k, v in zip(flat[0::2], flat[1::2], strict=True):
        into[k] = decode(task, k, v)


def name_bad_utf8(task: str | None, raw: list[bytes]) -> list[Any]:
    """Raise the CodecError for the first stored key or value that is not UTF-8 text."""
    for k, v in zip(raw[0::2], raw[1::2], strict=True):
        key = k.decode(errors="replace")
        try:
            k.decode()
            v.decode()
        except UnicodeDecodeError:
            raise CodecError(
                f"task {task}: stored key {key[:80]!r} (or its value) is not UTF-8 text; it "
                "was not written by taskstate. Operator action: inspect it with `taskstate "
                f"show {task}` and fix or drop the key.",
                task,
            ) from None
    return [x.decode() for x in raw]


def pieces(
    task: str, upserts: list[tuple[str, bytes]], deletes: list[str], budget: int
) -> list[dict[str, Any]]:
    """The change set as CommitRequest fields, in pieces under `budget` bytes each.

    One msgpack blob per side, one C call each; the blobs' length is the size check, so
    the common case never walks the entries in Python.
    """
    ups = chunks.pack(chain.from_iterable(upserts))
    dels = chunks.pack(deletes)
    if len(ups) + len(dels) + ENTRY_OVERHEAD <= budget:
        return [{"packed_upserts": ups, "packed_deletes": dels}]
    return [
        {
            "packed_upserts": chunks.pack(chain.from_iterable(u)),
            "packed_deletes": chunks.pack(d),
        }
        for u, d in split(task, upserts, deletes, budget)
    ]


def split(
    task: str, upserts: list[tuple[str, bytes]], deletes: list[str], budget: int
) -> list[tuple[list[tuple[str, bytes]], list[str]]]:
    """Cut a change set into pieces under `budget` bytes; one entry over it is an error."""
    # the common case, cheaply: a key is at most 4 bytes per character in UTF-8
    keys = chain((k for k, _ in upserts), deletes)
    upper = 4 * sum(map(len, keys)) + sum(len(v) for _, v in upserts)
    if upper + ENTRY_OVERHEAD * (len(upserts) + len(deletes)) <= budget:
        return [(upserts, deletes)]
    parts: list[tuple[list[tuple[str, bytes]], list[str]]] = [([], [])]
    size = 0
    for k, v in upserts:
        n = len(k.encode()) + len(v) + ENTRY_OVERHEAD
        if n > budget:
            raise LimitError(
                f"task {task}: key {k[:80]!r} has a value of {len(v)} bytes, over the message "
                f"limit "
                f"({budget + REQUEST_HEADROOM} bytes, TASKSTATE_MAX_MESSAGE_BYTES). Nothing "
                "was sent. Split the value over several keys, or raise "
                "TASKSTATE_MAX_MESSAGE_BYTES and the sidecar's --max-message-bytes together."
            )
        if size + n > budget and (parts[-1][0] or parts[-1][1]):
            parts.append(([], []))
            size = 0
        parts[-1][0].append((k, v))
        size += n
    for k in deletes:
        n = len(k.encode()) + ENTRY_OVERHEAD
        if size + n > budget and (parts[-1][0] or parts[-1][1]):
            parts.append(([], []))
            size = 0
        parts[-1][1].append(k)
        size += n
    return parts
