"""Restore: a task's committed state streamed to the client in bounded chunks.

A chunk holds about CHUNK_BYTES (a storage page cut smaller when its values are large),
in the packed form (one msgpack blob: the client decodes it in one C call) or, for
older clients, one `Entry` per field.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from itertools import chain

import msgpack

from taskstate.proto import taskstate_pb2 as pb

from . import metrics
from .storage.base import Storage, TaskKey

DEFAULT_CHUNK_FIELDS = 2000
MAX_CHUNK_FIELDS = 20000
CHUNK_BYTES = 1 << 20


async def stream_restore(
    storage: Storage, task: TaskKey, epoch: int, request: pb.RestoreRequest
) -> AsyncIterator[pb.RestoreChunk]:
    """The chunks answering one RestoreRequest, the last one carrying the version."""
    t0 = time.perf_counter()
    n = max(1, min(request.max_fields or DEFAULT_CHUNK_FIELDS, MAX_CHUNK_FIELDS))
    sent = 0
    async for items in storage.restore(task, epoch, n):
        sent += len(items)
        for piece in pieces(items):
            if request.packed:
                # keys and values as msgpack raw strings, straight from Redis: the
                # client decodes (and UTF-8-checks) them in C
                flat = list(chain.from_iterable(piece))
                yield pb.RestoreChunk(packed=msgpack.packb(flat, use_bin_type=False))
            else:
                yield entries_chunk(piece)
    yield pb.RestoreChunk(last=True, version=await storage.version(task))
    metrics.RESTORE_KEYS.inc(sent)
    metrics.RESTORE_SECONDS.observe(time.perf_counter() - t0)


def pieces(
    items: Sequence[tuple[str | bytes, bytes]],
) -> list[Sequence[tuple[str | bytes, bytes]]]:
    """`items` cut into pieces of about CHUNK_BYTES (usually one piece: a storage page)."""
    total = sum(len(v) for _, v in items) + sum(len(k) for k, _ in items) + 8 * len(items)
    if total <= CHUNK_BYTES:
        return [items]
    out: list[Sequence[tuple[str | bytes, bytes]]] = []
    start, size = 0, 0
    for i, (k, v) in enumerate(items):
        size += len(k) + len(v) + 8
        if size >= CHUNK_BYTES:
            out.append(items[start : i + 1])
            start, size = i + 1, 0
    if start < len(items):
        out.append(items[start:])
    return out


def entries_chunk(piece: Sequence[tuple[str | bytes, bytes]]) -> pb.RestoreChunk:
    """A chunk in the per-entry form (keys may come as Redis' UTF-8 bytes)."""
    return pb.RestoreChunk(
        entries=[pb.Entry(key=k if isinstance(k, str) else k.decode(), value=v) for k, v in piece]
    )
