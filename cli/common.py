"""What the operator commands share: usage errors, names on the command line, rendering."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Sequence
from typing import IO, Any

import orjson

from taskstate.client import ConfigError
from taskstate.client.admin import task_id
from taskstate.proto import envelope, ids
from taskstate.proto import taskstate_pb2 as pb


class UsageError(Exception):
    """Bad command-line input (exit 2)."""


def parse_task(text: str) -> pb.TaskId:
    """`NAMESPACE/COMPONENT/PARTITION`, or a UsageError saying what is wrong."""
    try:
        return task_id(text)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def parse_scope(text: str, *, allow_partition: bool) -> tuple[str, str, int | None]:
    """`NAMESPACE[/COMPONENT[/PARTITION]]` -> (namespace, component or "", partition)."""
    parts = text.split("/")
    most = 3 if allow_partition else 2
    if not 1 <= len(parts) <= most or any(not p for p in parts):
        shape = "NAMESPACE[/COMPONENT[/PARTITION]]" if allow_partition else "NAMESPACE[/COMPONENT]"
        raise UsageError(f"{text!r}: expected {shape}")
    ns, comp = parts[0], parts[1] if len(parts) > 1 else ""
    for problem in (
        ids.name_problem("namespace", ns),
        ids.name_problem("component", comp) if comp else None,
    ):
        if problem:
            raise UsageError(problem)
    part = None
    if len(parts) == 3:
        if not parts[2].isdigit():
            raise UsageError(f"{text!r}: the partition must be a number")
        part = int(parts[2])
    return ns, comp, part


def decode(value: bytes) -> tuple[str, Any]:
    """('value', parsed JSON) or ('value_b64', base64) for bytes that are not JSON."""
    try:
        return "value", orjson.loads(value)
    except orjson.JSONDecodeError:
        return "value_b64", base64.b64encode(value).decode()


def decode_stored(value: bytes) -> tuple[str, Any, dict[str, int]]:
    """A stored value: `decode` of its JSON, and its envelope's fields (expires, version).

    A value written with a time to live or a schema version above 1 carries them
    (taskstate/proto/envelope.py); the dict has only those it carries.
    """
    try:
        expires, version, body = envelope.parse(value)
    except ValueError:
        return (*decode(value), {})
    extra = {"expires": expires} if expires is not None else {}
    if version != 1:
        extra["version"] = version
    return (*decode(body), extra)


def info_dict(t: pb.TaskInfo) -> dict[str, Any]:
    """A task's metadata as the commands print it (and `--json` gives it)."""
    position: Any = None
    if t.has_position:
        position = decode(t.position)[1]
    return {
        "task": ids.fq_task_id(t.task.namespace, t.task.component, t.task.partition),
        "exists": t.exists,
        "committed_batch": t.committed_batch,
        "epoch": t.epoch,
        "keys": t.size,
        "position": position,
        "version": t.version,
        "codec": t.codec,
        "layout": t.layout,
        "updated_at": t.updated_at,
        "last_writer": t.last_writer,
        "rollbacks": t.rollbacks,
        "partitions": t.partitions or None,
    }


def when(ts: float) -> str:
    """A Unix time as UTC text ("-" for none)."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts)) + "Z" if ts else "-"


def table(rows: list[Sequence[Any]], out: IO[str]) -> None:
    """Rows as aligned columns."""
    cells = [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    for r in cells:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")


def dump(obj: Any, out: IO[str]) -> None:
    """Indented JSON (for `--json`)."""
    out.write(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")
