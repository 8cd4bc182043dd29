"""A TaskStore that measures: the task protocol's metrics in one layer.

As Kafka Streams' MeteredKeyValueStore wraps the store it measures, `MeteredTaskStore`
wraps any TaskStore and counts what its calls did (claims shared, rollbacks, commits and
their keys, bytes and latency, keys read): the RPC bodies and the backends stay free of
metrics. The requests themselves are counted by the call guard (rpc/guard.py), restores
by the Restore stream (restore.py).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence

from taskstate.proto.durability import Durability

from .. import metrics
from .base import TaskStore
from .values import ChangeSet, CommitResult, Delta, OpenResult, TaskKey, TaskMeta


class MeteredTaskStore:
    """`inner`, with the task protocol's metrics (sidecar/metrics.py)."""

    def __init__(self, inner: TaskStore) -> None:
        self.inner = inner

    async def open(
        self,
        task: TaskKey,
        batch: int | None,
        *,
        codec: str,
        writer: str,
        durability: Durability,
        attempt: str = "",
        partitions: int | None = None,
        event_time_ms: int | None = None,
    ) -> OpenResult:
        """See base.TaskStore.open; counts shared claims, rollbacks and expired keys."""
        r = await self.inner.open(
            task,
            batch,
            codec=codec,
            writer=writer,
            durability=durability,
            attempt=attempt,
            partitions=partitions,
            event_time_ms=event_time_ms,
        )
        _opened(task, r)
        return r

    async def open_commit(
        self,
        task: TaskKey,
        batch: int | None,
        changes: ChangeSet,
        *,
        codec: str,
        writer: str,
        durability: Durability,
        attempt: str = "",
        partitions: int | None = None,
        event_time_ms: int | None = None,
    ) -> tuple[OpenResult, CommitResult]:
        """See base.TaskStore.open_commit; measured as its Open and its commit."""
        t0 = time.perf_counter()
        r = await self.inner.open_commit(
            task,
            batch,
            changes,
            codec=codec,
            writer=writer,
            durability=durability,
            attempt=attempt,
            partitions=partitions,
            event_time_ms=event_time_ms,
        )
        _opened(task, r[0])
        _committed(t0, changes)
        return r

    def restore(
        self, task: TaskKey, epoch: int, max_fields: int
    ) -> AsyncIterator[Sequence[str | bytes]]:
        """See base.TaskStore.restore (restore.py measures restores)."""
        return self.inner.restore(task, epoch, max_fields)

    async def commit(
        self,
        task: TaskKey,
        epoch: int,
        batch: int | None,
        changes: ChangeSet,
        position: bytes | None,
        *,
        writer: str,
        durability: Durability,
    ) -> CommitResult:
        """See base.TaskStore.commit; times it and counts its keys and bytes."""
        t0 = time.perf_counter()
        r = await self.inner.commit(
            task, epoch, batch, changes, position, writer=writer, durability=durability
        )
        _committed(t0, changes)
        return r

    async def changes_since(
        self, task: TaskKey, epoch: int, since: str, max_keys: int
    ) -> Delta | None:
        """See base.TaskStore.changes_since."""
        return await self.inner.changes_since(task, epoch, since, max_keys)

    async def mark_done(self, task: TaskKey, batch: int, attempt: str) -> bool:
        """See base.TaskStore.mark_done."""
        return await self.inner.mark_done(task, batch, attempt)

    async def version(self, task: TaskKey) -> str:
        """See base.TaskStore.version."""
        return await self.inner.version(task)

    async def get(self, task: TaskKey, epoch: int, keys: Sequence[str]) -> list[bytes | None]:
        """See base.TaskStore.get; counts the keys found and absent."""
        values = await self.inner.get(task, epoch, keys)
        absent = values.count(None)
        metrics.GET_KEYS.labels("found").inc(len(values) - absent)
        metrics.GET_KEYS.labels("absent").inc(absent)
        return values

    async def describe(self, task: TaskKey) -> TaskMeta:
        """See base.TaskStore.describe."""
        return await self.inner.describe(task)


def _opened(task: TaskKey, r: OpenResult) -> None:
    """Count what an Open did: keys expired, a claim shared, a batch rolled back."""
    if r.expired:
        metrics.EXPIRED_KEYS.labels(task.component).inc(r.expired)
    if r.reused_claim:
        metrics.CLAIMS_REUSED.inc()
    if r.rolled_back:
        metrics.ROLLBACKS.inc()
        metrics.ROLLED_BACK_KEYS.inc(r.rolled_back_keys)


def _committed(t0: float, changes: ChangeSet) -> None:
    """Count a commit applied (started at `t0`): its time, keys and bytes."""
    metrics.COMMIT_SECONDS.observe(time.perf_counter() - t0)
    metrics.COMMITS.inc()
    metrics.COMMIT_KEYS.inc(len(changes))
    metrics.COMMIT_BYTES.inc(changes.nbytes)
