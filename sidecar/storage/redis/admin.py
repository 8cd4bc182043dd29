"""Operator calls on the Redis backend: list, drop, adopt, edit, read, import, doctor.

None of these claims a task: they serve `taskstate` (the CLI) through the sidecar's
admin RPCs. The rescale is a room of its own (rescale.py), reached through `rescale`.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from itertools import chain
from typing import Any

import redis.exceptions as rex

from taskstate.proto.durability import Durability
from taskstate.proto.versions import new_generation

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
from . import meta
from .connect import RedisSettings, redact
from .keys import edits_key, every_key, stash_key, task_keys, ttl_key
from .reads import Reader
from .records import NamespaceRecords
from .replies import fields, text
from .rescale import Rescaler
from .routing import Connection
from .safety import ServerSafety, eviction_check, persistence_check
from .scan import Scanner
from .scripts import Refused, refusal
from .waits import DurabilityWaits


class RedisAdmin:
    """The operators' calls (base.AdminStore) on one Redis connection."""

    def __init__(
        self,
        conn: Connection,
        settings: RedisSettings,
        waits: DurabilityWaits,
        records: NamespaceRecords,
        scanner: Scanner,
    ) -> None:
        self._conn = conn
        self._settings = settings
        self._waits = waits
        self._records = records
        self._scanner = scanner
        self._rescaler = Rescaler(conn, records, scanner)
        self._reader = Reader(conn, scanner)

    async def list_tasks(self, namespace: str, component: str | None) -> list[TaskMeta]:
        """Every indexed task of the namespace (optionally one component)."""
        tasks = await self._records.members(namespace, component)
        return [await meta.describe(self._conn, self._records, t) for t in tasks]

    async def namespaces(self) -> list[str]:
        """Every namespace with an index set."""
        return await self._records.namespaces()

    async def adopt(self, namespace: str) -> tuple[bool, int]:
        """Record the namespace as going on from here: (known before, tasks indexed)."""
        return await self._records.adopt(namespace)

    async def drop(self, namespace: str, component: str | None, partition: int | None) -> int:
        """Delete the tasks' keys and their index entries."""
        if partition is not None and component is not None:
            targets = [TaskKey(namespace, component, partition)]
        else:
            targets = await self._records.members(namespace, component)
        dropped = 0
        client = self._conn.client
        for t in targets:
            keys = every_key(t)

            async def call(keys: tuple[str, ...] = keys) -> Any:
                return await client.delete(*keys)

            if await self._conn.run("drop", call):
                dropped += 1
            await self._records.unindex(t)
        if partition is None:  # a component dropped whole may come back at any count
            await self._records.forget_counts(namespace, component)
        if targets:  # an explicit reset: the namespace goes on, known, even if now empty
            await self._records.reset(namespace)
        return dropped

    def rescale(
        self, namespace: str, component: str, to: int, key_type: str, quiet_s: float
    ) -> AsyncIterator[RescaleProgress]:
        """See base.AdminStore.rescale (rescale.py)."""
        return self._rescaler.run(namespace, component, to, key_type, quiet_s)

    async def edit(self, task: TaskKey, key: str, value: bytes | None, codec: str) -> bool:
        """Set (or with None delete) one key; see base.AdminStore.edit (lua/edit.lua)."""
        keys = (*task_keys(task), edits_key(task), ttl_key(task))
        args = self._conn.scripts["edit"].args(
            key=key, value=value or b"", codec=codec, now=f"{time.time():.3f}"
        )

        async def call() -> Any:
            return await self._conn.evalsha("edit", keys, args)

        try:
            return bool(await self._conn.run("edit", call))
        except rex.ResponseError as exc:
            raise refusal(exc, Refused(task.fq, "edit", codec=codec)) from None

    def read(
        self,
        task: TaskKey,
        max_fields: int,
        *,
        pattern: str | None = None,
        keys: Sequence[str] | None = None,
        since_batch: int | None = None,
    ) -> AsyncIterator[ReadPage]:
        """See base.AdminStore.read (reads.py)."""
        if keys is not None:
            return self._reader.keys(task, keys)
        if since_batch is not None:
            return self._reader.changes(task, since_batch, max_fields)
        return self._reader.whole(task, pattern, max_fields)

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
        """Create or extend a task from exported state; see base.AdminStore.import_task."""
        keys = (*task_keys(task), ttl_key(task), stash_key(task))
        mode = "append" if append_epoch is not None else "replace" if replace else "create"
        if append_epoch is None:
            partitions = await self._import_count(task, partitions)
        args = self._conn.scripts["import"].args(
            chain.from_iterable(entries),
            mode=mode,
            epoch=str(append_epoch or 0),
            batch=str(committed_batch),
            position=b"" if position is None else b"+" + position,
            codec=codec,
            new_gen=new_generation(),
            now=f"{time.time():.3f}",
            partitions="" if partitions is None else str(partitions),
        )

        async def call() -> Any:
            return await self._conn.evalsha("import", keys, args)

        try:
            r = await self._conn.run("import", call)
        except rex.ResponseError as exc:
            raise refusal(exc, Refused(task.fq, "import")) from None
        await self._records.index(task)
        if partitions is not None and append_epoch is None:
            now = await self._records.record_partitions(task, partitions)
            if now != partitions:  # another import or Open recorded another count meanwhile
                raise errors.import_partitions(task.fq, now or 0, partitions)
        f = fields(r)
        return int(f["epoch"]), int(f["size"])

    async def _import_count(self, task: TaskKey, partitions: int | None) -> int | None:
        """The count an imported task records: the file's, checked against the component's.

        The component's recorded count applies where the file has none; a file with another
        count is refused (PARTITIONS) before anything is written.
        """
        recorded = await self._records.recorded(task.namespace, task.component)
        count = partitions if partitions is not None else recorded
        if recorded is not None and count != recorded:
            raise errors.import_partitions(task.fq, recorded, count)
        if count is not None and task.partition >= count:
            raise errors.import_partitions(task.fq, count, count)
        return count

    async def sweep(self, task: TaskKey, idle_s: float) -> int:
        """See base.AdminStore.sweep (lua/sweep.lua)."""
        meta, data, _, log = task_keys(task)
        now = time.time()
        args = self._conn.scripts["sweep"].args(
            now=str(int(now * 1000)), idle=f"{idle_s:.3f}", seconds=f"{now:.3f}"
        )

        async def call() -> Any:
            return await self._conn.evalsha("sweep", (meta, data, log, ttl_key(task)), args)

        return int(await self._conn.run("sweep", call))

    async def doctor(self, durability: Durability) -> DoctorReport:
        """Topology, each primary's version and persistence, and whether `durability` holds."""
        conn = self._conn
        infos = await conn.run("doctor", lambda: conn.each_server("INFO"))
        fsyncs = await self._config_values("appendfsync", len(infos))
        saves = await self._config_values("save", len(infos))
        if conn.kind == "cluster":  # each_server went through the primaries in this order
            addresses = [f"{n.host}:{n.port}" for n in conn.client.get_primaries()]
        else:
            addresses = [redact(self._settings.url)]
        servers = [
            ServerReport(
                address=address,
                role=str(info.get("role", "?")),
                version=str(info.get("redis_version", "?")),
                aof_enabled=bool(int(info.get("aof_enabled", 0))),
                appendfsync=fsync or "?",  # None: CONFIG refused
                connected_replicas=int(info.get("connected_slaves", 0)),
            )
            for address, info, fsync in zip(addresses, infos, fsyncs, strict=False)
        ]
        checks = [Check("redis reachable", True, f"{len(servers)} primary server(s) answered")]
        checks.append(await self._waits.doctor_check(durability, servers))
        safety = [
            ServerSafety(
                address=s.address,
                aof_enabled=s.aof_enabled,
                rdb_save=save,
                maxmemory_policy=str(info["maxmemory_policy"])
                if "maxmemory_policy" in info
                else None,
            )
            for s, info, save in zip(servers, infos, saves, strict=False)
        ]
        checks += [persistence_check(safety), eviction_check(safety)]
        return DoctorReport(topology=conn.kind, servers=servers, checks=checks)

    async def _config_values(self, name: str, n: int) -> list[str | None]:
        """CONFIG GET `name` on every server; None where the sidecar's user may not run it."""
        conn = self._conn
        try:
            configs = await conn.run("doctor", lambda: conn.each_server("CONFIG", "GET", name))
        except rex.ResponseError:
            return [None] * n
        return [text(c.get(name) if name in c else c.get(name.encode(), "")) for c in configs]
