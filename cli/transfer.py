"""`taskstate export | import`: a namespace's state as JSON lines, and back.

A `task` line (what a later Open checks and an import restores: committed batch,
position, codec, partition count) is followed by the task's `entry` lines.
"""

from __future__ import annotations

import argparse
import base64
import os
import stat
import sys
from collections.abc import Iterator
from typing import IO, Any

import orjson

from taskstate.client import NotFoundError, TaskStateError
from taskstate.client.admin import AdminClient
from taskstate.proto import envelope, ids
from taskstate.proto import taskstate_pb2 as pb

from .common import UsageError, decode_stored, info_dict, parse_scope, parse_task
from .state import reading_again

IMPORT_CHUNK = 5000


def cmd_export(a: argparse.Namespace, admin: AdminClient, out: IO[str]) -> int:
    """`taskstate export`: JSON lines, a `task` line then its `entry` lines, per task.

    A task line carries what a later Open checks and an import restores: the committed
    batch, the position, the codec and the component's partition count (`partitions`,
    null when none is recorded).
    """
    ns, comp, _ = parse_scope(a.scope, allow_partition=False)
    tasks = admin.tasks(ns, comp)
    held = [t for t in tasks if t.rescaling]
    if held:
        where = held[0].task
        raise UsageError(
            f"{where.namespace}/{where.component}: a `taskstate rescale` holds its tasks and "
            "has not finished; their state is being moved. Nothing was exported. Finish the "
            "rescale (run it again with its --to), then export."
        )
    target: IO[str] = open(a.out, "w", encoding="utf-8") if a.out else out
    keys = 0
    try:
        for i, t in enumerate(tasks, 1):
            fq = ids.fq_task_id(t.task.namespace, t.task.component, t.task.partition)
            data, version = admin.read(t.task, on_reread=reading_again("export"))
            head = {"type": "task", **info_dict(t), "version": version, "keys": len(data)}
            target.write(orjson.dumps(head).decode() + "\n")
            for k in sorted(data):  # with its expiry and schema version, where it has them
                kind, v, extra = decode_stored(data[k])
                line = {"type": "entry", "task": fq, "key": k, kind: v, **extra}
                target.write(orjson.dumps(line).decode() + "\n")
            keys += len(data)
            print(f"taskstate export: {i}/{len(tasks)} {fq}: {len(data)} keys", file=sys.stderr)
    finally:
        if a.out:
            target.close()
    print(f"taskstate export: {len(tasks)} task(s), {keys} key(s)", file=sys.stderr)
    return 0


def _records(lines: Iterator[str], source: str) -> Iterator[tuple[int, dict[str, Any]]]:
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise UsageError(
                f"{source}:{n}: not a JSON line ({exc}); nothing after it was imported"
            ) from None
        if not isinstance(rec, dict) or rec.get("type") not in ("task", "entry"):
            raise UsageError(f"{source}:{n}: expected a taskstate export line (type task or entry)")
        yield n, rec


def _entry(rec: dict[str, Any], task: str | None, where: str) -> pb.Entry:
    """An entry line of task `task` (the block it is in; None: before any task line)."""
    if task is None or rec.get("task") != task:
        raise UsageError(f"{where}: an entry of {rec.get('task')!r} outside its task's block")
    key = rec.get("key")
    if not isinstance(key, str):
        raise UsageError(f"{where}: the entry has no string 'key'")
    return pb.Entry(key=key, value=_entry_bytes(rec, where))


def _entry_bytes(rec: dict[str, Any], where: str) -> bytes:
    """The stored form of an entry: its JSON, in an envelope with its expiry and version."""
    if "value" in rec:
        body = orjson.dumps(rec["value"])
    elif "value_b64" in rec:
        stored = base64.b64decode(rec["value_b64"])
        if not stored:
            raise UsageError(f"{where}: the entry's 'value_b64' is empty")
        return stored
    else:
        raise UsageError(f"{where}: an entry needs 'value' or 'value_b64'")
    expires, version = rec.get("expires"), rec.get("version", 1)
    if not (expires is None or isinstance(expires, int)) or not isinstance(version, int):
        raise UsageError(f"{where}: 'expires' is epoch milliseconds and 'version' a number")
    return envelope.wrap(body, expires, version)


def _preflight(source: str, a: argparse.Namespace, admin: AdminClient) -> None:
    """Refuse, before anything is written, a file whose import would stop part-way.

    Each task is imported on its own, so a task the sidecar refuses (it has state, or its
    component is split otherwise) would leave the tasks before it imported. This pass
    reads the whole file (a malformed line refuses it too) and asks the sidecar what it
    holds for each task, as its own refusals would. Standard input is read once: its
    tasks are only checked as they are imported.
    """
    counts: dict[str, int] = {}  # the first count the file gives each component
    seen: set[str] = set()
    problems: list[str] = []
    block: str | None = None  # the task whose entries follow
    with open(source, encoding="utf-8") as stream:
        for n, rec in _records(stream, source):
            where = f"{source}:{n}"
            if rec["type"] != "task":
                _entry(rec, block, where)  # a bad line refuses the file before any write
                continue
            block = str(rec.get("task", ""))
            task = parse_task(block)
            count = _partitions_of(rec, a.partitions, where)
            fq = ids.fq_task_id(task.namespace, task.component, task.partition)
            scope = f"{task.namespace}/{task.component}"
            if fq in seen:
                problems.append(f"{where}: task {fq} is in the file twice")
            seen.add(fq)
            # a task without a count takes the component's, as the sidecar gives it
            first = count if count is None else counts.setdefault(scope, count)
            if first != count:
                problems.append(
                    f"{where}: task {fq}: the file splits {scope} into "
                    f"{count} partitions here and {first} before"
                )
            try:
                info = admin.describe(task)
            except NotFoundError:
                info = pb.TaskInfo()
            recorded = info.partitions or None
            brings = count if count is not None else recorded
            if info.exists and not a.replace:
                problems.append(
                    f"{where}: task {fq} already has state (batch "
                    f"{info.committed_batch}, {info.size} keys)"
                )
            if info.rescaling:
                problems.append(f"{where}: task {fq}: a taskstate rescale holds {scope}")
            if recorded is not None and brings != recorded:
                shown = "no count" if count is None else f"{count} partitions"
                problems.append(
                    f"{where}: task {fq}: the state of {scope} in Redis is split "
                    f"into {recorded} partitions, and the import brings {shown}"
                )
            elif brings is not None and task.partition >= brings:
                problems.append(
                    f"{where}: task {fq}: partition {task.partition} is outside "
                    f"the {brings} partitions the export records"
                )
    if problems:
        listed = "\n  ".join(problems[:20])
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise TaskStateError(
            f"{source} cannot be imported whole:\n  {listed}{more}\nNothing was imported. "
            "Drop what is there first (`taskstate drop NAMESPACE[/COMPONENT[/PARTITION]] "
            "--yes`, which also forgets a component's count), or import with --replace to "
            "write over tasks that have state."
        )


