"""Operators' calls in process memory: the same rules as redis/admin.py."""

from __future__ import annotations

import fnmatch
import time
from collections.abc import AsyncIterator, Sequence

from taskstate.proto import envelope
from taskstate.proto.durability import Durability

from ... import errors
from ..values import (
    Check,
    DoctorReport,
    ReadPage,
    RescaleProgress,
    ServerReport,
    TaskKey,
    TaskMeta,
)
from .rescale import rescale
from .store import MemoryState, MemoryTaskStore
from .task import _ABSENT, _chunks, _log, _Task


class MemoryAdmin:
    """The operators' calls on a MemoryState."""

    def __init__(self, state: MemoryState, tasks: MemoryTaskStore) -> None:
        self.state = state
        self._tasks = tasks

    async def list_tasks(self, namespace: str, component: str | None) -> list[TaskMeta]:
        """Every task of the namespace."""
        keys = sorted(
            (
                k
                for k in self.state.tasks
                if k.namespace == namespace and (component is None or k.component == component)
            ),
            key=lambda k: (k.component, k.partition),
        )
        return [await self._tasks.describe(k) for k in keys]

    async def namespaces(self) -> list[str]:
        """Every namespace that has tasks."""
        return sorted({k.namespace for k in self.state.tasks})

    async def drop(self, namespace: str, component: str | None, partition: int | None) -> int:
        """Delete tasks."""
        doomed = [
            k
            for k in self.state.tasks
            if k.namespace == namespace
            and (component is None or k.component == component)
            and (partition is None or k.partition == partition)
        ]
        for k in doomed:
            del self.state.tasks[k]
        if partition is None:  # a component dropped whole may come back at any count
            for c in [c for c in self.state.partition_counts if c[0] == namespace]:
                if component is None or c[1] == component:
                    del self.state.partition_counts[c]
        if doomed:
            self.state.records.add(namespace)
        return len(doomed)

    async def adopt(self, namespace: str) -> tuple[bool, int]:
        """Record the namespace as going on from here: (known before, tasks)."""
        known = self.state.known(namespace)
        self.state.records.add(namespace)
        return known, sum(1 for k in self.state.tasks if k.namespace == namespace)

    def rescale(
        self, namespace: str, component: str, to: int, key_type: str, quiet_s: float
    ) -> AsyncIterator[RescaleProgress]:
        """See base.TaskStore.rescale (rescale.py)."""
        return rescale(self.state, namespace, component, to, key_type, quiet_s)

    async def edit(self, task: TaskKey, key: str, value: bytes | None, codec: str) -> bool:
        """See base.TaskStore.edit (as lua/edit.lua)."""
        t = self.state.tasks.get(task)
        if t is None:
            raise errors.not_found(task.fq, task.namespace)
        if t.codec and t.codec != codec:
            raise errors.codec_mismatch(task.fq, t.codec, codec)
        had = key in t.data
        if value is None:
            t.data.pop(key, None)
            if t.undo_copy is not None:
                t.undo_copy.pop(key, None)
            elif key in t.undo:
                t.undo[key] = _ABSENT
        else:
            t.data[key] = value
        _log(t, [key], t.batch + 1)  # the job sees it from the next batch
        if t.edit_batch is None:
            t.edits = {}
        t.edits[key] = value
        t.edit_batch = t.batch
        t.updated_at = time.time()
        return had

    async def read(
        self,
        task: TaskKey,
        max_fields: int,
        *,
        pattern: str | None = None,
        keys: Sequence[str] | None = None,
        since_batch: int | None = None,
    ) -> AsyncIterator[ReadPage]:
        """The committed state without a claim (one version: nothing runs meanwhile)."""
        if (task.namespace, task.component) in self.state.seeds:
            raise errors.seeding(task.fq)
        t = self.state.tasks.get(task)
        if t is None:
            raise errors.not_found(task.fq, task.namespace)
        deletes: list[str | bytes] = []
        now = t.now_ms if t.time == "event" else max(t.now_ms, int(time.time() * 1000))

        def alive(k: str) -> bool:
            return k in t.data and not envelope.expired(t.data[k], now)

        if keys is not None:
            items = [(k, t.data[k]) for k in keys if alive(k)]
        elif since_batch is not None:
            covered = t.batch
            if t.log_ver == t.ver:
                covered = -1 if t.log_floor == 0 else t.log_floor_batch or t.batch
            if since_batch < covered:
                raise errors.not_covered(task.fq, since_batch, covered)
            changed = [
                k
                for v in range(t.log_floor + 1, t.ver + 1)
                if t.log_batch.get(v, since_batch + 1) > since_batch
                for k in t.log.get(v, [])
            ]
            named = list(dict.fromkeys(changed))
            items = [(k, t.data[k]) for k in named if alive(k)]
            deletes = [k for k in named if not alive(k)]
        else:
            items = [
                (k, v)
                for k, v in t.data.items()
                if (pattern is None or fnmatch.fnmatchcase(k, pattern)) and alive(k)
            ]
        for chunk in _chunks(items, max_fields):
            yield ReadPage(chunk)
        if deletes:
            yield ReadPage(deletes=deletes)
        yield ReadPage(last=True, version=t.version, batch=t.batch)

    async def import_task(
        self,
        task: TaskKey,
        entries: Sequence[tuple[str, bytes]],
        *,
        committed_batch: int,
        position: bytes | None,
        codec: str,
        replace: bool,
        append_epoch: int | None,
        partitions: int | None = None,
    ) -> tuple[int, int]:
        """Create or extend a task from exported state (the partition count as Redis')."""
        t = self.state.tasks.get(task)
        if append_epoch is not None:
            if t is None or t.epoch != append_epoch:
                raise errors.fenced(task.fq, t.epoch if t else "none")
            t.ver += 1
        else:
            component = (task.namespace, task.component)
            recorded = self.state.partition_counts.get(component)
            count = partitions if partitions is not None else recorded
            if recorded is not None and count != recorded:
                raise errors.import_partitions(task.fq, recorded, count)
            if count is not None and task.partition >= count:
                raise errors.import_partitions(task.fq, count, count)
            if t is not None and not replace:
                raise errors.already_exists(task.fq)
            if count is not None:
                self.state.partition_counts[component] = count
            t = _Task(
                epoch=(t.epoch if t else 0) + 1,
                batch=committed_batch,
                position=position,
                codec=codec,
                ver=1,
                updated_at=time.time(),
                last_writer="taskstate import",
                partitions=count,
            )
            self.state.tasks[task] = t
        t.data.update(entries)
        return t.epoch, len(t.data)

    async def sweep(self, task: TaskKey, idle_s: float) -> int:
        """See base.AdminStore.sweep (as lua/sweep.lua)."""
        t = self.state.tasks.get(task)
        now = time.time()
        if t is None or t.time == "event" or now - t.updated_at < idle_s:
            return 0
        now_ms = int(now * 1000)
        gone = [k for k, v in t.data.items() if envelope.expired(v, now_ms)]
        for k in gone:
            del t.data[k]
        if gone:
            _log(t, gone, t.batch + 1)
            t.now_ms = now_ms
        return len(gone)

    async def doctor(self, durability: Durability) -> DoctorReport:
        """Process memory: nothing survives the sidecar, so only 'applied' is possible."""
        ok = not durability.replicas and not durability.fsynced
        detail = "possible" if ok else "the in-memory store has no replicas and no disk"
        return DoctorReport(
            topology="memory",
            servers=[ServerReport("memory", "master", "-", False, "-", 0)],
            checks=[Check(f"durability {durability}", ok, detail)],
        )
