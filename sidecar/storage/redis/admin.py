"""Operator calls on the Redis backend: describe, list, drop, read, import, doctor.

None of these claims a task: they serve `taskstate` (the CLI) through the sidecar's
admin RPCs. `RedisAdmin` is the half of `RedisStorage` (store.py) that holds them.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from itertools import chain
from typing import Any

import redis.exceptions as rex

from taskstate.proto import codes
from taskstate.proto.durability import Durability
from taskstate.proto.versions import token

from ... import errors
from ...errors import SidecarError
from ..base import LAYOUT_VERSION, Check, DoctorReport, ServerReport, TaskKey, TaskMeta
from ..connect import RedisSettings, redact
from .durability import DurabilityWaits, text
from .keys import (
    ComponentRecord,
    component_fields,
    edits_key,
    every_key,
    index_key,
    index_member,
    index_task,
    namespace_key,
    task_keys,
)
from .routing import Connection
from .safety import ServerSafety, eviction_check, persistence_check
from .scan import ServerChangedError, hscan_pages


class RedisAdmin:
    """The operator half of the Redis backend (see store.RedisStorage)."""

    settings: RedisSettings
    _conn: Connection
    _waits: DurabilityWaits

    async def scan_page(
        self, key: str, cursor: int, count: int, match: str | None = None
    ) -> tuple[str, int, dict[Any, Any]]:
        """One HSCAN page and the run id of the server that answered it."""
        scan: tuple[Any, ...] = ("HSCAN", key, cursor, "COUNT", count)
        if match is not None:
            scan += ("MATCH", match)
        _, replies = await self._conn.send(key, [scan, ("INFO", "server")])
        for r in replies:
            if isinstance(r, Exception):
                raise r
        (next_cursor, items), info = replies
        return str(info.get("run_id", "")), int(next_cursor), items

    async def version(self, task: TaskKey) -> str:
        """The version token of the task's committed content."""
        meta = task_keys(task)[0]
        client = self._conn.client
        gen, ver = await self._conn.run("version", lambda: client.hmget(meta, "gen", "ver"))
        return token(text(gen), text(ver))

    async def describe(self, task: TaskKey) -> TaskMeta:
        """The task's metadata."""
        meta, data, _, _ = task_keys(task)

        async def call() -> Any:
            pipe = self._conn.client.pipeline(transaction=False)
            pipe.hgetall(meta)
            pipe.hlen(data)
            return await pipe.execute()

        m, size = await self._conn.run("describe", call)
        found = self._meta(task, m, int(size))
        if found.exists and found.partitions is None:
            counts = await self._recorded_counts(task.namespace)
            found = dataclasses.replace(found, partitions=counts.get(task.component))
        return found

    async def _recorded_counts(self, namespace: str) -> dict[str, int]:
        """The partition counts the namespace's record holds, by component."""
        client = self._conn.client
        record = namespace_key(namespace)
        raw = await self._conn.run("describe", lambda: client.hgetall(record))
        counts = {}
        for name, value in raw.items():
            field = text(name)
            if field.startswith("partitions/") and text(value).isdigit():
                counts[field.partition("/")[2]] = int(text(value))
        return counts

    @staticmethod
    def _meta(task: TaskKey, m: dict[bytes, bytes], size: int) -> TaskMeta:
        if not m:
            return TaskMeta(task=task, exists=size > 0, size=size)

        def num(name: str, default: str = "0") -> int:
            try:
                return int(text(m.get(name.encode())) or default)
            except ValueError:
                return -1

        parts = text(m.get(b"partitions"))
        return TaskMeta(
            task=task,
            exists=True,
            committed_batch=num("batch", "-1"),
            epoch=num("epoch"),
            position=m.get(b"pos"),
            size=size,
            version=token(text(m.get(b"gen")), text(m.get(b"ver"))),
            codec=text(m.get(b"codec")),
            layout=num("layout", str(LAYOUT_VERSION)),
            updated_at=float(text(m.get(b"updated_at")) or 0.0),
            last_writer=text(m.get(b"last_writer")),
            rollbacks=num("rollbacks"),
            partitions=int(parts) if parts.isdigit() else None,
            rescaling=b"rescale" in m,
        )

    async def _index(self, task: TaskKey) -> None:
        """Record the task in its namespace's index (for listing)."""
        member = index_member(task)
        client = self._conn.client
        await self._conn.run("index", lambda: client.sadd(index_key(task.namespace), member))

    async def _known(self, task: TaskKey) -> tuple[bool, bool, ComponentRecord]:
        """Whether the index records the task and the namespace is known; the component.

        Indexed: the task had state once. Known: Redis has a record of its namespace (an
        indexed task, or the record `adopt` and `drop` write).
        """
        index, record = index_key(task.namespace), namespace_key(task.namespace)

        async def call() -> Any:
            pipe = self._conn.client.pipeline(transaction=False)
            pipe.sismember(index, index_member(task))
            pipe.scard(index)
            pipe.exists(record)
            pipe.hmget(record, *component_fields(task.component))
            return await pipe.execute()

        indexed, members, has_record, (parts, rescale) = await self._conn.run("index", call)
        component = ComponentRecord(int(text(parts)) if parts else None, text(rescale) or None)
        return bool(indexed), bool(members) or bool(has_record), component

    async def _record_partitions(self, task: TaskKey, partitions: int) -> None:
        """Record the component's partition count, unless it has one (first Opens)."""
        record = namespace_key(task.namespace)
        field = component_fields(task.component)[0]
        client = self._conn.client
        await self._conn.run("index", lambda: client.hsetnx(record, field, partitions))

    async def adopt(self, namespace: str) -> tuple[bool, int]:
        """Record the namespace as going on from here: (known before, tasks indexed)."""
        index, record = index_key(namespace), namespace_key(namespace)

        async def call() -> Any:
            pipe = self._conn.client.pipeline(transaction=False)
            pipe.scard(index)
            pipe.exists(record)
            pipe.hset(record, "adopted_at", f"{time.time():.3f}")
            # sidecars that refused a task of it because Redis lost commits accept it now
            pipe.hincrby(record, "adoptions", 1)
            return await pipe.execute()

        members, has_record, _, _ = await self._conn.run("adopt", call)
        return bool(members) or bool(has_record), int(members)

    async def _adoptions(self, namespace: str) -> int:
        """How many times `taskstate adopt` ran for the namespace (0: never)."""
        client = self._conn.client
        record = namespace_key(namespace)
        raw = await self._conn.run("index", lambda: client.hget(record, "adoptions"))
        return int(text(raw) or 0)

    async def _members(self, namespace: str, component: str | None) -> list[TaskKey]:
        client = self._conn.client
        raw = await self._conn.run("list", lambda: client.smembers(index_key(namespace)))
        tasks = []
        for member in sorted(text(x) for x in raw):
            task = index_task(namespace, member)
            if task is not None and (component is None or task.component == component):
                tasks.append(task)
        tasks.sort(key=lambda t: (t.component, t.partition))
        return tasks

    async def list_tasks(self, namespace: str, component: str | None) -> list[TaskMeta]:
        """Every indexed task of the namespace (optionally one component)."""
        return [await self.describe(t) for t in await self._members(namespace, component)]

    async def drop(self, namespace: str, component: str | None, partition: int | None) -> int:
        """Delete the tasks' keys and their index entries."""
        if partition is not None and component is not None:
            targets = [TaskKey(namespace, component, partition)]
        else:
            targets = await self._members(namespace, component)
        dropped = 0
        client = self._conn.client
        for t in targets:
            keys = every_key(t)

            async def call(keys: tuple[str, ...] = keys, t: TaskKey = t) -> Any:
                n = await client.delete(*keys)
                await client.srem(index_key(namespace), index_member(t))
                return n

            if await self._conn.run("drop", call):
                dropped += 1
        record = namespace_key(namespace)
        if partition is None:  # a component dropped whole may come back at any count
            names = await self._conn.run("drop", lambda: client.hkeys(record))
            counts = [
                n
                for n in map(text, names)
                if n.startswith("partitions/")
                and (component is None or n == component_fields(component)[0])
            ]
            if counts:
                await self._conn.run("drop", lambda: client.hdel(record, *counts))
        if targets:  # an explicit reset: the namespace goes on, known, even if now empty
            now = f"{time.time():.3f}"
            await self._conn.run("drop", lambda: client.hset(record, "reset_at", now))
        return dropped

    async def edit(self, task: TaskKey, key: str, value: bytes | None, codec: str) -> bool:
        """Set (or with None delete) one key; see base.Storage.edit (lua/edit.lua)."""
        keys = (*task_keys(task), edits_key(task))
        args = [key, value or b"", codec, f"{time.time():.3f}"]

        async def call() -> Any:
            return await self._conn.evalsha("edit", keys, args)

        try:
            return bool(await self._conn.run("edit", call))
        except rex.ResponseError as exc:
            kind, _, detail = str(exc).partition(" ")
            if kind == "TSNOTASK":
                raise errors.not_found(task.fq, task.namespace) from None
            if kind == "TSRESCALING":
                raise errors.rescaling(task.fq, detail.rpartition(":")[2]) from None
            if kind == "TSCODEC":
                raise errors.codec_mismatch(task.fq, detail, codec) from None
            raise

    async def read(
        self, task: TaskKey, pattern: str | None, max_fields: int
    ) -> AsyncIterator[Sequence[tuple[str | bytes, bytes]]]:
        """The committed state without a claim; CHANGED when a commit lands meanwhile.

        The version token moves on every commit and rollback, so equal tokens before and
        after the scan mean every page came from one committed state.
        """
        meta, data, _, _ = task_keys(task)
        before = await self.describe(task)
        if not before.exists:
            raise errors.not_found(task.fq, task.namespace)
        try:
            async for items in hscan_pages(
                self._conn.run, self.scan_page, data, max_fields, pattern, "read"
            ):
                yield list(items.items())
        except ServerChangedError:
            pass  # another server answers now: what was sent may not be one version
        else:
            if await self.version(task) == before.version:
                return
        raise SidecarError(
            codes.CHANGED,
            f"task {task.fq}: the state changed while it was read (a commit, a rollback or "
            "a failover). What was sent is not one version: read it again.",
        )

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
        """Create or extend a task from exported state; see base.Storage.import_task."""
        keys = task_keys(task)
        mode = "append" if append_epoch is not None else "replace" if replace else "create"
        if append_epoch is None:
            partitions = await self._import_count(task, partitions)
        args: list[Any] = [
            mode,
            str(append_epoch or 0),
            str(committed_batch),
            b"" if position is None else b"+" + position,
            codec,
            uuid.uuid4().hex,
            f"{time.time():.3f}",
            "" if partitions is None else str(partitions),
            *chain.from_iterable(entries),
        ]

        async def call() -> Any:
            return await self._conn.evalsha("import", keys, args)

        try:
            r = await self._conn.run("import", call)
        except rex.ResponseError as exc:
            kind, _, detail = str(exc).partition(" ")
            if kind == "TSEXISTS":
                raise errors.already_exists(task.fq) from None
            if kind == "TSFENCED":
                raise SidecarError(
                    codes.FENCED,
                    f"task {task.fq}: another import or a running job claimed the task during "
                    f"this import (epoch now {detail}); its state is incomplete. Stop the job "
                    "and import again with --replace.",
                ) from None
            raise
        await self._index(task)
        if partitions is not None and append_epoch is None:
            await self._record_import_count(task, partitions)
        return int(r[0]), int(r[1])

    async def _import_count(self, task: TaskKey, partitions: int | None) -> int | None:
        """The count an imported task records: the file's, checked against the component's.

        The component's recorded count applies where the file has none; a file with another
        count is refused (PARTITIONS) before anything is written.
        """
        recorded = await self._recorded(task.namespace, task.component)
        count = partitions if partitions is not None else recorded
        if recorded is not None and count != recorded:
            raise errors.import_partitions(task.fq, recorded, count)
        if count is not None and task.partition >= count:
            raise errors.import_partitions(task.fq, count, count)
        return count

    async def _record_import_count(self, task: TaskKey, count: int) -> None:
        """Record an imported task's count for its component, once the task is written."""
        record, field_ = namespace_key(task.namespace), component_fields(task.component)[0]
        client = self._conn.client
        await self._conn.run("import", lambda: client.hsetnx(record, field_, count))
        now = await self._recorded(task.namespace, task.component)
        if now != count:  # another import or Open recorded another count meanwhile
            raise errors.import_partitions(task.fq, now or 0, count)

    async def _recorded(self, namespace: str, component: str) -> int | None:
        """The component's partition count in the namespace's record (None: none)."""
        record, field_ = namespace_key(namespace), component_fields(component)[0]
        client = self._conn.client
        raw = await self._conn.run("index", lambda: client.hget(record, field_))
        return int(text(raw)) if raw else None

    async def namespaces(self) -> list[str]:
        """Every namespace with an index set (SCAN on every primary)."""
        head, tail = index_key("*").split("*")  # the index key around the namespace
        client = self._conn.client

        async def call() -> list[str]:
            found = set()
            async for key in client.scan_iter(match=index_key("*"), count=1000):
                found.add(text(key)[len(head) : -len(tail)])
            return sorted(found)

        return await self._conn.run("list", call)

    async def doctor(self, durability: Durability) -> DoctorReport:
        """Topology, each primary's version and persistence, and whether `durability` holds."""
        conn = self._conn
        infos = await conn.run("doctor", lambda: conn.each_server("INFO"))
        fsyncs = await self._config_values("appendfsync", len(infos))
        saves = await self._config_values("save", len(infos))
        if conn.kind == "cluster":  # each_server went through the primaries in this order
            addresses = [f"{n.host}:{n.port}" for n in conn.client.get_primaries()]
        else:
            addresses = [redact(self.settings.url)]
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

    async def ping(self) -> None:
        """Raise when Redis (every primary of a cluster) cannot be reached."""
        await self._conn.ping()

    async def close(self) -> None:
        """Close the connection pool."""
        await self._conn.close()