def cmd_import(a: argparse.Namespace, admin: AdminClient, out: IO[str]) -> int:
    """`taskstate import`: create the tasks of an export (refusing existing ones).

    A file is checked whole first (`_preflight`), so that the usual refusals leave nothing
    imported; a refusal part-way (standard input, or a job that wrote meanwhile) says which
    tasks were imported before it.
    """
    source = a.file
    if source != "-" and stat.S_ISREG(os.stat(source).st_mode):
        _preflight(source, a, admin)  # a pipe (<(zcat ...), /dev/stdin) is read once
    stream: IO[str] = sys.stdin if source == "-" else open(source, encoding="utf-8")
    imported = keys = 0
    current: dict[str, Any] | None = None
    epoch = 0  # the import's epoch once the current task's first chunk is written
    try:
        pending: list[pb.Entry] = []

        def flush(final: bool) -> None:
            nonlocal epoch, pending
            assert current is not None  # noqa: S101
            first = epoch == 0
            if not pending and not (first and final):
                return
            pos = current.get("position")
            req = pb.ImportRequest(
                task=current["_id"],
                entries=pending,
                committed_batch=int(current.get("committed_batch", -1)),
                codec=current.get("codec") or "json",
                replace=a.replace,
                partitions=current["_partitions"] or 0,
            )
            if pos is not None:
                req.position = orjson.dumps(pos)
                req.has_position = True
            if not first:
                req.append = True
                req.epoch = epoch
            r = admin.import_task(req)
            epoch = r.epoch
            pending = []

        for n, rec in _records(stream, source):
            where = f"{source}:{n}"
            if rec["type"] == "task":
                if current is not None:
                    flush(True)
                    imported, epoch = imported + 1, 0  # done whole
                    print(
                        f"taskstate import: {current['task']}: {current['_n']} keys",
                        file=sys.stderr,
                    )
                task = str(rec.get("task", ""))
                current = {
                    **rec,
                    "_id": parse_task(task),
                    "_n": 0,
                    "_partitions": _partitions_of(rec, a.partitions, where),
                }
                epoch = 0
                continue
            pending.append(_entry(rec, None if current is None else current["task"], where))
            assert current is not None  # noqa: S101 - _entry refuses an entry before a task
            current["_n"] += 1
            keys += 1
            if len(pending) >= IMPORT_CHUNK:
                flush(False)
        if current is not None:
            flush(True)
            imported, epoch = imported + 1, 0
            print(f"taskstate import: {current['task']}: {current['_n']} keys", file=sys.stderr)
    except (TaskStateError, UsageError):
        if imported or epoch:
            part = ""
            if epoch and current is not None:  # a large task's first chunks are written
                part = (f"; {current['task']} was written in part: import it again with "
                        "--replace, or drop it")  # fmt: skip
            print(f"taskstate import: stopped part-way: the {imported} task(s) listed above "
                  f"were imported, those after them in {source} were not{part}",
                  file=sys.stderr)  # fmt: skip
        raise
    finally:
        if stream is not sys.stdin:
            stream.close()
    out.write(f"imported {imported} task(s), {keys} key(s)\n")
    return 0


def _partitions_of(rec: dict[str, Any], given: str | None, where: str) -> int | None:
    """The partition count an export's task line records, or `--partitions` for one without.

    An export that lacks it (written before counts were exported) cannot be imported
    without saying it: an imported task without its count would let a job run under
    another count without the refusal it would get otherwise.
    """
    task = rec.get("task")
    if "partitions" not in rec:
        if given is None:
            raise UsageError(
                f"{where}: task {task} has no partition count (the export was written "
                "before taskstate exported it). Nothing from this line on was imported. Give "
                "the count the job splits the component into: --partitions N (the N of its "
                "repartition(N, key) or of its checkpoint), or --partitions none when the "
                "job declares none."
            )
        return None if given == "none" else int(given)
    count = rec["partitions"]
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        raise UsageError(f"{where}: task {task}: partitions {count!r} is not a count")
    if given is not None and (None if given == "none" else int(given)) != count:
        raise UsageError(
            f"{where}: task {task} was exported with partitions {count}, and --partitions "
            f"says {given}. Nothing from this line on was imported. Leave --partitions out "
            "(it is for exports that lack the count), or rescale after the import."
        )
    return count
