"""The task protocol in process memory: for unit tests and `taskstate.testing`.

Behaves like the Redis backend's task store (same errors, same rollback rules), with no
server. The tasks live in a `MemoryState` that the operators' calls (admin.py) share.
`MemoryState.fail_next(op, exc)` injects a fault into the next call of an operation.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from taskstate.proto.durability import Durability
from taskstate.proto.versions import Version

from ... import errors
from ..values import (
    ChangeSet,
    CommitResult,
    Delta,
    OpenResult,
    TaskKey,
    TaskMeta,
)
from .task import (
    _ABSENT,
    _SUPERSEDED_MAX,
    _apply_edits,
    _chunks,
    _log_commit,
    _restart_log,
    _restore_stash,
    _Task,
    expire,
    launched_before,
    same_application,
)


class MemoryState:
    """Every task, the namespaces' records and partition counts, and injected faults."""

    def __init__(self) -> None:
        self.tasks: dict[TaskKey, _Task] = {}
        self.records: set[str] = set()  # namespaces adopted or reset (redis: ts:ns:{ns})
        # (namespace, component) -> its partition count (redis: partitions/<comp> in ts:ns)
        self.partition_counts: dict[tuple[str, str], int] = {}
        # (namespace, component) -> a write of the data source under way (seed.py), and
        # what settles an abandoned one (set by the backend): the same rules as Redis'
        self.seeds: dict[tuple[str, str], Any] = {}
        self.settle: Callable[[str, str | None], list[str]] = lambda ns, comp: []
        self._faults: dict[str, BaseException] = {}

    def fail_next(self, op: str, exc: BaseException) -> None:
        """Make the next call of `op` (open, commit, restore, get, changes) raise `exc`."""
        self._faults[op] = exc

    def fault(self, op: str) -> None:
        """Raise the fault injected for `op`, once."""
        exc = self._faults.pop(op, None)
        if exc is not None:
            raise exc

    def known(self, namespace: str) -> bool:
        """Whether the namespace has a record or a task."""
        return namespace in self.records or any(k.namespace == namespace for k in self.tasks)


def _fenced(task: TaskKey, t: _Task | None, epoch: int) -> None:
    if t is None or t.epoch != epoch:
        raise errors.fenced(task.fq, "none" if t is None else t.epoch)


