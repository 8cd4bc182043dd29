"""Which sidecar an operator command asks, and what to say when none answers.

`--sidecar`, else `$TASKSTATE_SIDECAR`, else the default socket. Beside a job that runs
the executor plugin there is no default socket: each executor's sidecar listens on
`/tmp/taskstate-run/jvm-<pid>.sock`. When the default socket does not exist and exactly
one such sidecar runs here, the command asks it and says so on stderr; with several, it
names them. (An executor's `jvm-<pid>.barrier.sock` is refused by the client, naming the
socket to pass instead.)
"""

from __future__ import annotations

import os
import sys

from taskstate.client import DEFAULT_SIDECAR
from taskstate.client.address import ENV_SIDECAR
from taskstate.client.admin import plugin_sidecars

from .common import UsageError


def choose_sidecar(command: str, given: str | None, *, discover: bool = True) -> str | None:
    """The sidecar to ask (None: the AdminClient's default, the default socket)."""
    chosen = given or os.environ.get(ENV_SIDECAR)
    if chosen:
        return chosen
    if not discover or os.path.exists(DEFAULT_SIDECAR.removeprefix("unix://")):
        return None
    found = plugin_sidecars()
    if len(found) == 1:
        print(
            f"taskstate {command}: {DEFAULT_SIDECAR} does not exist; asking the executor "
            f"plugin's sidecar {found[0]} (the one running here; --sidecar chooses)",
            file=sys.stderr,
        )
        return found[0]
    if len(found) > 1:
        raise UsageError(
            f"{DEFAULT_SIDECAR} does not exist and {len(found)} executor plugin sidecars run "
            f"here: {', '.join(found)}; pass one with --sidecar (any of them reaches the "
            "same Redis when they belong to one job), or --redis-url URL"
        )
    return None


def unreachable_hint(command: str) -> str:
    """What to do when no sidecar answers: "pass ..." (the error goes before it)."""
    where = "pass --sidecar unix:///PATH (a sidecar that runs here: the executor plugin's "
    where += "listen on /tmp/taskstate-run/jvm-<pid>.sock) or set $TASKSTATE_SIDECAR"
    if command == "health":
        return where
    return (
        f"{where}; or, with no sidecar running, ask Redis through a private sidecar started "
        "for this call: --redis-url URL"
    )
