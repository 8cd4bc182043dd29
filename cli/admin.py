"""Operator commands: see inside the stored state, move it, drop it, check the setup.

    taskstate ls [NAMESPACE[/COMPONENT]] [--json]
    taskstate show NS/COMPONENT/PARTITION [--keys PATTERN] [--json]
    taskstate export NS[/COMPONENT] [--out FILE]
    taskstate import FILE [--replace]
    taskstate drop NS[/COMPONENT[/PARTITION]] --yes
    taskstate adopt NS
    taskstate rescale NS/COMPONENT --to N [--key-type TYPE]     (rescale.py)
    taskstate set NS/C/P KEY JSON | del NS/C/P KEY | erase NS/C KEY   (edits.py)
    taskstate doctor [--durability LEVEL] [--json]
    taskstate health [--live]          (for Kubernetes exec probes)

Every command talks to a sidecar (`--sidecar`, else $TASKSTATE_SIDECAR, else the default
socket), which holds the Redis credentials; with `--redis-url` it starts a private one for
the call (private.py), for operators whose jobs' sidecars are gone. Nothing here claims
a task: `show` and `export` read the committed state as the next attempt would restore
it, and retry when a commit lands mid-read. Tables are for people, `--json` for scripts.
Exit status: 0 ok, 1 a problem (named on stderr), 2 a usage error.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any

import grpc
import orjson
from grpc_health.v1 import health_pb2, health_pb2_grpc

from taskstate.client._config import DEFAULT_SIDECAR, ENV_SIDECAR, grpc_target
from taskstate.client._errors import (
    ConfigError,
    StateChangedError,
    TaskStateError,
)
from taskstate.client._security import SidecarSecurity
from taskstate.client._transport import translate
from taskstate.proto import ids
from taskstate.proto import taskstate_pb2 as pb
from taskstate.proto import taskstate_pb2_grpc as pb_grpc
from taskstate.proto.durability import Durability

from .edits import add_arguments as edit_arguments
from .edits import cmd_edit
from .private import PrivateSidecarError, private_sidecar
from .rescale import add_arguments as rescale_arguments
from .rescale import cmd_rescale

IMPORT_CHUNK = 5000
READ_ATTEMPTS = 8  # with jittered, doubling pauses: about 4 s at most


class UsageError(Exception):
    """Bad command-line input (exit 2)."""


# -- talking to the sidecar ------------------------------------------------------------


class Admin:
    """A connection to one sidecar, with errors turned into TaskStateError once."""

    def __init__(
        self, sidecar: str, timeout_s: float, security: SidecarSecurity | None = None
    ) -> None:
        self.sidecar = sidecar
        self.target = grpc_target(sidecar)
        self.timeout_s = timeout_s
        # TLS and the token from the environment, as for the client (see _security)
        self.channel = (security or SidecarSecurity.from_env()).channel(
            self.target,
            [
                ("grpc.max_receive_message_length", 256 << 20),
                ("grpc.max_send_message_length", 256 << 20),
            ],
        )
        self.stub = pb_grpc.TaskStateServiceStub(self.channel)
        self.reread = 0  # reads started again because a commit landed mid-read

    def health(self, timeout_s: float) -> int:
        """The sidecar's gRPC health status (raises grpc.RpcError when it does not answer)."""
        r = health_pb2_grpc.HealthStub(self.channel).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=timeout_s
        )
        status: int = r.status
        return status

    def call(self, method: str, request: Any, task: str | None = None) -> Any:
        """One unary call; a failure becomes the matching TaskStateError."""
        try:
            return getattr(self.stub, method)(request, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            raise translate(exc, task, self.sidecar) from None

    def read(self, task: pb.TaskId, pattern: str) -> tuple[dict[str, bytes], str]:
        """The committed state (one version), retried while commits land mid-read."""
        fq = ids.fq_task_id(task.namespace, task.component, task.partition)
        for attempt in range(READ_ATTEMPTS):
            out: dict[str, bytes] = {}
            version = ""
            try:
                for chunk in self.stub.Read(
                    pb.ReadRequest(task=task, pattern=pattern), timeout=self.timeout_s
                ):
                    for e in chunk.entries:
                        out[e.key] = e.value
                    if chunk.last:
                        version = chunk.version
                return out, version
            except grpc.RpcError as exc:
                err = translate(exc, fq, self.sidecar)
                if not isinstance(err, StateChangedError) or attempt == READ_ATTEMPTS - 1:
                    raise err from None
                self.reread += 1
                print(f"taskstate: {fq} changed while it was read; reading again", file=sys.stderr)
                # jittered, so that a read does not keep phase with a job committing at a
                # steady pace (S311: timing, not security)
                time.sleep(min(1.0, 0.05 * 2**attempt) * random.uniform(0.5, 1.5))  # noqa: S311
        raise AssertionError("unreachable")  # pragma: no cover


def _task_id(text: str) -> pb.TaskId:
    parts = text.split("/")
    if len(parts) != 3 or not parts[2].isdigit():
        raise UsageError(
            f"{text!r}: name a task as NAMESPACE/COMPONENT/PARTITION, e.g. jobs/ewma/0"
        )
    _check_names(parts[0], parts[1])
    return pb.TaskId(namespace=parts[0], component=parts[1], partition=int(parts[2]))


def _scope(text: str, *, allow_partition: bool) -> tuple[str, str, int | None]:
    parts = text.split("/")
    most = 3 if allow_partition else 2
    if not 1 <= len(parts) <= most or any(not p for p in parts):
        shape = "NAMESPACE[/COMPONENT[/PARTITION]]" if allow_partition else "NAMESPACE[/COMPONENT]"
        raise UsageError(f"{text!r}: expected {shape}")
    ns, comp = parts[0], parts[1] if len(parts) > 1 else ""
    _check_names(ns, comp or None)
    part = None
    if len(parts) == 3:
        if not parts[2].isdigit():
            raise UsageError(f"{text!r}: the partition must be a number")
        part = int(parts[2])
    return ns, comp, part


def _check_names(namespace: str, component: str | None) -> None:
    for problem in (
        ids.name_problem("namespace", namespace),
        ids.name_problem("component", component) if component is not None else None,
    ):
        if problem:
            raise UsageError(problem)


# -- rendering -------------------------------------------------------------------------


def _decode(value: bytes) -> tuple[str, Any]:
    """('value', parsed JSON) or ('value_b64', base64) for bytes that are not JSON."""
    try:
        return "value", orjson.loads(value)
    except orjson.JSONDecodeError:
        return "value_b64", base64.b64encode(value).decode()


def _info_dict(t: pb.TaskInfo) -> dict[str, Any]:
    position: Any = None
    if t.has_position:
        position = _decode(t.position)[1]
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


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts)) + "Z" if ts else "-"


