"""`taskstate rescale NS/COMPONENT --to N`: move a component's keys to another partition count.

The sidecar does the work (sidecar/storage/redis/rescale.py) and streams its progress;
this prints it. Run again after an interruption, with the same arguments, to finish.
"""

from __future__ import annotations

import argparse
import sys
from typing import IO

from taskstate.client.admin import AdminClient
from taskstate.sidecar.spark_hash import KEY_TYPE_HELP, KEY_TYPES

from .common import UsageError, parse_scope

_PHASES = {
    "plan": "planned",
    "lock": "holding tasks",
    "copy": "copying sources",
    "commit": "writing targets",
    "retire": "deleting tasks beyond the new count",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `taskstate rescale`."""
    p.add_argument("scope", metavar="NAMESPACE/COMPONENT", help="the component to rescale")
    p.add_argument("--to", type=int, required=True, metavar="N",
                   help="the partition count the job will run with")  # fmt: skip
    p.add_argument("--key-type", default="string", choices=KEY_TYPES,
                   help="the type of the column the job partitions by, which each state key "
                   f"is the text of ({KEY_TYPE_HELP}); default string")  # fmt: skip
    p.add_argument("--quiet-seconds", type=float, default=30.0, metavar="S",
                   help="refuse while a task was written less than S seconds ago (a query "
                   "still running); default 30")  # fmt: skip


def cmd_rescale(a: argparse.Namespace, admin: AdminClient, out: IO[str]) -> int:
    """Stream the sidecar's rescale, printing its progress on stderr."""
    ns, comp, _ = parse_scope(a.scope, allow_partition=False)
    if not comp:
        raise UsageError(f"{a.scope!r}: name the component to rescale, NAMESPACE/COMPONENT")
    last = None
    steps = admin.rescale(ns, comp, a.to, key_type=a.key_type, quiet_seconds=a.quiet_seconds)
    for step in steps:
        last = step
        if step.phase == "plan" and step.resumed:
            print(f"taskstate rescale {ns}/{comp}: finishing the rescale to "
                  f"{step.to_partitions} that an earlier run began", file=sys.stderr)  # fmt: skip
        if step.phase in _PHASES:
            keys = f", {step.keys:,} keys" if step.phase == "copy" else ""
            print(f"taskstate rescale {ns}/{comp}: {_PHASES[step.phase]} "
                  f"{step.done}/{step.total}{keys}", file=sys.stderr, flush=True)  # fmt: skip
    if last is None or last.phase != "done":
        raise UsageError("the sidecar ended the rescale without finishing it: run it again")
    if last.from_partitions == last.to_partitions and not last.keys:
        out.write(f"{ns}/{comp}: already split into {last.to_partitions} partitions; nothing "
                  "moved\n")  # fmt: skip
    else:
        out.write(f"{ns}/{comp}: {last.from_partitions} -> {last.to_partitions} partitions, "
                  f"{last.keys:,} keys in place, committed batch {last.batch} kept. Start "
                  f"the job with {last.to_partitions} partitions.\n")  # fmt: skip
    return 0
