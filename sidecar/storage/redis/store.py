"""The Redis backend: task state in hashes, the protocol in atomic Lua scripts (lua/).

The keys (one Redis Cluster slot per task) are spelled in keys.py only; routing.py finds
the server, durability.py waits for the level asked, admin.py holds the operator calls,
rescale.py moves a component's keys to another partition count.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from itertools import chain
from typing import Any

import msgpack
import redis.exceptions as rex

from taskstate.proto import codes
from taskstate.proto.durability import Durability
from taskstate.proto.versions import Version

from ... import errors
from ...errors import SidecarError
from ...retry import RetryPolicy
from ..base import CommitResult, Delta, OpenResult, TaskKey
from ..connect import RedisSettings
from .admin import RedisAdmin
from .durability import DurabilityWaits, text
from .keys import edits_key, task_keys
from .rescale import RedisRescale
from .routing import Connection
from .scan import ServerChangedError, hscan_pages
from .seen import SeenVersions

log = logging.getLogger("taskstate.sidecar.redis")

_GET_CHUNK = 2000
# Below this many fields a restore reads the hash in one HGETALL; above, HSCAN pages.
_HGETALL_MAX = 5000


def log_entry(upserts: Sequence[tuple[str, bytes]], deletes: Sequence[str]) -> bytes:
    """A change set's keys as the change log keeps them (one msgpack array)."""
    keys = [k for k, _ in upserts]
    keys += deletes
    entry: bytes = msgpack.packb(keys)
    return entry


def unpack_keys(blob: bytes) -> list[Any]:
    """The keys of one change log entry (msgpack strings come back as bytes, like Redis').

    Lua's cmsgpack packs an empty table as a map: that is no keys too.
    """
    keys = msgpack.unpackb(blob, raw=True)
    return list(keys) if isinstance(keys, list) else []


def script_error(
    task: TaskKey,
    exc: rex.ResponseError,
    batch: int | None,
    codec: str = "",
    partitions: int | None = None,
) -> Exception:
    """Turn a script's TS* error reply into a SidecarError."""
    kind, _, detail = str(exc).partition(" ")
    if kind == "TSPARTS":
        return errors.partitions_changed(task.fq, int(detail), partitions)
    if kind == "TSRESCALING":  # the lock is "<rescale id>:<target count>"
        return errors.rescaling(task.fq, detail.rpartition(":")[2])
    if kind == "TSFENCED":
        return errors.fenced(task.fq, detail)
    if kind == "TSAHEAD":
        return errors.state_ahead(task.fq, detail, batch)
    if kind == "TSNOUNDO":
        return errors.cannot_roll_back(task.fq, detail)
    if kind == "TSCODEC":
        return errors.codec_mismatch(task.fq, detail, codec)
    if kind == "TSCORRUPT":
        return errors.corrupt(task.fq, detail)
    if kind == "TSLOST":
        what, _, rest = detail.partition(" ")
        return errors.state_lost_part(task.fq, what, rest.split(), batch)
    return exc


