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
from typing import IO

import orjson

from taskstate.client.admin import AdminClient

from .common import UsageError, parse_scope, parse_task


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


def cmd_edit(a: argparse.Namespace, admin: AdminClient, out: IO[str]) -> int:
    """`taskstate set`, `del` and `erase`."""
    if a.command == "erase":
        ns, comp, _ = parse_scope(a.scope, allow_partition=False)
        if not comp:
            raise UsageError(f"{a.scope!r}: erase takes NAMESPACE/COMPONENT")
        r = admin.erase(ns, comp, a.key)
        out.write(f"{ns}/{comp}: {a.key!r} erased from {r.tasks} task(s); {r.had_key} had it\n")
        return 0
    task = parse_task(a.task)
    if a.command == "del":
        r = admin.delete(task, a.key)
    else:
        try:
            value = orjson.loads(a.value)
        except orjson.JSONDecodeError as exc:
            raise UsageError(
                f"{a.value[:80]!r} is not JSON ({exc}); quote strings: '\"text\"'"
            ) from None
        r = admin.set(task, a.key, value)
    what = "deleted" if a.command == "del" else "set"
    before = "it existed" if r.had_key else "it did not exist"
    out.write(f"{a.task}: {a.key!r} {what} ({before}); the job sees it from its next batch on\n")
    return 0
