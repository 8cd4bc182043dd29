"""A task's change log (`ts:{…}:log`, written by lua/commit.lua, edit.lua and open.lua).

Field `<v>` holds the keys version v changed (one msgpack array), `#<v>` how many; meta
`log_floor`, `log_ver` and `log_n` say which versions it covers. A worker holding an
older version of the task asks for what changed since (a delta restore): changes.lua
names the keys, the task store reads their values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgpack
import redis.exceptions as rex

from taskstate.proto.versions import Version

from ..values import TaskKey
from .keys import task_keys
from .replies import fields, text
from .routing import Connection
from .scripts import Refused, refusal


def log_entry(keys: Sequence[str]) -> bytes:
    """A change set's keys as the change log keeps them (one msgpack array)."""
    entry: bytes = msgpack.packb(list(keys))
    return entry


def unpack_keys(blob: bytes) -> list[Any]:
    """The keys of one change log entry (msgpack strings come back as bytes, like Redis').

    Lua's cmsgpack packs an empty table as a map: that is no keys too.
    """
    keys = msgpack.unpackb(blob, raw=True)
    return list(keys) if isinstance(keys, list) else []


async def changed_keys(
    conn: Connection, task: TaskKey, epoch: int, since: str, max_keys: int
) -> tuple[str, list[Any]] | None:
    """(the version now, the keys changed since `since`), from the change log.

    None when the log does not cover `since` (another generation, trimmed past it, not
    kept) or more than `max_keys` keys changed. Fenced by epoch (changes.lua).
    """
    held = Version.parse(since)
    if held is None:
        return None
    meta, _, _, log = task_keys(task)
    script = conn.scripts["changes"]
    args = script.args(
        epoch=str(epoch), since=str(held.counter), since_gen=held.gen, max_keys=str(max_keys)
    )

    async def names() -> Any:
        return await conn.evalsha("changes", (meta, log), args)

    try:
        r = await conn.run("changes", names)
    except rex.ResponseError as exc:
        raise refusal(exc, Refused(task.fq, "changes", epoch=epoch)) from None
    f = fields(r)
    if int(f["total"]) < 0:
        return None
    keys: dict[Any, None] = {}
    for blob in f["logged"]:
        keys.update(dict.fromkeys(unpack_keys(blob)))
    return text(f["version"]), list(keys)
