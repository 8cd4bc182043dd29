"""The task protocol on Redis: task state in hashes, every step an atomic Lua script.

Open (lua/open.lua) claims, rolls back a replayed batch and refuses what must be refused;
Commit (lua/commit.lua) applies one change set and its rollback record; a restore streams
the hash in pages; a delta restore reads the change log (changelog.py); a read of some keys
is lua/read_keys.lua. Every one is fenced by the task's epoch. The keys are spelled in keys.py;
the namespace's index and record (records.py) tell a new task from a lost one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from itertools import chain
from typing import Any

import redis.exceptions as rex

from taskstate.proto import codes
from taskstate.proto.durability import Durability
from taskstate.proto.versions import Version, new_generation

from ... import errors
from ...errors import SidecarError
from ..values import ChangeSet, CommitResult, Delta, OpenResult, TaskKey, TaskMeta
from . import meta
from .changelog import changed_keys, log_entry
from .keys import stash_key, task_keys, ttl_key
from .opening import OpenScript
from .records import NamespaceRecords
from .replies import fields, text
from .routing import Connection
from .scan import Scanner, ServerChangedError
from .scripts import Refused, refusal
from .seen import SeenVersions
from .waits import DurabilityWaits

log = logging.getLogger("taskstate.sidecar.redis")

_GET_CHUNK = 2000
# Below this many fields a restore reads the hash in one HGETALL; above, HSCAN pages.
_HGETALL_MAX = 5000


class RedisTaskStore:
    """The task protocol (base.TaskStore) on one Redis connection."""

    def __init__(
        self,
        conn: Connection,
        waits: DurabilityWaits,
        records: NamespaceRecords,
        scanner: Scanner,
        settle: Callable[[str, str | None], Awaitable[list[str]]],
    ) -> None:
        self._conn = conn
        self._waits = waits
        self._records = records
        self._scanner = scanner
        self._settle = settle  # finishes or undoes an abandoned write of the data source
        self._seen = SeenVersions()
        self._opening = OpenScript(conn, records, settle, self._seen)

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
        args = await self._open_args(task, batch, codec, writer, durability, attempt,
                                     partitions, event_time_ms)  # fmt: skip
        r = await self._opening.run(task, batch, codec, args, partitions)
        result = await self._opened(task, args, r)
        self._seen.note(task, result.version, result.committed_batch)
        return result

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
        """Open, then commit under the epoch it gave: one script (lua/open_commit.lua)."""
        args = await self._open_args(task, batch, codec, writer, durability, attempt,
                                     partitions, event_time_ms)  # fmt: skip
        commit = {
            "position": b"",
            "log_entry": log_entry(changes.keys),
            "upserts": changes.packed_upserts,
            "deletes": changes.packed_deletes,
        }
        wait = await self._waits.wait_for(durability, task)
        r = await self._opening.run(task, batch, codec, args, partitions, commit, wait)
        r, acked = self._acked(task, durability, wait, r)
        f = fields(r)
        opened = await self._opened(task, args, f["open"])  # (the commit's version is noted)
        return opened, self._committed(task, batch, f["commit"], acked)

    async def _open_args(
        self,
        task: TaskKey,
        batch: int | None,
        codec: str,
        writer: str,
        durability: Durability,
        attempt: str,
        partitions: int | None,
        event_time_ms: int | None,
    ) -> dict[str, str]:
        if durability.fsynced:
            await self._waits.check_fsync(task)
        seen = self._seen.get(task)
        return {
            "batch": "" if batch is None else str(batch),
            "new_gen": new_generation(),
            "now": f"{time.time():.3f}",
            "writer": writer,
            "codec": codec,
            "attempt": attempt,
            "ask_index": "1",  # a task with no keys: TSNEW, so that the index is asked first
            "seen_gen": seen.gen if seen else "",  # Redis must not be behind this version
            "seen_ver": str(seen.ver) if seen else "",
            "partitions": "" if partitions is None else str(partitions),
            "partition": str(task.partition),
            "event_time": "" if event_time_ms is None else str(event_time_ms),
            "clock_ms": str(int(time.time() * 1000)),
        }

    async def _opened(self, task: TaskKey, args: dict[str, str], r: Any) -> OpenResult:
        """What open.lua answered; the task joins the namespace's index (not noted seen)."""
        if args["ask_index"] == "0":  # a task with no keys before: it joins the index now
            await self._records.index(task)
        else:
            await self._records.index_often(task)
        f = fields(r)
        return OpenResult(
            epoch=int(f["epoch"]),
            committed_batch=int(f["batch"]),
            position=f["position"] if int(f["has_position"]) else None,
            size=int(f["size"]),
            version=text(f["version"]),
            rolled_back=bool(int(f["rolled_back"])),
            rolled_back_keys=int(f["rolled_back_keys"]),
            reused_claim=bool(int(f["reused_claim"])),
            now_ms=int(f["now_ms"]),
            expired=int(f["expired"]),
        )

    async def mark_done(self, task: TaskKey, batch: int, attempt: str) -> bool:
        """See base.TaskStore.mark_done (lua/done.lua)."""
        argv = self._conn.scripts["done"].args(batch=str(batch), attempt=attempt)
        keys = (task_keys(task)[0], stash_key(task))

        async def call() -> Any:
            return await self._conn.evalsha("done", keys, argv)

        return bool(int(await self._conn.run("done", call)))

    async def restore(
        self, task: TaskKey, epoch: int, max_fields: int
    ) -> AsyncIterator[Sequence[str | bytes]]:
        """Yield the state in flat pages; memory is bounded by a page, not the state.

        Pages as Redis sends them: no dict, no pairs, so the sidecar hands a page on in one
        msgpack call.
        """
        meta_key, data, _, _ = task_keys(task)
        conn = self._conn
        await self._check_epoch(task, meta_key, epoch)
        size = await conn.run("restore", lambda: conn.client.hlen(data))
        if size <= min(_HGETALL_MAX, max_fields):
            yield await conn.run("restore", lambda: self._hgetall(data))
        else:
            # A server change mid-scan starts the scan again (scan.py): fields sent
            # twice are identical (the epoch fences writers), so the client just overwrites.
            restarts = 0
            while True:
                try:
                    pages = self._scanner.flat_pages(data, max_fields, None, "restore")
                    async for flat in pages:
                        yield flat  # keys stay UTF-8 bytes: no per-field work
                    break
                except ServerChangedError:
                    restarts += 1
                    if restarts > 5:
                        raise SidecarError(
                            codes.STORAGE_UNAVAILABLE,
                            f"task {task.fq}: the Redis server holding the state changed 5 "
                            "times during one restore. Retry when the failover or slot "
                            "migration is over.",
                        ) from None
                    log.warning(
                        "the server changed during a restore: scanning again",
                        extra={"task": task.fq},
                    )
        # A newer claim during the scan makes what we sent unreliable: fail, do not guess.
        await self._check_epoch(task, meta_key, epoch)

    async def changes_since(
        self, task: TaskKey, epoch: int, since: str, max_keys: int
    ) -> Delta | None:
        """The keys changed since `since`, from the change log; see base.TaskStore.

        changes.lua names the keys (one msgpack array per version); read_keys.lua reads their
        values in pages, each checking that the state is still at the version the keys
        were named for (else None: the caller restores in full).
        """
        found = await changed_keys(self._conn, task, epoch, since, max_keys)
        if found is None:
            return None
        version, changed = found
        try:
            now = Version.parse(version)
            at = "" if now is None else str(now.counter)
            values = await self._values(task, epoch, changed, at) if changed else []
        except _StateMovedError:
            return None  # a commit landed since the keys were named
        upserts: list[tuple[str | bytes, bytes]] = []
        deletes: list[str | bytes] = []
        for k, v in zip(changed, values, strict=True):
            if v is None:
                deletes.append(k)
            else:
                upserts.append((k, v))
        return Delta(version, upserts, deletes)

    async def _hgetall(self, key: str) -> list[bytes]:
        """HGETALL flat: [key1, value1, ...].

        Redis answers a map under RESP3, which the parser makes a dict whatever the
        command's name: it is flattened in C here.
        """
        items: dict[bytes, bytes] = await self._conn.client.hgetall(key)
        return list(chain.from_iterable(items.items()))

    async def _check_epoch(self, task: TaskKey, meta_key: str, epoch: int) -> None:
        client = self._conn.client
        current = await self._conn.run("epoch", lambda: client.hget(meta_key, "epoch"))
        if current is None or int(current) != epoch:
            raise errors.stale_epoch(task.fq, text(current) or "none", epoch)

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
        """Apply one change set atomically; see base.TaskStore.commit."""
        keys = (*task_keys(task), ttl_key(task))
        args = self._conn.scripts["commit"].args(
            epoch=str(epoch),
            batch="" if batch is None else str(batch),
            position=b"" if position is None else b"+" + position,
            now=f"{time.time():.3f}",
            writer=writer,
            log_entry=log_entry(changes.keys),
            upserts=changes.packed_upserts,
            deletes=changes.packed_deletes,
        )
        wait = await self._waits.wait_for(durability, task)

        async def call() -> Any:
            return await self._conn.evalsha("commit", keys, args, wait)

        try:
            r = await self._conn.run("commit", call)
        except rex.ResponseError as exc:
            raise refusal(exc, Refused(task.fq, "commit", batch, epoch=epoch)) from None
        r, acked = self._acked(task, durability, wait, r)
        return self._committed(task, batch, r, acked)

    def _acked(
        self, task: TaskKey, durability: Durability, wait: tuple[int, ...], r: Any
    ) -> tuple[Any, int]:
        """A write script's reply, and the replicas that acknowledged it (WAIT after it)."""
        if not wait:
            return r, 0
        return r[0], self._waits.check_acks(task, durability, wait, r[1])

    def _committed(self, task: TaskKey, batch: int | None, r: Any, acked: int) -> CommitResult:
        """What commit.lua answered; this sidecar notes the version it saw."""
        f = fields(r)
        result = CommitResult(
            version=text(f["version"]),
            size=int(f["size"]),
            replicas_acked=acked,
            base_version=text(f["base_version"]),
        )
        self._seen.note(task, result.version, batch)
        return result

    async def get(self, task: TaskKey, epoch: int, keys: Sequence[str]) -> list[bytes | None]:
        """Read keys (remote mode, on-demand reads), fenced by epoch."""
        return await self._values(task, epoch, keys)

    async def _values(
        self, task: TaskKey, epoch: int, keys: Sequence[Any], at: str = ""
    ) -> list[bytes | None]:
        """The values of `keys` (None: absent), fenced by epoch, in pages (read_keys.lua).

        With `at`, every page also checks that the state is at that version counter:
        _StateMovedError when it moved.
        """
        meta_key, data, _, _ = task_keys(task)
        script = self._conn.scripts["read_keys"]
        out: list[bytes | None] = []
        for i in range(0, max(len(keys), 1), _GET_CHUNK):
            argv = script.args(keys[i : i + _GET_CHUNK], epoch=str(epoch), at=at)

            async def call(argv: list[Any] = argv) -> Any:
                return await self._conn.evalsha("read_keys", (meta_key, data), argv)

            try:
                out.extend(fields(await self._conn.run("get", call))["values"])
            except rex.ResponseError as exc:
                if str(exc).startswith("TSMOVED"):
                    raise _StateMovedError from None
                raise refusal(exc, Refused(task.fq, "get", epoch=epoch)) from None
        return out

    async def version(self, task: TaskKey) -> str:
        """The version token of the task's committed content."""
        return await meta.version(self._conn, task)

    async def describe(self, task: TaskKey) -> TaskMeta:
        """The task's metadata."""
        return await meta.describe(self._conn, self._records, task)


class _StateMovedError(Exception):
    """The state moved past the version a delta restore's keys were named for."""
