"""taskstate: one command, several subcommands.

- taskstate sidecar --redis-url URL --listen unix:///PATH: run the sidecar.
- taskstate demo [...]: trending hashtags golden, under faults with taskstate and with a
  plain dict, on a private redis-server and sidecar (needs taskstate[spark,demo]).
- taskstate example [...]: run the end-to-end Spark example with a private Redis and
  sidecar (needs taskstate[spark]).
- taskstate spark-package --out DIR: the plugin jar and py-files zip for spark-submit.
- taskstate ls | show | export | import | drop | adopt | sweep | doctor | health: see inside
  the stored state, move it, drop it, adopt a namespace whose state was lost or that
  starts past batch 0, check the setup.
- taskstate rescale NS/COMPONENT --to N: move a component's keys to the partitions
  Spark gives them for N (after a change of partition count).
- taskstate set NS/C/P KEY JSON | del NS/C/P KEY | erase NS/C KEY: edit live state (a
  poisoned key, an erasure request); the job sees it from its next batch on.

taskstate COMMAND --help describes each command and its options.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

ADMIN_COMMANDS = (
    "ls",
    "show",
    "export",
    "import",
    "drop",
    "adopt",
    "sweep",
    "rescale",
    "set",
    "del",
    "erase",
    "doctor",
    "health",
)
COMMANDS = ("sidecar", "demo", "example", "spark-package", *ADMIN_COMMANDS)


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch to a subcommand; its exit status."""
    try:
        status = dispatch(list(sys.argv[1:] if argv is None else argv))
        sys.stdout.flush()  # here, where a closed pipe can still be told apart
        return status
    except BrokenPipeError:
        # The reader went away (taskstate show ... | head): no "[Errno 32] Broken pipe",
        # no traceback at exit. Python's documented way: point stdout at devnull, so that
        # the interpreter's last flush does not fail again, and exit 1.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def dispatch(args: list[str]) -> int:
    """Run the subcommand `args` names."""
    parser = argparse.ArgumentParser(
        prog="taskstate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,  # keep the list a list
    )
    parser.add_argument(
        "command",
        choices=COMMANDS,
    )
    if not args or args[0] in ("-h", "--help"):
        parser.print_help()
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command == "sidecar":
        from taskstate.sidecar.cli import main as sidecar_main

        return sidecar_main(rest)
    if command == "demo":
        from taskstate.demo.trending import main as demo_main

        return demo_main(rest)
    if command == "example":
        from taskstate.demo.example import main as example_main

        return example_main(rest)
    if command in ADMIN_COMMANDS:
        from taskstate.cli.admin import main as admin_main

        return admin_main(command, rest)
    if command == "spark-package":
        from taskstate.spark_plugin.package import main as package_main

        return package_main(rest)
    parser.parse_args(args[:1])  # prints the usage error and exits 2
    return 2


if __name__ == "__main__":
    sys.exit(main())
