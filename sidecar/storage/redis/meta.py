"""A task's metadata hash (`ts:{…}:meta`) read back: its version token and `TaskMeta`."""

from __future__ import annotations

import dataclasses
from typing import Any

from taskstate.proto.versions import token

from ..values import LAYOUT_VERSION, TaskKey, TaskMeta
from .keys import task_keys
from .records import NamespaceRecords
from .replies import text
from .routing import Connection


async def version(conn: Connection, task: TaskKey) -> str:
    """The version token of the task's committed content."""
    meta = task_keys(task)[0]
    client = conn.client
    gen, ver = await conn.run("version", lambda: client.hmget(meta, "gen", "ver"))
    return token(text(gen), text(ver))


async def describe(conn: Connection, records: NamespaceRecords, task: TaskKey) -> TaskMeta:
    """The task's metadata; its partition count from the component's record if not its own."""
    meta, data, _, _ = task_keys(task)

    async def call() -> Any:
        pipe = conn.client.pipeline(transaction=False)
        pipe.hgetall(meta)
        pipe.hlen(data)
        return await pipe.execute()

    m, size = await conn.run("describe", call)
    found = parse(task, m, int(size))
    if found.exists and found.partitions is None:
        counts = await records.recorded_counts(task.namespace)
        found = dataclasses.replace(found, partitions=counts.get(task.component))
    return found


def parse(task: TaskKey, m: dict[bytes, bytes], size: int) -> TaskMeta:
    """A metadata hash (HGETALL) and the data's size as TaskMeta."""
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
