"""Read: a task's state streamed in chunks, whole, some keys, or what changed.

One call serves every read (ReadRequest):

- a task attempt's, fenced by its epoch (a newer claim refuses it): the whole state
  ("full"); only what changed since the version the worker holds ("delta", from the
  change log, else in full, or with delta_only nothing but the current version,
  "not_covered"); or some keys (on-demand reads). The store (TaskStore) fences each step.
- claim-free (operators, the data source): the committed state, all of one version
  (CHANGED when a commit landed meanwhile), whole or matching a glob, some keys, or the
  keys changed after a batch (AdminStore.read).

Chunks hold about CHUNK_BYTES (usually a storage page), packed as `taskstate.proto.chunks`
says; the last one names the version read (claim-free: and its committed batch). A full
restore that runs longer than PROGRESS_AFTER_S logs its progress with an ETA every
PROGRESS_EVERY_S and shows it in a per-task gauge.
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
from .storage.base import AdminStore, TaskStore
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


def page_fields(max_fields: int) -> int:
    """The keys in one page: as asked (0: the default), within bounds."""
    return max(1, min(max_fields or DEFAULT_CHUNK_FIELDS, MAX_CHUNK_FIELDS))


async def fenced_keys(
    store: TaskStore, task: TaskKey, epoch: int, keys: Sequence[str]
) -> AsyncIterator[pb.ReadChunk]:
    """The keys present (with their values), in chunks, the last one marked last.

    Usually one chunk: an on-demand read is one frame, as a unary call's answer is.
    """
    values = await store.get(task, epoch, keys)
    found = [(k, v) for k, v in zip(keys, values, strict=True) if v is not None]
    chunks = [pairs_chunk(piece) for piece in pieces(found)] if found else [pb.ReadChunk()]
    chunks[-1].last = True
    for chunk in chunks:
        yield chunk


async def restore(
    store: TaskStore, task: TaskKey, epoch: int, max_fields: int, since: str, delta_only: bool
) -> AsyncIterator[pb.ReadChunk]:
    """The whole state, or what changed since version `since` (see the module docstring)."""
    t0 = time.perf_counter()
    if since:
        delta = await store.changes_since(task, epoch, since, DELTA_MAX_KEYS)
        if delta is not None:
            for chunk in _delta_chunks(delta.upserts, delta.deletes):
                yield chunk
            yield pb.ReadChunk(last=True, delta=True, version=delta.version)
            metrics.RESTORES.labels("delta").inc()
            metrics.RESTORE_KEYS.inc(len(delta.upserts) + len(delta.deletes))
            metrics.RESTORE_SECONDS.observe(time.perf_counter() - t0)
            return
        if delta_only:
            yield pb.ReadChunk(last=True, not_covered=True, version=await store.version(task))
            metrics.RESTORES.labels("not_covered").inc()
            return
    progress = _Progress(store, task, t0)
    try:
        async for flat in store.restore(task, epoch, max_fields):
            for chunk in flat_chunks(flat):
                yield chunk
            await progress.sent(len(flat) // 2)
        yield pb.ReadChunk(last=True, version=await store.version(task))
    finally:
        progress.end()
    metrics.RESTORES.labels("full").inc()
    metrics.RESTORE_KEYS.inc(progress.restored)
    metrics.RESTORE_SECONDS.observe(time.perf_counter() - t0)


async def claim_free(
    store: AdminStore,
    task: TaskKey,
    max_fields: int,
    pattern: str,
    keys: Sequence[str] | None,
    since_batch: int | None,
) -> AsyncIterator[pb.ReadChunk]:
    """The committed state without a claim, all of one version (AdminStore.read)."""
    kind = "keys" if keys is not None else "changes" if since_batch is not None else "whole"
    delta = since_batch is not None
    pages = store.read(
        task, max_fields, pattern=pattern or None, keys=keys, since_batch=since_batch
    )
    sent = 0
    async for page in pages:
        if page.last:
            metrics.READ_KEYS.labels(kind).inc(sent)
            yield pb.ReadChunk(
                last=True, version=page.version, committed_batch=page.batch, delta=delta
            )
            return
        if page.deletes:
            sent += len(page.deletes)
            yield delete_chunk(page.deletes)
        for chunk in flat_chunks(page.flat) if page.flat else ():
            chunk.delta = delta
            yield chunk
        sent += len(page.flat) // 2
        for piece in pieces(page.items) if page.items else ():
            chunk = pairs_chunk(piece)
            chunk.delta = delta
            yield chunk
        sent += len(page.items)


class _Progress:
    """A full restore's progress: a gauge while it runs, a log line with an ETA when long."""

    def __init__(self, store: TaskStore, task: TaskKey, t0: float) -> None:
        self.store = store
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
            self.expected = (await self.store.describe(self.task)).size
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
) -> list[pb.ReadChunk]:
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


def pairs_chunk(piece: Sequence[tuple[str | bytes, bytes]]) -> pb.ReadChunk:
    """A chunk of keys and values as they came from Redis (the client decodes them in C)."""
    return pb.ReadChunk(packed=chunks.pack(chain.from_iterable(piece)))


def flat_chunks(flat: Sequence[str | bytes]) -> list[pb.ReadChunk]:
    """A page [key1, value1, ...] as chunks of about CHUNK_BYTES (usually one)."""
    if sum(map(len, flat)) + 4 * len(flat) <= CHUNK_BYTES:  # in C: the common case
        return [pb.ReadChunk(packed=chunks.pack(flat))]
    # values are bytes (keys: str, or Redis' UTF-8 bytes)
    pairs = cast(list[tuple[str | bytes, bytes]], list(zip(flat[0::2], flat[1::2], strict=True)))
    return [pairs_chunk(piece) for piece in pieces(pairs)]


def delete_chunk(deletes: Sequence[str | bytes]) -> pb.ReadChunk:
    """A chunk of deleted keys (a delta)."""
    return pb.ReadChunk(delta=True, packed_deletes=chunks.pack(deletes))
