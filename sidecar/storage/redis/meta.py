"""A task's metadata hash (`ts:{…}:meta`) read back: its version token and `TaskMeta`."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from taskstate.proto import codes
from taskstate.proto.ids import fq_task_id
from taskstate.proto.versions import token

from ...errors import SidecarError
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
    """The task's metadata; its partition count from the component's record if not its own.

    A task without state gets the component's count as well: the count an Open or an
    import of it would meet (`taskstate import` checks a file against it first).
    """
    meta, data, _, _ = task_keys(task)

    async def call() -> Any:
        pipe = conn.client.pipeline(transaction=False)
        pipe.hgetall(meta)
        pipe.hlen(data)
        return await pipe.execute()

    m, size = await conn.run("describe", call)
    found = parse(task, m, int(size))
    if found.partitions is None:
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


async def fields(
    conn: Connection,
    namespace: str,
    component: str,
    partitions: Sequence[int],
    names: Sequence[str],
) -> dict[int, dict[str, str | None]]:
    """Some fields of the metadata of each of a component's tasks, by partition."""
    out: dict[int, dict[str, str | None]] = {}
    for p in partitions:
        key = task_keys(TaskKey(namespace, component, p))[0]

        async def call(key: str = key) -> Any:
            return await conn.client.hmget(key, *names)

        raw = await conn.run("meta", call)
        out[p] = {f: None if v is None else text(v) for f, v in zip(names, raw, strict=True)}
    return out


async def refuse_if_running(
    conn: Connection,
    namespace: str,
    component: str,
    partitions: Sequence[int],
    quiet_s: float,
    action: str,
) -> None:
    """CHANGED when a task was opened or written in the last `quiet_s` seconds.

    A component's query that runs writes its tasks every batch: a rescale or a write of
    the data source waits until it has stopped. `action` names what was refused.
    """
    metas = await fields(conn, namespace, component, partitions, ("updated_at", "opened_at"))
    now = time.time()
    for p, m in metas.items():
        last = max(float(m["updated_at"] or 0), float(m["opened_at"] or 0))
        if now - last < quiet_s:
            raise SidecarError(
                codes.CHANGED,
                f"{fq_task_id(namespace, component, p)} was written {now - last:.0f} s "
                "ago: the query still runs (or has just stopped). Nothing was changed. "
                f"Stop the query, then {action}; the check waits for {quiet_s:.0f} s of quiet "
                f"({'--quiet-seconds' if action == 'rescale' else 'option quietSeconds'}).",
            )