class RedisStorage(RedisAdmin, RedisRescale):
    """Task state in Redis: standalone, Sentinel-managed or Cluster (see connect.py)."""

    def __init__(
        self,
        redis: str | RedisSettings,
        *,
        retry: RetryPolicy | None = None,
        socket_timeout_s: float | None = None,
        durability_timeout_ms: int = 5000,
        fsync_check_ttl_s: float = 5.0,
    ) -> None:
        self.settings = redis if isinstance(redis, RedisSettings) else RedisSettings(url=redis)
        retry = retry or RetryPolicy()
        if socket_timeout_s is None:
            # long enough for WAIT/WAITAOF; a hung server is cut off by the retry deadline
            socket_timeout_s = max(retry.deadline_s, durability_timeout_ms / 1000 + 2)
        self._conn = Connection(self.settings, retry, socket_timeout_s)
        self._waits = DurabilityWaits(self._conn, durability_timeout_ms, fsync_check_ttl_s)
        self._seen = SeenVersions()

    @property
    def kind(self) -> str:
        """The topology: standalone, sentinel or cluster."""
        return self._conn.kind

    # -- protocol -------------------------------------------------------------

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
    ) -> OpenResult:
        """Claim the task; see base.Storage.open."""
        if durability.fsynced:
            await self._waits.check_fsync(task)
        keys = (*task_keys(task), edits_key(task))
        seen = self._seen.get(task)
        args = [
            "" if batch is None else str(batch),
            uuid.uuid4().hex,
            f"{time.time():.3f}",
            writer,
            codec,
            attempt,
            "1",  # a task with no keys: TSNEW, so that the index is asked first
            seen.gen if seen else "",  # the version this sidecar saw: Redis must not be behind
            str(seen.ver) if seen else "",
            "" if partitions is None else str(partitions),
            str(task.partition),
        ]

        try:
            r = await self._open_script(task, batch, keys, args, partitions)
        except rex.ResponseError as exc:
            raise script_error(task, exc, batch, codec, partitions) from None
        await self._index(task)
        result = OpenResult(
            epoch=int(r[0]),
            committed_batch=int(r[1]),
            position=r[2] if int(r[3]) else None,
            size=int(r[4]),
            version=text(r[5]),
            rolled_back=bool(int(r[6])),
            rolled_back_keys=int(r[7]),
            reused_claim=bool(int(r[8])),
        )
        self._seen.note(task, result.version, result.committed_batch)
        return result

    async def _open_script(
        self,
        task: TaskKey,
        batch: int | None,
        keys: Sequence[str],
        args: list[str],
        partitions: int | None,
    ) -> Any:
        """Run open.lua, answering what only the sidecar can ask Redis about.

        TSNEW (a task with no keys at all): the index and the namespace's record tell a
        new task from a lost one, and the component's record holds its partition count
        (checked, or recorded by the first Open that declares one) and any rescale under
        way. TSLOST behind (Redis holds an older version than this
        sidecar saw): refused, unless `taskstate adopt` accepted it since. Each answer
        clears its own flag, so the script runs at most three times.
        """

        async def call() -> Any:
            return await self._conn.evalsha("open", keys, args)

        while True:
            try:
                return await self._conn.run("open", call)
            except rex.ResponseError as exc:
                reply = str(exc)
                if reply == "TSNEW" and args[6] == "1":
                    await self._refuse_if_lost(task, batch, partitions)
                    args[6] = "0"  # new indeed
                elif reply.startswith("TSLOST behind ") and args[7]:
                    await self._refuse_if_behind(task, batch, reply.split()[2:])
                    args[7] = args[8] = ""  # the older state was accepted
                else:
                    raise

    async def _refuse_if_lost(
        self, task: TaskKey, batch: int | None, partitions: int | None
    ) -> None:
        indexed, namespace_known, component = await self._known(task)
        if component.rescale is not None:
            raise errors.rescaling(task.fq, json.loads(component.rescale).get("to", "?"))
        if indexed:  # it had state once: all of it is gone
            raise errors.state_lost_task(task.fq, batch)
        if batch is not None and batch > 0 and not namespace_known:
            # Spark is past batch 0, and Redis knows nothing of the namespace
            raise errors.state_lost_namespace(task.fq, task.namespace, batch)
        recorded = component.partitions
        if recorded is not None:
            if (partitions is not None and partitions != recorded) or task.partition >= recorded:
                raise errors.partitions_changed(task.fq, recorded, partitions)
        elif partitions is not None:
            await self._record_partitions(task, partitions)

    async def _refuse_if_behind(self, task: TaskKey, batch: int | None, held: list[str]) -> None:
        seen = self._seen.get(task)
        adoptions = await self._adoptions(task.namespace)
        if seen is None or (seen.refused_at is not None and adoptions > seen.refused_at):
            log.warning(
                "task's older state accepted (taskstate adopt): Redis lost commits",
                extra={"task": task.fq, "seen_version": seen and seen.version},
            )
            self._seen.forget(task)
            return
        seen.refused_at = adoptions
        stored_batch, stored_ver = (held + ["?", "?"])[:2]
        raise errors.state_lost_behind(
            task.fq, stored_batch, stored_ver, seen.batch, seen.ver, batch
        )

    async def restore(
        self, task: TaskKey, epoch: int, max_fields: int
    ) -> AsyncIterator[Sequence[tuple[str | bytes, bytes]]]:
        """Yield the state in chunks; memory is bounded by one chunk, not the state."""
        meta, data, _, _ = task_keys(task)
        conn = self._conn
        await self._check_epoch(task, meta, epoch)
        size = await conn.run("restore", lambda: conn.client.hlen(data))
        if size <= min(_HGETALL_MAX, max_fields):
            items: dict[Any, Any] = await conn.run("restore", lambda: self._hgetall(data))
            yield list(items.items())  # keys stay UTF-8 bytes: no per-field work
        else:
            # A server change mid-scan starts the scan again (scan.py): fields sent
            # twice are identical (the epoch fences writers), so the client just overwrites.
            restarts = 0
            while True:
                try:
                    async for items in hscan_pages(
                        conn.run, self.scan_page, data, max_fields, None, "restore"
                    ):
                        yield list(items.items())  # keys stay UTF-8 bytes: no per-field work
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
        await self._check_epoch(task, meta, epoch)

    async def changes_since(
        self, task: TaskKey, epoch: int, since: str, max_keys: int
    ) -> Delta | None:
        """The keys changed since `since`, from the change log; see base.Storage.

        changes.lua names the keys (one msgpack array per version); get.lua reads their
        values in pages, each checking that the state is still at the version the keys
        were named for (else None: the caller restores in full).
        """
        held = Version.parse(since)
        if held is None:
            return None
        meta, _, _, log = task_keys(task)
        args = [str(epoch), str(held.counter), held.gen, str(max_keys)]

        async def names() -> Any:
            return await self._conn.evalsha("changes", (meta, log), args)

        try:
            r = await self._conn.run("changes", names)
        except rex.ResponseError as exc:
            raise script_error(task, exc, None) from None
        version, total = text(r[0]), int(r[1])
        if total < 0:
            return None
        keys: dict[Any, None] = {}
        for blob in r[2:]:
            keys.update(dict.fromkeys(unpack_keys(blob)))
        changed = list(keys)
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

    async def _hgetall(self, key: str) -> dict[Any, Any]:
        items: dict[Any, Any] = await self._conn.client.hgetall(key)
        return items

    async def _check_epoch(self, task: TaskKey, meta: str, epoch: int) -> None:
        client = self._conn.client
        current = await self._conn.run("epoch", lambda: client.hget(meta, "epoch"))
        if current is None or int(current) != epoch:
            raise errors.fenced(task.fq, text(current) or "none")

    async def commit(
        self,
        task: TaskKey,
        epoch: int,
        batch: int | None,
        upserts: Sequence[tuple[str, bytes]],
        deletes: Sequence[str],
        position: bytes | None,
        *,
        writer: str,
        durability: Durability,
    ) -> CommitResult:
        """Apply one change set atomically; see base.Storage.commit."""
        keys = task_keys(task)
        args: list[Any] = [
            str(epoch),
            "" if batch is None else str(batch),
            b"" if position is None else b"+" + position,
            f"{time.time():.3f}",
            writer,
            str(len(upserts)),
            log_entry(upserts, deletes),
            *chain.from_iterable(upserts),
            *deletes,
        ]
        wait = await self._waits.wait_for(durability, task)

        async def call() -> Any:
            return await self._conn.evalsha("commit", keys, args, wait)

        try:
            r = await self._conn.run("commit", call)
        except rex.ResponseError as exc:
            raise script_error(task, exc, batch) from None
        acked = 0
        if wait:
            r, ack = r[0], r[1]
            acked = self._waits.check_acks(task, durability, wait, ack)
        result = CommitResult(
            version=text(r[0]), size=int(r[1]), replicas_acked=acked, base_version=text(r[2])
        )
        self._seen.note(task, result.version, batch)
        return result

    async def get(self, task: TaskKey, epoch: int, keys: Sequence[str]) -> list[bytes | None]:
        """Read keys (remote mode), fenced by epoch."""
        return await self._values(task, epoch, keys)

    async def _values(
        self, task: TaskKey, epoch: int, keys: Sequence[Any], at: str = ""
    ) -> list[bytes | None]:
        """The values of `keys` (None: absent), fenced by epoch, in pages (get.lua).

        With `at`, every page also checks that the state is at that version counter:
        _StateMovedError when it moved.
        """
        meta, data, _, _ = task_keys(task)
        out: list[bytes | None] = []
        for i in range(0, max(len(keys), 1), _GET_CHUNK):
            part = list(keys[i : i + _GET_CHUNK])

            async def call(part: list[Any] = part) -> Any:
                return await self._conn.evalsha("get", (meta, data), [str(epoch), at, *part])

            try:
                out.extend(await self._conn.run("get", call))
            except rex.ResponseError as exc:
                if str(exc).startswith("TSMOVED"):
                    raise _StateMovedError from None
                raise script_error(task, exc, None) from None
        return out


class _StateMovedError(Exception):
    """The state moved past the version a delta restore's keys were named for."""
