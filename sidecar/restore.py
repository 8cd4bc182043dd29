"""Restore: a task's committed state streamed to a worker, whole or as a delta.

A worker that holds a version of the task's state (RestoreRequest.since_version) gets only
the keys changed since, read from the task's change log, when the log still covers that
version ("delta"); otherwise the whole state ("full"), or nothing when the worker asked for a
delta only (it reads keys on demand), in chunks of about CHUNK_BYTES, packed as
`taskstate.proto.chunks` says (the client decodes one in one C call). A full restore that
runs longer than PROGRESS_AFTER_S logs its progress with an ETA every PROGRESS_EVERY_S and
shows it in a per-task gauge.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Sequence
from itertools import chain
from typing import cast

from taskstate.proto import chunks
from taskstate.proto import taskstate_pb2 as pb

from . import metrics
from .storage.base import TaskStore
from .storage.values import TaskKey

log = logging.getLogger("taskstate.sidecar.restore")

DEFAULT_CHUNK_FIELDS = 2000
MAX_CHUNK_FIELDS = 20000
CHUNK_BYTES = 1 << 20
# A delta larger than this is sent in full instead (the log holds at most an eighth of
# the state, so this only bounds the sidecar's memory for one answer).
DELTA_MAX_KEYS = 500_000
PROGRESS_AFTER_S = 3.0
PROGRESS_EVERY_S = 5.0


async def stream_restore(
    storage: TaskStore, task: TaskKey, epoch: int, request: pb.RestoreRequest
) -> AsyncIterator[pb.RestoreChunk]:
    """The chunks answering one RestoreRequest, the last one carrying the version."""
    t0 = time.perf_counter()
    if request.since_version:
        delta = await storage.changes_since(task, epoch, request.since_version, DELTA_MAX_KEYS)
        if delta is not None:
            for chunk in _delta_chunks(delta.upserts, delta.deletes):
                yield chunk
            yield pb.RestoreChunk(last=True, delta=True, version=delta.version)
            metrics.RESTORES.labels("delta").inc()
            metrics.RESTORE_KEYS.inc(len(delta.upserts) + len(delta.deletes))
            metrics.RESTORE_SECONDS.observe(time.perf_counter() - t0)
            return
        if request.delta_only:
            yield pb.RestoreChunk(last=True, not_covered=True, version=await storage.version(task))
            metrics.RESTORES.labels("not_covered").inc()
            return
    n = max(1, min(request.max_fields or DEFAULT_CHUNK_FIELDS, MAX_CHUNK_FIELDS))
    progress = _Progress(storage, task, t0)
    try:
        async for flat in storage.restore(task, epoch, n):
            for chunk in flat_chunks(flat):
                yield chunk
            await progress.sent(len(flat) // 2)
        yield pb.RestoreChunk(last=True, version=await storage.version(task))
    finally:
        progress.end()
    metrics.RESTORES.labels("full").inc()
    metrics.RESTORE_KEYS.inc(progress.restored)
    metrics.RESTORE_SECONDS.observe(time.perf_counter() - t0)


class _Progress:
    """A full restore's progress: a gauge while it runs, a log line with an ETA when long."""

    def __init__(self, storage: TaskStore, task: TaskKey, t0: float) -> None:
        self.storage = storage
        self.task = task
        self.t0 = t0
        self.restored = 0
        self.expected: int | None = None
        self.next_log = t0 + PROGRESS_AFTER_S
        self.gauge = False

    async def sent(self, n: int) -> None:
        self.restored += n
        now = time.perf_counter()
        if now < self.next_log:
            if self.gauge:
                metrics.RESTORE_PROGRESS.labels(self.task.fq, "restored").set(self.restored)
            return
        if self.expected is None:
            self.expected = (await self.storage.describe(self.task)).size
        self.gauge = True
        metrics.RESTORE_PROGRESS.labels(self.task.fq, "restored").set(self.restored)
        metrics.RESTORE_PROGRESS.labels(self.task.fq, "expected").set(self.expected)
        elapsed = now - self.t0
        rate = self.restored / elapsed if elapsed > 0 else 0.0
        left = max(self.expected - self.restored, 0)
        log.info(
            "restoring",
            extra={
                "task": self.task.fq,
                "restored": self.restored,
                "expected": self.expected,
                "keys_per_s": round(rate),
                "eta_s": round(left / rate, 1) if rate else None,
            },
        )
        self.next_log = now + PROGRESS_EVERY_S

    def end(self) -> None:
        if self.gauge:
            for kind in ("restored", "expected"):
                try:
                    metrics.RESTORE_PROGRESS.remove(self.task.fq, kind)
                except KeyError:
                    pass


def _delta_chunks(
    upserts: Sequence[tuple[str | bytes, bytes]], deletes: Sequence[str | bytes]
) -> list[pb.RestoreChunk]:
    """A delta's chunks: its upserts cut like a full restore's, its deletes with the first."""
    out = [pairs_chunk(piece) for piece in (pieces(upserts) if upserts else [[]])]
    for chunk in out:
        chunk.delta = True
    if deletes:
        out[0].MergeFrom(delete_chunk(deletes))
    return out


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


def pairs_chunk(piece: Sequence[tuple[str | bytes, bytes]]) -> pb.RestoreChunk:
    """A chunk of keys and values as they came from Redis (the client decodes them in C)."""
    return pb.RestoreChunk(packed=chunks.pack(chain.from_iterable(piece)))


def flat_chunks(flat: Sequence[str | bytes]) -> list[pb.RestoreChunk]:
    """A page [key1, value1, ...] as chunks of about CHUNK_BYTES (usually one)."""
    if sum(map(len, flat)) + 4 * len(flat) <= CHUNK_BYTES:  # in C: the common case
        return [pb.RestoreChunk(packed=chunks.pack(flat))]
    # values are bytes (keys: str, or Redis' UTF-8 bytes)
    pairs = cast(list[tuple[str | bytes, bytes]], list(zip(flat[0::2], flat[1::2], strict=True)))
    return [pairs_chunk(piece) for piece in pieces(pairs)]


def delete_chunk(deletes: Sequence[str | bytes]) -> pb.RestoreChunk:
    """A chunk of deleted keys (a delta)."""
    return pb.RestoreChunk(delta=True, packed_deletes=chunks.pack(deletes))
