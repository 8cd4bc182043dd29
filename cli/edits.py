"""`taskstate set | del | erase`: an operator's edits to live state.

    taskstate set NS/COMPONENT/PARTITION KEY JSON
    taskstate del NS/COMPONENT/PARTITION KEY
    taskstate erase NS/COMPONENT KEY              (the key out of every task of a component)

An edit is applied at once and again at the task's next batch, so a replay of the batch
in flight, or that batch's own later commits, cannot undo it (sidecar/storage/redis/
lua/edit.lua). A delete also removes the key's value from the rollback record.
"""

from __future__ import annotations

import argparse
from typing import IO, TYPE_CHECKING

import orjson

from taskstate.client._codec import CODECS
from taskstate.proto import taskstate_pb2 as pb
from taskstate.proto.ids import fq_task_id

if TYPE_CHECKING:
    from .admin import Admin


def add_arguments(command: str, p: argparse.ArgumentParser) -> None:
    """The arguments of one edit command."""
    if command == "erase":
        p.add_argument("scope", metavar="NAMESPACE/COMPONENT",
                       help="the component whose every task loses the key")  # fmt: skip
    else:
        p.add_argument("task", metavar="NAMESPACE/COMPONENT/PARTITION", help="the task to edit")
    p.add_argument("key", metavar="KEY", help="the state key")
    if command == "set":
        p.add_argument("value", metavar="JSON", help="the new value as JSON, e.g. '{\"n\": 3}'")


def cmd_edit(a: argparse.Namespace, admin: Admin, out: IO[str]) -> int:
    """`taskstate set`, `del` and `erase`."""
    from .admin import UsageError, _scope, _task_id

    if a.command == "erase":
        ns, comp, _ = _scope(a.scope, allow_partition=False)
        if not comp:
            raise UsageError(f"{a.scope!r}: erase takes NAMESPACE/COMPONENT")
        req = pb.EditRequest(namespace=ns, component=comp, key=a.key, delete=True)
        r = admin.call("Edit", req, f"{ns}/{comp}")
        out.write(f"{ns}/{comp}: {a.key!r} erased from {r.tasks} task(s); {r.had_key} had it\n")
        return 0
    task = _task_id(a.task)
    fq = fq_task_id(task.namespace, task.component, task.partition)
    req = pb.EditRequest(namespace=task.namespace, component=task.component,
                         partition=task.partition, key=a.key, codec="json")  # fmt: skip
    if a.command == "del":
        req.delete = True
    else:
        try:
            value = orjson.loads(a.value)
        except orjson.JSONDecodeError as exc:
            raise UsageError(
                f"{a.value[:80]!r} is not JSON ({exc}); quote strings: '\"text\"'"
            ) from None
        req.value = CODECS["json"].encode(fq, a.key, value)
    r = admin.call("Edit", req, fq)
    what = "deleted" if a.command == "del" else "set"
    before = "it existed" if r.had_key else "it did not exist"
    out.write(f"{fq}: {a.key!r} {what} ({before}); the job sees it from its next batch on\n")
    return 0
