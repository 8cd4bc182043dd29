"""Claim-free reads of a task's committed state: whole, some keys, or what changed.

They serve `taskstate show/export` and the data source (`spark.read.format("taskstate")`)
and claim nothing, so they never fence a running attempt. Each answer is one committed
version, ending with a last page that names it and its batch:

- whole: HSCAN pages between two reads of the version token, which moves on every
  commit and rollback; CHANGED when it moved (the caller reads again);
- some keys: lua/read_keys.lua, one atomic step per page of keys, every page at the
  version of the first (CHANGED otherwise);
- changed since a batch: lua/read_changes.lua, one atomic step that names the keys from
  the change log and reads their values; NOT_FOUND naming the oldest batch the log
  covers when it does not reach back that far.

Every read is refused (PARTITIONS) while a rescale or a write of the data source holds
the task: what it holds is about to be replaced. A key whose time to live has run out is
left out (a deleted key, in a read of changes) even before a batch or a sweep deletes it:
in processing time by the clock, in event time by the task's last batch's now.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import redis.exceptions as rex

from taskstate.proto import codes, envelope

from ... import errors
from ...errors import SidecarError
from ..values import ReadPage, TaskKey
from .keys import task_keys
from .replies import fields, text
from .routing import Connection
from .scan import Scanner, ServerChangedError
from .scripts import Refused, refusal

KEYS_PER_STEP = 5000  # keys read in one atomic step of read_keys.lua


class Reader:
    """The claim-free reads (`AdminStore.read`) on one Redis connection."""

    def __init__(self, conn: Connection, scanner: Scanner) -> None:
        self._conn = conn
        self._scanner = scanner

    async def whole(
        self, task: TaskKey, pattern: str | None, max_fields: int
    ) -> AsyncIterator[ReadPage]:
        """Every key (matching `pattern`), all of one version; CHANGED if a commit landed."""
        meta, data = task_keys(task)[:2]
        before = await self._head(task, meta)
        now = await self._now(meta)
        try:
            async for flat in self._scanner.flat_pages(data, max_fields, pattern, "read"):
                yield ReadPage(flat=_alive_flat(flat, now))
        except ServerChangedError:
            pass  # another server answers now: what was sent may not be one version
        else:
            if await self._head(task, meta) == before:
                yield ReadPage(last=True, version=before[0], batch=before[1])
                return
        raise SidecarError(
            codes.CHANGED,
            f"task {task.fq}: the state changed while it was read (a commit, a rollback or "
            "a failover). What was sent is not one version: read it again.",
        )

    async def keys(self, task: TaskKey, keys: Sequence[str]) -> AsyncIterator[ReadPage]:
        """Only `keys` (those present), at one version."""
        meta, data = task_keys(task)[:2]
        now = await self._now(meta)
        at = ""
        version, batch = "", -1
        for i in range(0, max(len(keys), 1), KEYS_PER_STEP):
            page = keys[i : i + KEYS_PER_STEP]
            try:
                r = await self._script("read_keys", task, (meta, data), page, epoch="", at=at)
            except _MovedError:
                raise SidecarError(
                    codes.CHANGED,
                    f"task {task.fq}: the state changed while its keys were read: read again.",
                ) from None
            f = fields(r)
            version, batch = text(f["version"]), int(f["batch"])
            at = version.rpartition(":")[2]
            pairs = zip(page, f["values"], strict=True)
            found = _alive(((k, v) for k, v in pairs if v is not None), now)
            if found:
                yield ReadPage(found)
        yield ReadPage(last=True, version=version, batch=batch)

    async def changes(
        self, task: TaskKey, since_batch: int, max_fields: int
    ) -> AsyncIterator[ReadPage]:
        """The keys changed after `since_batch`: their values now, and the deleted ones."""
        meta, data, _, log = task_keys(task)
        now = await self._now(meta)
        r = await self._script("read_changes", task, (meta, data, log), (), since=str(since_batch))
        f = fields(r)
        version, batch = text(f["version"]), int(f["batch"])
        if "pairs" not in f:
            raise errors.not_covered(task.fq, since_batch, int(f["covered"]))
        flat = f["pairs"]
        items: list[tuple[Any, bytes]] = []
        deletes: list[Any] = []
        for k, v in zip(flat[0::2], flat[1::2], strict=True):
            if v and not envelope.expired(v, now):
                items.append((k, v))
            else:
                deletes.append(k)
        for i in range(0, len(items), max_fields):
            yield ReadPage(items[i : i + max_fields])
        if deletes:
            yield ReadPage(deletes=deletes)
        yield ReadPage(last=True, version=version, batch=batch)

    async def _now(self, meta: str) -> int:
        """What expiry is measured against: the clock, or in event time the task's now."""
        client = self._conn.client
        kind, now = await self._conn.run("read", lambda: client.hmget(meta, "time", "now_ms"))
        last = int(text(now) or 0)
        return last if text(kind) == "event" else max(last, int(time.time() * 1000))

    async def _head(self, task: TaskKey, meta: str) -> tuple[str, int]:
        """(version token, committed batch); NOT_FOUND / PARTITIONS as the scripts refuse."""
        client = self._conn.client
        gen, ver, batch, lock = await self._conn.run(
            "read", lambda: client.hmget(meta, "gen", "ver", "batch", "rescale")
        )
        if lock is not None:  # a placeholder of a write too: it holds the lock, no state
            raise refusal(rex.ResponseError(f"TSRESCALING {text(lock)}"), Refused(task.fq, "read"))
        if gen is None:
            raise errors.not_found(task.fq, task.namespace)
        return f"{text(gen)}:{text(ver) or '0'}", int(text(batch) or -1)

    async def _script(
        self, name: str, task: TaskKey, keys: Sequence[str], rest: Sequence[Any], **args: str
    ) -> Any:
        argv = self._conn.scripts[name].args(rest, **args)

        async def call() -> Any:
            return await self._conn.evalsha(name, keys, argv)

        try:
            return await self._conn.run("read", call)
        except rex.ResponseError as exc:
            if str(exc).startswith("TSMOVED"):
                raise _MovedError from None
            raise refusal(exc, Refused(task.fq, name)) from None


def _alive_flat(flat: list[bytes], now: int) -> list[bytes]:
    """[key, value, ...] without the pairs whose value has expired by `now`."""
    if not any(v[:1] == envelope.MARK for v in flat[1::2]):  # the common case: no envelope
        return flat
    return [x for k, v in zip(flat[0::2], flat[1::2], strict=True)
            if not envelope.expired(v, now) for x in (k, v)]  # fmt: skip


def _alive(items: Any, now: int) -> list[tuple[Any, bytes]]:
    """The pairs whose value has not expired by `now` (most have no envelope at all)."""
    return [(k, v) for k, v in items if v[:1] != envelope.MARK or not envelope.expired(v, now)]


class _MovedError(Exception):
    """The state moved past the version of an earlier page of the same read."""
