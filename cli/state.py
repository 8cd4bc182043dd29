"""`taskstate ls | show | drop | adopt | sweep`: stored state seen, dropped, adopted, swept.

Sweep deletes the keys whose time to live ran out in a namespace's idle tasks.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import IO, Any

from taskstate.client.admin import AdminClient
from taskstate.proto.ids import similar

from .common import (
    UsageError,
    decode_stored,
    dump,
    info_dict,
    parse_scope,
    parse_task,
    table,
    when,
)


def reading_again(command: str) -> Callable[[str], None]:
    """What `command` says when a commit landed mid-read of a task and it reads again."""

    def say(fq: str) -> None:
        print(f"taskstate {command}: {fq} changed while it was read; reading again",
              file=sys.stderr)  # fmt: skip

    return say


def cmd_ls(a: argparse.Namespace, admin: AdminClient, out: IO[str]) -> int:
    """`taskstate ls`: namespaces, or the tasks of one with their metadata."""
    if not a.scope:
        names = admin.namespaces()
        if a.json:
            dump(names, out)
        elif names:
            out.write("\n".join(names) + "\n")
        else:
            out.write("no namespaces have stored state\n")
        return 0
    ns, comp, _ = parse_scope(a.scope, allow_partition=False)
    tasks = [info_dict(t) for t in admin.tasks(ns, comp)]
    if a.json:
        dump(tasks, out)
        return 0
    if not tasks:
        out.write(f"no tasks with stored state in {a.scope}{_nearby(admin, ns, comp)}\n")
        return 0
    rows: list[Sequence[Any]] = [
        ("TASK", "BATCH", "KEYS", "PARTITIONS", "EPOCH", "ROLLBACKS", "UPDATED", "LAST WRITER")
    ]
    for t in tasks:
        rows.append((t["task"], t["committed_batch"], t["keys"], t["partitions"] or "-",
                     t["epoch"], t["rollbacks"], when(t["updated_at"]),
                     t["last_writer"] or "-"))  # fmt: skip
    table(rows, out)
    return 0


def cmd_show(a: argparse.Namespace, admin: AdminClient, out: IO[str]) -> int:
    """`taskstate show`: a task's metadata and committed state (what a restore gets)."""
    task = parse_task(a.task)
    fq = a.task
    info = info_dict(admin.describe(task))
    if not info["exists"]:
        ns, comp, part = task.namespace, task.component, task.partition
        print(f"taskstate show: task {fq}: no state stored{_nearby(admin, ns, comp, part)}",
              file=sys.stderr)  # fmt: skip
        return 1
    data, version = admin.read(task, a.keys or "", on_reread=reading_again("show"))
    state, extras = {}, {}
    for k in sorted(data):
        kind, v, extra = decode_stored(data[k])
        state[k] = v if kind == "value" else {"$base64": v}
        if extra:
            extras[k] = extra
    info["version"] = version or info["version"]
    if a.json:  # each key's expiry (epoch ms) and schema version, where it has them
        dump({"task": info, "state": state, "keys": extras}, out)
        return 0
    for label, key in (("task", "task"), ("committed batch", "committed_batch"),
                       ("position", "position"), ("keys", "keys"),
                       ("partitions", "partitions"), ("epoch", "epoch"),
                       ("version", "version"), ("codec", "codec"), ("rollbacks", "rollbacks"),
                       ("last writer", "last_writer")):  # fmt: skip
        value = info[key]
        if key == "partitions" and value is None:
            value = "- (none recorded)"
        out.write(f"{label + ':':17}{json.dumps(value) if key == 'position' else value}\n")
    out.write(f"{'updated:':17}{when(info['updated_at'])}\n")
    shown = f" matching {a.keys!r}" if a.keys else ""
    out.write(f"\n{len(state)} key(s){shown}:\n")
    for k, v in state.items():
        text = json.dumps(v, ensure_ascii=False)
        if len(text) > a.width:
            text = text[: a.width - 3] + "..."
        extra = extras.get(k, {})
        notes = [f"expires {when(extra['expires'] / 1000)}"] if "expires" in extra else []
        notes += [f"version {extra['version']}"] if "version" in extra else []
        out.write(f"  {k} = {text}" + (f"  ({', '.join(notes)})" if notes else "") + "\n")
    return 0


def _nearby(admin: AdminClient, ns: str, comp: str, part: int | None = None) -> str:
    """Where the state asked for may be after all: a partition out of range, a typo."""
    if comp:
        tasks = admin.tasks(ns, comp)
        if tasks and part is not None:
            counts = {t.partitions for t in tasks if t.partitions}
            if len(counts) == 1 and part >= (n := counts.pop()):
                return f" ({part} is outside the component's partitions 0-{n - 1})"
            stored = ", ".join(str(t.task.partition) for t in tasks)
            return f" (the component has state in partitions {stored})"
        if tasks:
            return ""
        components = {t.task.component for t in admin.tasks(ns)}
        if components:
            close = similar(comp, components)
            return f"; namespace {ns} has component(s) {', '.join(close)}" if close else ""
    close = similar(ns, admin.namespaces())
    return f"; namespaces with state of a similar name: {', '.join(close)}" if close else ""


def cmd_drop(a: argparse.Namespace, admin: AdminClient, out: IO[str]) -> int:
    """`taskstate drop`: delete stored state; only with --yes."""
    ns, comp, part = parse_scope(a.scope, allow_partition=True)
    if not a.yes:
        raise UsageError(
            f"dropping {a.scope} deletes its stored state for good; run again with --yes"
        )
    n = admin.drop(ns, comp or None, part)
    out.write(f"dropped {n} task(s) in {a.scope}\n")
    return 0


def cmd_adopt(a: argparse.Namespace, admin: AdminClient, out: IO[str]) -> int:
    """`taskstate adopt`: the namespace's query goes on from its next batch, as it is.

    For a query that runs taskstate for the first time past its batch 0, and for
    accepting a total loss on purpose: until then its tasks fail with STATE_LOST.
    """
    if "/" in a.namespace:
        raise UsageError(f"{a.namespace!r}: adopt takes a NAMESPACE (its every component)")
    ns, _, _ = parse_scope(a.namespace, allow_partition=False)
    r = admin.adopt(ns)
    if r.known_before:
        out.write(f"namespace {ns}: already known ({r.tasks} task(s) with state); recorded "
                  "again, nothing else changed\n")  # fmt: skip
    else:
        out.write(f"namespace {ns}: adopted; its query's tasks start empty at the batch "
                  "Spark runs next\n")  # fmt: skip
    return 0


def cmd_sweep(a: argparse.Namespace, admin: AdminClient, out: IO[str]) -> int:
    """`taskstate sweep`: delete the keys whose time to live ran out in idle tasks."""
    ns, comp, _ = parse_scope(a.scope, allow_partition=False)
    tasks, keys = admin.sweep(ns, comp or None, idle_seconds=a.idle_seconds)
    out.write(f"{a.scope}: {keys} expired key(s) deleted in {tasks} task(s)\n")
    return 0
