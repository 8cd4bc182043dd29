"""A namespace's index and record: its tasks, whether Redis knows it, its components.

Per component: its partition count and any rescale under way (keys.py spells the keys).

Both live in the namespace's own slot, apart from its tasks: the sidecar reads them when
a task with no keys opens (new, or lost?), lists and drops with them, and records what
`taskstate adopt`, `drop`, an import and the first Open that declares a count tell it.
"""

from __future__ import annotations

import time
from typing import Any

from ..values import TaskKey
from .keys import (
    ComponentRecord,
    component_fields,
    index_key,
    index_member,
    index_task,
    namespace_key,
    seed_fields,
)
from .replies import text
from .routing import Connection

INDEX_AGAIN_S = 60.0  # an Open records its task in the index again after this long


class NamespaceRecords:
    """The index set (`ts:idx:{ns}`) and the record hash (`ts:ns:{ns}`) of namespaces."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._indexed: dict[TaskKey, float] = {}  # task -> when this sidecar last indexed it

    async def index(self, task: TaskKey) -> None:
        """Record the task in its namespace's index (for listing, and lost-state checks)."""
        client = self._conn.client
        member = index_member(task)
        await self._conn.run("index", lambda: client.sadd(index_key(task.namespace), member))
        self._indexed[task] = time.monotonic()

    async def index_often(self, task: TaskKey) -> None:
        """`index`, skipped when this sidecar indexed the task in the last INDEX_AGAIN_S.

        Every Open records its task (an index that lost it would not tell the task's lost
        state from a new task's); once a minute is as good as at every batch, and saves a
        round trip per Open.
        """
        last = self._indexed.get(task)
        if last is None or time.monotonic() - last > INDEX_AGAIN_S:
            await self.index(task)

    async def unindex(self, task: TaskKey) -> None:
        """Forget the task in its namespace's index."""
        self._indexed.pop(task, None)
        client = self._conn.client
        member = index_member(task)
        await self._conn.run("index", lambda: client.srem(index_key(task.namespace), member))

    async def known(self, task: TaskKey) -> tuple[bool, bool, ComponentRecord]:
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
            pipe.hmget(record, *component_fields(task.component), seed_fields(task.component)[0])
            return await pipe.execute()

        indexed, members, has_record, (parts, rescale, seed) = await self._conn.run("index", call)
        component = ComponentRecord(
            int(text(parts)) if parts else None, text(rescale) or None, text(seed) or None
        )
        return bool(indexed), bool(members) or bool(has_record), component

    async def members(self, namespace: str, component: str | None) -> list[TaskKey]:
        """The indexed tasks of a namespace (optionally one component), in order."""
        client = self._conn.client
        raw = await self._conn.run("list", lambda: client.smembers(index_key(namespace)))
        tasks = []
        for member in sorted(text(x) for x in raw):
            task = index_task(namespace, member)
            if task is not None and (component is None or task.component == component):
                tasks.append(task)
        tasks.sort(key=lambda t: (t.component, t.partition))
        return tasks

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

    async def recorded(self, namespace: str, component: str) -> int | None:
        """The component's partition count in the namespace's record (None: none)."""
        record, field_ = namespace_key(namespace), component_fields(component)[0]
        client = self._conn.client
        raw = await self._conn.run("index", lambda: client.hget(record, field_))
        return int(text(raw)) if raw else None

    async def recorded_counts(self, namespace: str) -> dict[str, int]:
        """The partition counts the namespace's record holds, by component."""
        client = self._conn.client
        record = namespace_key(namespace)
        raw = await self._conn.run("describe", lambda: client.hgetall(record))
        counts = {}
        for name, value in raw.items():
            field_ = text(name)
            if field_.startswith("partitions/") and text(value).isdigit():
                counts[field_.partition("/")[2]] = int(text(value))
        return counts

    async def record_partitions(self, task: TaskKey, partitions: int) -> int | None:
        """Record the component's partition count unless it has one; the count now."""
        record = namespace_key(task.namespace)
        field_ = component_fields(task.component)[0]
        client = self._conn.client
        await self._conn.run("index", lambda: client.hsetnx(record, field_, partitions))
        return await self.recorded(task.namespace, task.component)

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

    async def adoptions(self, namespace: str) -> int:
        """How many times `taskstate adopt` ran for the namespace (0: never)."""
        client = self._conn.client
        record = namespace_key(namespace)
        raw = await self._conn.run("index", lambda: client.hget(record, "adoptions"))
        return int(text(raw) or 0)

    async def forget_counts(self, namespace: str, component: str | None) -> None:
        """A component dropped whole may come back at any count (None: every component)."""
        client = self._conn.client
        record = namespace_key(namespace)
        names = await self._conn.run("drop", lambda: client.hkeys(record))
        counts = [
            n
            for n in map(text, names)
            if n.startswith("partitions/")
            and (component is None or n == component_fields(component)[0])
        ]
        if counts:
            await self._conn.run("drop", lambda: client.hdel(record, *counts))

    async def reset(self, namespace: str) -> None:
        """An explicit reset (a drop): the namespace goes on known, even if it is empty."""
        client = self._conn.client
        record = namespace_key(namespace)
        now = f"{time.time():.3f}"
        await self._conn.run("drop", lambda: client.hset(record, "reset_at", now))
