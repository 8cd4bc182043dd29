"""Operator commands: see inside the stored state, move it, drop it, check the setup.

    taskstate ls [NAMESPACE[/COMPONENT]] [--json]                     (state.py)
    taskstate show NS/COMPONENT/PARTITION [--keys PATTERN] [--json]   (state.py)
    taskstate export NS[/COMPONENT] [--out FILE]                      (transfer.py)
    taskstate import FILE [--replace] [--partitions N|none]           (transfer.py)
    taskstate drop NS[/COMPONENT[/PARTITION]] --yes                   (state.py)
    taskstate adopt NS                                                (state.py)
    taskstate sweep NS[/COMPONENT] [--idle-seconds S]                 (state.py)
    taskstate rescale NS/COMPONENT --to N [--key-type TYPE]           (rescale.py)
    taskstate set NS/C/P KEY JSON | del NS/C/P KEY | erase NS/C KEY   (edits.py)
    taskstate doctor [--durability LEVEL] [--json]                    (checks.py)
    taskstate health [--live]          (for Kubernetes exec probes)   (checks.py)

A command that names a namespace first finishes or undoes the namespace's writes of the
data source whose job died (their lease ran out), and says which on stderr.
Every command talks to a sidecar through `taskstate.client.admin.AdminClient`
(`--sidecar`, else $TASKSTATE_SIDECAR, else the default socket, else the one executor
plugin sidecar running here: target.py), which holds the Redis credentials; with
`--redis-url` it starts a private one for the call (private.py), for operators whose
jobs' sidecars are gone. Nothing here claims a task: `show` and `export`
read the committed state as the next attempt would restore it, and read again when a
commit lands mid-read. Tables are for people, `--json` for scripts. Exit status: 0 ok,
1 a problem (named on stderr), 2 a usage error.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Sequence
from typing import IO

from taskstate.client import (
    DEFAULT_SIDECAR,
    PermissionDeniedError,
    SidecarUnavailableError,
    TaskStateError,
)
from taskstate.client.address import ENV_SIDECAR
from taskstate.client.admin import AdminClient
from taskstate.proto import ids

from .checks import cmd_doctor, cmd_health
from .common import UsageError
from .edits import add_arguments as edit_arguments
from .edits import cmd_edit
from .private import PrivateSidecarError, private_sidecar
from .rescale import add_arguments as rescale_arguments
from .rescale import cmd_rescale
from .state import cmd_adopt, cmd_drop, cmd_ls, cmd_show, cmd_sweep
from .target import choose_sidecar, unreachable_hint
from .transfer import cmd_export, cmd_import

COMMANDS: dict[str, Callable[[argparse.Namespace, AdminClient, IO[str]], int]] = {
    "ls": cmd_ls,
    "show": cmd_show,
    "export": cmd_export,
    "import": cmd_import,
    "drop": cmd_drop,
    "adopt": cmd_adopt,
    "sweep": cmd_sweep,
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


DESCRIPTIONS = {
    "ls": "Without NAMESPACE: the namespaces that have stored state. With "
    "NAMESPACE[/COMPONENT]: its tasks, each with its committed batch, keys, recorded "
    "partition count, epoch, rollbacks, last update and last writer.",
    "show": "A task's metadata and committed state: exactly what the task's next attempt "
    "restores. Claims nothing; reads again when a commit lands mid-read.",
    "export": "The committed state of a namespace (or of one component) as JSON lines, with "
    "each component's partition count, for taskstate import. Progress on stderr.",
    "import": "Create the tasks of an export, with their partition counts. A task that has "
    "state is refused unless --replace, and so is a count that differs from the "
    "component's.",
    "drop": "Delete the stored state of a namespace, a component or one task (with --yes).",
    "adopt": "Record that a namespace's query goes on from the batch it runs next with the "
    "state Redis holds: accepts a loss (StateLostError) on purpose, or adds taskstate to a "
    "query past its batch 0.",
    "sweep": "Delete the keys whose time to live ran out (processing time) in the tasks of a "
    "namespace or component that no query opened or wrote for --idle-seconds. A running "
    "query expires its keys itself, at each batch; a sidecar sweeps the tasks it served.",
    "rescale": "Move a component's keys to the partitions Spark gives them under another "
    "partition count (the query stopped). Run again after an interruption to finish.",
    "set": "Set one key of a task's live state; the job sees it from its next batch on.",
    "del": "Delete one key of a task's live state; the job sees it from its next batch on.",
    "erase": "Delete one key from every task of a component (an erasure request).",
    "doctor": "Check that taskstate can work here: the sidecar answers and reaches Redis, "
    "Redis keeps its data on disk and evicts no task state, and the durability your jobs "
    "ask for is possible. Each failed check names the problem and the fix; exit status 1 "
    "when one fails.",
    "health": "The sidecar's gRPC health, for Kubernetes exec probes: exit status 0 when it "
    "is SERVING (with --live: when it answers at all), else 1.",
}


def build_parser(command: str) -> argparse.ArgumentParser:
    """The parser of one operator command."""
    p = argparse.ArgumentParser(prog=f"taskstate {command}", description=DESCRIPTIONS[command])
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
            "$TASKSTATE_REDIS_PASSWORD_FILE, as for taskstate sidecar)",
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
        p.add_argument("--width", type=int, default=120,
                       help="truncate values wider than this (default 120)")  # fmt: skip
    elif command == "export":
        p.add_argument("scope", metavar="NAMESPACE[/COMPONENT]", help="what to export")
        p.add_argument("--out", metavar="FILE", help="write JSON lines here (default: stdout)")
    elif command == "import":
        p.add_argument(
            "file", metavar="FILE", help="JSON lines from taskstate export (- for stdin)"
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
    elif command == "sweep":
        p.add_argument("scope", metavar="NAMESPACE[/COMPONENT]", help="what to sweep")
        p.add_argument(
            "--idle-seconds",
            type=float,
            default=60.0,
            metavar="S",
            help="leave alone tasks opened or written this recently (default 60)",
        )
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
        # a health probe asks the sidecar it names (or the default), never another one
        sidecar = choose_sidecar(command, a.sidecar, discover=command != "health")
        return _run(command, a, sidecar, out)
    except UsageError as exc:
        print(f"taskstate {command}: {exc}", file=sys.stderr)
        return 2
    except SidecarUnavailableError as exc:
        print(f"taskstate {command}: {exc}: {unreachable_hint(command)}.", file=sys.stderr)
        if command == "rescale":  # the sidecar went away mid-way: what is left to do
            print(
                f"taskstate {command}: if the rescale had started, it is left part-way, and "
                "the component's tasks refuse to open until it is done: run the same "
                "command again to finish it (it picks up where it stopped).",
                file=sys.stderr,
            )
        return 1
    except TaskStateError as exc:
        print(f"taskstate {command}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        raise  # the reader of stdout went away: main() ends quietly
    except (OSError, PrivateSidecarError) as exc:
        print(f"taskstate {command}: {exc}", file=sys.stderr)
        return 1


def _run(command: str, a: argparse.Namespace, sidecar: str | None, out: IO[str]) -> int:
    with AdminClient(sidecar, timeout_s=a.timeout, token_file=a.token_file) as admin:
        namespace = _namespace_of(a)
        if namespace is not None:
            # a write of the data source whose job died is finished or undone first (a
            # token refused here is refused by the command itself, in its own words)
            with contextlib.suppress(PermissionDeniedError):
                for note in admin.settle(namespace):
                    print(f"taskstate {command}: {note}", file=sys.stderr)
        return COMMANDS[command](a, admin, out)


def _namespace_of(a: argparse.Namespace) -> str | None:
    """The namespace a command names (None: none, or not a valid name: it says so itself)."""
    text = getattr(a, "scope", None) or getattr(a, "task", None) or getattr(a, "namespace", None)
    if not text:
        return None
    namespace = str(text).split("/")[0]
    return None if ids.name_problem("namespace", namespace) else namespace