class MemoryTaskStore:
    """Task state in a dict, with the same protocol as the Redis task store."""

    def __init__(self, state: MemoryState) -> None:
        self.state = state

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
        """Claim the task; see base.TaskStore.open."""
        self.state.fault("open")
        component = (task.namespace, task.component)
        if component in self.state.seeds:
            self.state.settle(*component)
            if component in self.state.seeds:
                raise errors.seeding(task.fq)
        t = self.state.tasks.get(task)
        if t is not None and t.codec and t.codec != codec:
            raise errors.codec_mismatch(task.fq, t.codec, codec)
        recorded = self.state.partition_counts.get(component) if t is None else t.partitions
        if recorded is not None and (
            (partitions is not None and partitions != recorded) or task.partition >= recorded
        ):
            raise errors.partitions_changed(task.fq, recorded, partitions)
        if t is not None and batch is not None and t.batch > batch:
            raise errors.state_ahead(task.fq, t.batch, batch)
        if t is not None and t.time == "event" and event_time_ms is None:
            raise errors.event_time_needed(task.fq)
        if t is not None and attempt:
            if t.claim == attempt and t.claim_batch == batch:
                return OpenResult(
                    t.epoch, t.batch, t.position, len(t.data), t.version, False, 0, True,
                    t.now_ms,
                )  # fmt: skip
            if attempt in t.superseded:
                raise errors.fenced(task.fq, t.epoch)
            if batch is not None and t.claim_batch == batch and launched_before(attempt, t.claim):
                raise errors.fenced(task.fq, t.epoch)  # an older attempt that opens late
        replay = t is not None and batch is not None and t.batch == batch and batch >= 0
        if replay and t is not None and t.undo_batch != batch:
            raise errors.cannot_roll_back(task.fq, batch)
        if t is None:
            if batch is not None and batch > 0 and not self.state.known(task.namespace):
                raise errors.state_lost_namespace(task.fq, task.namespace, batch)
            t = self.state.tasks[task] = _Task()
            if partitions is not None:
                self.state.partition_counts.setdefault(component, partitions)
        if t.partitions is None:
            t.partitions = partitions
        if t.claim is not None and t.claim != attempt:
            t.superseded = [*t.superseded, t.claim][-_SUPERSEDED_MAX:]
        t.claim, t.claim_batch = (attempt, batch) if attempt else (None, None)
        t.epoch += 1
        t.codec = codec
        t.last_writer = writer
        if t.stash is not None and batch is not None and batch > t.stash[0]:
            _restore_stash(t)
            replay = False
        rolled, n = False, 0
        if (
            replay
            and t.done is not None
            and t.done[0] == batch
            and t.done[1] != attempt
            and same_application(attempt, t.done[1])
            and t.stash is None
        ):
            t.stash = (t.batch, t.gen, dict(t.data), t.position)
        if replay:
            if t.undo_copy is not None:
                t.data = t.undo_copy
                n = t.undo_n
            else:
                for k, old in t.undo.items():
                    if old is _ABSENT:
                        t.data.pop(k, None)
                    else:
                        t.data[k] = old
                n = len(t.undo)
            if t.log_ver == t.ver and t.undo_copy is None:
                t.log[t.ver + 1] = list(t.undo)
                t.log_batch[t.ver + 1] = t.batch  # the replayed batch
                t.log_n += len(t.undo)
            else:
                _restart_log(t, t.ver + 1, t.prev_batch)
            t.log_ver = t.ver + 1
            t.undo = {}
            t.undo_copy = None
            t.undo_batch = None
            t.batch = t.prev_batch
            t.position = t.prev_position
            t.ver += 1
            t.rollbacks += 1
            t.done = None
            rolled = True
        if t.edit_batch is not None and (batch is None or batch > t.edit_batch):
            _apply_edits(t, -1 if batch is None else batch)
        last = t.batch
        now = event_time_ms if event_time_ms is not None else int(time.time() * 1000)
        if batch is not None and t.now_batch == batch:
            now = t.now_ms  # the batch's now, fixed at its first claim
        expired = expire(t, batch, now)
        t.now_batch, t.now_ms = batch, now
        if event_time_ms is not None:
            t.time = "event"
        return OpenResult(
            t.epoch, last, t.position, len(t.data), t.version, rolled, n, False, now, expired
        )

    async def mark_done(self, task: TaskKey, batch: int, attempt: str) -> bool:
        """See base.TaskStore.mark_done."""
        self.state.fault("done")
        t = self.state.tasks.get(task)
        if t is None or t.claim != attempt or t.claim_batch != batch:
            return False
        t.done = (batch, attempt)
        t.stash = None
        return True

    async def restore(
        self, task: TaskKey, epoch: int, max_fields: int
    ) -> AsyncIterator[Sequence[str | bytes]]:
        """Yield the state in flat pages [key1, value1, ...]."""
        self.state.fault("restore")
        t = self.state.tasks.get(task)
        _fenced(task, t, epoch)
        assert t is not None  # noqa: S101 - checked by _fenced
        for chunk in _chunks(list(t.data.items()), max_fields):
            yield [x for kv in chunk for x in kv]

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
        """See base.TaskStore.open_commit: the two, with no await between them."""
        opened = await self.open(
            task,
            batch,
            codec=codec,
            writer=writer,
            durability=durability,
            attempt=attempt,
            partitions=partitions,
            event_time_ms=event_time_ms,
        )
        committed = await self.commit(
            task, opened.epoch, batch, changes, None, writer=writer, durability=durability
        )
        return opened, committed

    async def commit(
        self,
        task: TaskKey,
        epoch: int,
        batch: int | None,
        change_set: ChangeSet,
        position: bytes | None,
        *,
        writer: str,
        durability: Durability,
    ) -> CommitResult:
        """Apply one change set atomically."""
        self.state.fault("commit")
        t = self.state.tasks.get(task)
        _fenced(task, t, epoch)
        assert t is not None  # noqa: S101 - checked by _fenced
        upserts, deletes = change_set.upserts, change_set.deletes
        keys = [k for k, _ in upserts] + list(deletes)
        before = t.batch
        if batch is not None:
            if batch < t.batch:
                raise errors.state_ahead(task.fq, t.batch, batch)
            changes = len(keys)
            if batch > t.batch or t.undo_batch != batch:
                t.undo = {}
                # the same rule as commit.lua: a whole copy when the batch touches at
                # least a quarter as many keys as the state holds
                t.undo_copy = dict(t.data) if len(t.data) <= 4 * changes else None
                t.undo_n = 0
                t.undo_batch = batch
                t.prev_batch = t.batch
                t.prev_position = t.position
                t.batch = batch
            elif t.undo_copy is None and 0 < len(t.data) <= 4 * changes:
                # commit.lua too: a large change set later in the batch turns it to copy
                # mode (the data with the record applied is the state before the batch)
                as_before = dict(t.data)
                for k, old in t.undo.items():
                    if old is _ABSENT:
                        as_before.pop(k, None)
                    else:
                        as_before[k] = old
                t.undo_copy, t.undo_n, t.undo = as_before, len(t.undo), {}
            if t.undo_copy is not None:
                t.undo_n += changes
            else:
                for k in keys:
                    if k not in t.undo:
                        t.undo[k] = t.data.get(k, _ABSENT)
        for k, v in upserts:
            t.data[k] = v
        for k in deletes:
            t.data.pop(k, None)
        if position is not None:
            t.position = position
        base = t.version
        _log_commit(t, keys, -1 if batch is None else batch, before)
        t.ver += 1
        t.updated_at = time.time()
        t.last_writer = writer
        return CommitResult(version=t.version, size=len(t.data), base_version=base)

    async def changes_since(
        self, task: TaskKey, epoch: int, since: str, max_keys: int
    ) -> Delta | None:
        """The keys changed since `since`; see base.TaskStore.changes_since."""
        self.state.fault("changes")
        t = self.state.tasks.get(task)
        _fenced(task, t, epoch)
        assert t is not None  # noqa: S101 - checked by _fenced
        held = Version.parse(since)
        if held is None or held.gen != t.gen or t.log_ver != t.ver:
            return None
        v = held.counter
        if not t.log_floor <= v <= t.ver:
            return None
        named = [k for at in range(v + 1, t.ver + 1) for k in t.log.get(at, [])]
        if len(named) > max_keys:
            return None
        keys = list(dict.fromkeys(named))
        upserts: list[tuple[str | bytes, bytes]] = [(k, t.data[k]) for k in keys if k in t.data]
        deletes: list[str | bytes] = [k for k in keys if k not in t.data]
        return Delta(t.version, upserts, deletes)

    async def version(self, task: TaskKey) -> str:
        """The version token of the task's committed content."""
        t = self.state.tasks.get(task)
        return t.version if t is not None else ""

    async def get(self, task: TaskKey, epoch: int, keys: Sequence[str]) -> list[bytes | None]:
        """Read keys (remote mode)."""
        self.state.fault("get")
        t = self.state.tasks.get(task)
        _fenced(task, t, epoch)
        assert t is not None  # noqa: S101 - checked by _fenced
        return [t.data.get(k) for k in keys]

    async def describe(self, task: TaskKey) -> TaskMeta:
        """The task's metadata."""
        t = self.state.tasks.get(task)
        if t is None:  # the component's count, which an Open or an import would meet
            counts = self.state.partition_counts
            return TaskMeta(
                task=task, exists=False, partitions=counts.get((task.namespace, task.component))
            )
        return TaskMeta(
            task=task,
            exists=True,
            committed_batch=t.batch,
            epoch=t.epoch,
            position=t.position,
            size=len(t.data),
            version=t.version,
            codec=t.codec,
            layout=1,
            updated_at=t.updated_at,
            last_writer=t.last_writer,
            rollbacks=t.rollbacks,
            partitions=t.partitions
            if t.partitions is not None
            else self.state.partition_counts.get((task.namespace, task.component)),
        )