def _table(rows: list[Sequence[Any]], out: IO[str]) -> None:
    cells = [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    for r in cells:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")


def _dump(obj: Any, out: IO[str]) -> None:
    out.write(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


# -- commands ----------------------------------------------------------------------------


def cmd_ls(a: argparse.Namespace, admin: Admin, out: IO[str]) -> int:
    """`taskstate ls`: namespaces, or the tasks of one with their metadata."""
    if not a.scope:
        names = list(admin.call("List", pb.ListRequest()).namespaces)
        if a.json:
            _dump(names, out)
        elif names:
            out.write("\n".join(names) + "\n")
        else:
            out.write("no namespaces have stored state\n")
        return 0
    ns, comp, _ = _scope(a.scope, allow_partition=False)
    tasks = [
        _info_dict(t)
        for t in admin.call("List", pb.ListRequest(namespace=ns, component=comp)).tasks
    ]
    if a.json:
        _dump(tasks, out)
        return 0
    if not tasks:
        out.write(f"no tasks with stored state in {a.scope}\n")
        return 0
    rows: list[Sequence[Any]] = [
        ("TASK", "BATCH", "KEYS", "PARTITIONS", "EPOCH", "ROLLBACKS", "UPDATED", "LAST WRITER")
    ]
    for t in tasks:
        rows.append((t["task"], t["committed_batch"], t["keys"], t["partitions"] or "-",
                     t["epoch"], t["rollbacks"], _when(t["updated_at"]),
                     t["last_writer"] or "-"))  # fmt: skip
    _table(rows, out)
    return 0


def cmd_show(a: argparse.Namespace, admin: Admin, out: IO[str]) -> int:
    """`taskstate show`: a task's metadata and committed state (what a restore gets)."""
    task = _task_id(a.task)
    fq = a.task
    info = _info_dict(admin.call("Describe", pb.DescribeRequest(task=task), fq))
    if not info["exists"]:
        print(f"taskstate: task {fq}: no state stored", file=sys.stderr)
        return 1
    data, version = admin.read(task, a.keys or "")
    state = {}
    for k in sorted(data):
        kind, v = _decode(data[k])
        state[k] = v if kind == "value" else {"$base64": v}
    info["version"] = version or info["version"]
    if a.json:
        _dump({"task": info, "state": state}, out)
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
    out.write(f"{'updated:':17}{_when(info['updated_at'])}\n")
    shown = f" matching {a.keys!r}" if a.keys else ""
    out.write(f"\n{len(state)} key(s){shown}:\n")
    for k, v in state.items():
        text = json.dumps(v, ensure_ascii=False)
        if len(text) > a.width:
            text = text[: a.width - 3] + "..."
        out.write(f"  {k} = {text}\n")
    return 0


def _tasks_of(admin: Admin, scope: str) -> list[pb.TaskInfo]:
    ns, comp, _ = _scope(scope, allow_partition=False)
    return list(admin.call("List", pb.ListRequest(namespace=ns, component=comp)).tasks)


def cmd_export(a: argparse.Namespace, admin: Admin, out: IO[str]) -> int:
    """`taskstate export`: JSON lines, a `task` line then its `entry` lines, per task.

    A task line carries what a later Open checks and an import restores: the committed
    batch, the position, the codec and the component's partition count (`partitions`,
    null when none is recorded).
    """
    tasks = _tasks_of(admin, a.scope)
    held = [t for t in tasks if t.rescaling]
    if held:
        where = held[0].task
        raise UsageError(
            f"{where.namespace}/{where.component}: a `taskstate rescale` holds its tasks and "
            "has not finished; their state is being moved. Nothing was exported. Finish the "
            "rescale (run it again with its --to), then export."
        )
    target: IO[str] = open(a.out, "w", encoding="utf-8") if a.out else out  # noqa: SIM115
    keys = 0
    try:
        for i, t in enumerate(tasks, 1):
            fq = ids.fq_task_id(t.task.namespace, t.task.component, t.task.partition)
            data, version = admin.read(t.task, "")
            head = {"type": "task", **_info_dict(t), "version": version, "keys": len(data)}
            target.write(orjson.dumps(head).decode() + "\n")
            for k in sorted(data):
                kind, v = _decode(data[k])
                target.write(
                    orjson.dumps({"type": "entry", "task": fq, "key": k, kind: v}).decode() + "\n"
                )
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


def _entry_bytes(rec: dict[str, Any], where: str) -> bytes:
    if "value" in rec:
        return orjson.dumps(rec["value"])
    if "value_b64" in rec:
        return base64.b64decode(rec["value_b64"])
    raise UsageError(f"{where}: an entry needs 'value' or 'value_b64'")


def cmd_import(a: argparse.Namespace, admin: Admin, out: IO[str]) -> int:
    """`taskstate import`: create the tasks of an export (refusing existing ones)."""
    source = a.file
    stream: IO[str] = sys.stdin if source == "-" else open(source, encoding="utf-8")  # noqa: SIM115
    imported = keys = 0
    try:
        current: dict[str, Any] | None = None
        pending: list[pb.Entry] = []
        epoch = 0

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
            r = admin.call("Import", req, current["task"])
            epoch = r.epoch
            pending = []

        for n, rec in _records(stream, source):
            where = f"{source}:{n}"
            if rec["type"] == "task":
                if current is not None:
                    flush(True)
                    imported += 1
                    print(
                        f"taskstate import: {current['task']}: {current['_n']} keys",
                        file=sys.stderr,
                    )
                task = str(rec.get("task", ""))
                current = {
                    **rec,
                    "_id": _task_id(task),
                    "_n": 0,
                    "_partitions": _partitions_of(rec, a.partitions, where),
                }
                epoch = 0
                continue
            if current is None or rec.get("task") != current["task"]:
                raise UsageError(
                    f"{where}: an entry of {rec.get('task')!r} outside its task's block"
                )
            key = rec.get("key")
            if not isinstance(key, str):
                raise UsageError(f"{where}: the entry has no string 'key'")
            pending.append(pb.Entry(key=key, value=_entry_bytes(rec, where)))
            current["_n"] += 1
            keys += 1
            if len(pending) >= IMPORT_CHUNK:
                flush(False)
        if current is not None:
            flush(True)
            imported += 1
            print(f"taskstate import: {current['task']}: {current['_n']} keys", file=sys.stderr)
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


def cmd_drop(a: argparse.Namespace, admin: Admin, out: IO[str]) -> int:
    """`taskstate drop`: delete stored state; only with --yes."""
    ns, comp, part = _scope(a.scope, allow_partition=True)
    if not a.yes:
        raise UsageError(
            f"dropping {a.scope} deletes its stored state for good; run again with --yes"
        )
    req = pb.DropRequest(namespace=ns, component=comp)
    if part is not None:
        req.partition = part
    n = admin.call("Drop", req).tasks_dropped
    out.write(f"dropped {n} task(s) in {a.scope}\n")
    return 0


def cmd_adopt(a: argparse.Namespace, admin: Admin, out: IO[str]) -> int:
    """`taskstate adopt`: the namespace's query goes on from its next batch, as it is.

    For a query that runs taskstate for the first time past its batch 0, and for
    accepting a total loss on purpose: until then its tasks fail with STATE_LOST.
    """
    if "/" in a.namespace:
        raise UsageError(f"{a.namespace!r}: adopt takes a NAMESPACE (its every component)")
    ns, _, _ = _scope(a.namespace, allow_partition=False)
    r = admin.call("Adopt", pb.AdoptRequest(namespace=ns))
    if r.known_before:
        out.write(f"namespace {ns}: already known ({r.tasks} task(s) with state); recorded "
                  "again, nothing else changed\n")  # fmt: skip
    else:
        out.write(f"namespace {ns}: adopted; its query's tasks start empty at the batch "
                  "Spark runs next\n")  # fmt: skip
    return 0


def cmd_doctor(a: argparse.Namespace, admin: Admin, out: IO[str]) -> int:
    """`taskstate doctor`: sidecar, Redis, persistence; exit 1 when a check fails."""
    try:
        durability = Durability.parse(a.durability)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    checks: list[dict[str, Any]] = []
    report: dict[str, Any] = {"sidecar": admin.sidecar}
    try:
        serving = admin.health(min(admin.timeout_s, 5)) == health_pb2.HealthCheckResponse.SERVING
        checks.append(
            {"name": "sidecar reachable", "ok": True, "detail": f"answers at {admin.sidecar}"}
        )
        checks.append({"name": "sidecar serving", "ok": serving, "detail": "SERVING" if serving else
                       "NOT_SERVING: the sidecar cannot reach Redis; see its log"})  # fmt: skip
    except grpc.RpcError as exc:
        checks.append({"name": "sidecar reachable", "ok": False, "detail":
                       f"no answer at {admin.sidecar} ({exc.code().name}). Start the sidecar "
                       f"(`taskstate sidecar --redis-url ... --listen {admin.sidecar}`) or pass "
                       "--sidecar / set TASKSTATE_SIDECAR to where it listens."})  # fmt: skip
    if checks[0]["ok"]:
        try:
            kind, replicas = durability.to_wire()
            r = admin.call("Doctor", pb.DoctorRequest(durability=kind, replicas=replicas))
            report.update({"redis_url": r.redis_url, "topology": r.topology, "servers": [
                {"address": s.address, "role": s.role, "version": s.version, "aof": s.aof_enabled,
                 "appendfsync": s.appendfsync, "replicas": s.connected_replicas}
                for s in r.servers]})  # fmt: skip
            checks.extend({"name": c.name, "ok": c.ok, "detail": c.detail} for c in r.checks)
        except TaskStateError as exc:
            checks.append({"name": "redis", "ok": False, "detail": str(exc)})
    report["checks"] = checks
    ok = all(c["ok"] for c in checks)
    report["ok"] = ok
    if a.json:
        _dump(report, out)
    else:
        if "topology" in report:
            out.write(f"redis: {report['redis_url']} ({report['topology']})\n")
            rows: list[Sequence[Any]] = [
                ("SERVER", "ROLE", "VERSION", "AOF", "APPENDFSYNC", "REPLICAS")
            ]
            for s in report["servers"]:
                rows.append((s["address"], s["role"], s["version"], "yes" if s["aof"] else "no",
                             s["appendfsync"], s["replicas"]))  # fmt: skip
            _table(rows, out)
            out.write("\n")
        for c in checks:
            out.write(f"[{'ok' if c['ok'] else 'FAIL'}] {c['name']}: {c['detail']}\n")
    return 0 if ok else 1


def cmd_health(a: argparse.Namespace, admin: Admin, out: IO[str]) -> int:
    """`taskstate health`: the sidecar's gRPC health over its socket (Kubernetes probes).

    Exit 0 when it is SERVING (with --live: when it answers at all; a sidecar whose Redis
    is down is alive, only not ready), else 1.
    """
    try:
        status = admin.health(admin.timeout_s)
    except grpc.RpcError as exc:
        print(f"taskstate health: no answer at {admin.sidecar}: {exc.code().name}", file=sys.stderr)
        return 1
    out.write(health_pb2.HealthCheckResponse.ServingStatus.Name(status) + "\n")
    return 0 if a.live or status == health_pb2.HealthCheckResponse.SERVING else 1


COMMANDS: dict[str, Callable[[argparse.Namespace, Admin, IO[str]], int]] = {
    "ls": cmd_ls,
    "show": cmd_show,
    "export": cmd_export,
    "import": cmd_import,
    "drop": cmd_drop,
    "adopt": cmd_adopt,
    "rescale": cmd_rescale,
    "set": cmd_edit,
    "del": cmd_edit,
    "erase": cmd_edit,
    "doctor": cmd_doctor,
    "health": cmd_health,
}


def _count_or_none(text: str) -> str:
    if text == "none" or (text.isdigit() and int(text) >= 1):
        return text
    raise argparse.ArgumentTypeError(f"{text!r} is not a partition count (N >= 1, or none)")


def build_parser(command: str) -> argparse.ArgumentParser:
    """The parser of one operator command."""
    p = argparse.ArgumentParser(prog=f"taskstate {command}")
    p.add_argument(
        "--sidecar",
        default=None,
        help=f"the sidecar to ask (default: ${ENV_SIDECAR}, else {DEFAULT_SIDECAR})",
    )
    if command != "health":
        p.add_argument(
            "--redis-url",
            default=None,
            metavar="URL",
            help="ask this Redis through a private sidecar started for the call, instead "
            "of a running one (the password from $TASKSTATE_REDIS_PASSWORD or "
            "$TASKSTATE_REDIS_PASSWORD_FILE, as for `taskstate sidecar`)",
        )
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per call (default 60)")
    p.add_argument(
        "--token-file",
        metavar="FILE",
        help="the token for a sidecar that asks for one (default: $TASKSTATE_TOKEN_FILE, "
        "$TASKSTATE_TOKEN); TLS settings come from $TASKSTATE_SIDECAR_TLS_*",
    )
    if command == "ls":
        p.add_argument("scope", nargs="?", default="", metavar="NAMESPACE[/COMPONENT]",
                       help="without it: the namespaces that have state")  # fmt: skip
        p.add_argument("--json", action="store_true", help="JSON for scripts, not a table")
    elif command == "show":
        p.add_argument("task", metavar="NAMESPACE/COMPONENT/PARTITION", help="the task to show")
        p.add_argument("--keys", default="", metavar="PATTERN", help="only keys matching this glob")
        p.add_argument("--json", action="store_true", help="JSON for scripts, not a table")
        p.add_argument("--width", type=int, default=120, help="truncate values wider than this")
    elif command == "export":
        p.add_argument("scope", metavar="NAMESPACE[/COMPONENT]", help="what to export")
        p.add_argument("--out", metavar="FILE", help="write JSON lines here (default: stdout)")
    elif command == "import":
        p.add_argument(
            "file", metavar="FILE", help="JSON lines from `taskstate export` (- for stdin)"
        )
        p.add_argument("--replace", action="store_true", help="replace tasks that have state")
        p.add_argument(
            "--partitions",
            type=_count_or_none,
            default=None,
            metavar="N|none",
            help="the partition count, for an export written before taskstate exported it "
            "(a newer export carries it, and this must then agree)",
        )
    elif command == "drop":
        p.add_argument("scope", metavar="NAMESPACE[/COMPONENT[/PARTITION]]", help="what to drop")
        p.add_argument("--yes", action="store_true", help="really delete the stored state")
    elif command == "adopt":
        p.add_argument("namespace", metavar="NAMESPACE",
                       help="the namespace whose query goes on from its next batch")  # fmt: skip
    elif command == "rescale":
        rescale_arguments(p)
    elif command in ("set", "del", "erase"):
        edit_arguments(command, p)
        p.set_defaults(command=command)
    elif command == "health":
        p.add_argument("--live", action="store_true", help="succeed when it answers at all")
    elif command == "doctor":
        p.add_argument("--durability", default="applied",
                       help="the durability your jobs use: applied, replicated:N, fsynced, "
                       "replicated:N,fsynced (default applied)")  # fmt: skip
        p.add_argument("--json", action="store_true", help="JSON for scripts, not a report")
    return p


def main(command: str, argv: Sequence[str], out: IO[str] | None = None) -> int:
    """Run one operator command; the exit status."""
    out = out or sys.stdout
    a = build_parser(command).parse_args(list(argv))
    try:
        if getattr(a, "redis_url", None):
            if a.sidecar:
                raise UsageError("--sidecar and --redis-url: give one or the other")
            with private_sidecar(a.redis_url, need_redis=command != "doctor") as target:
                return _run(command, a, target, out)
        return _run(command, a, a.sidecar or os.environ.get(ENV_SIDECAR) or DEFAULT_SIDECAR, out)
    except UsageError as exc:
        print(f"taskstate {command}: {exc}", file=sys.stderr)
        return 2
    except (TaskStateError, ConfigError) as exc:
        print(f"taskstate {command}: {exc}", file=sys.stderr)
        return 1
    except (OSError, PrivateSidecarError) as exc:
        print(f"taskstate {command}: {exc}", file=sys.stderr)
        return 1


def _run(command: str, a: argparse.Namespace, sidecar: str, out: IO[str]) -> int:
    admin = Admin(sidecar, a.timeout, SidecarSecurity.from_env(token_file=a.token_file))
    return COMMANDS[command](a, admin, out)
