"""Command line of the sidecar."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from . import logs
from .server import SidecarConfig, run


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The sidecar's options (shared by `taskstate sidecar` and `python -m`)."""
    p.add_argument(
        "--redis-url",
        default=os.environ.get("TASKSTATE_REDIS_URL"),
        help="redis://[user:password@]HOST:PORT/DB, rediss://..., or unix:///PATH?db=N "
        "(default: $TASKSTATE_REDIS_URL, which keeps a password off the command line)",
    )
    p.add_argument(
        "--listen",
        action="append",
        required=True,
        metavar="ADDR",
        help="unix:///PATH or tcp://HOST:PORT (repeatable; port 0 picks a free port)",
    )
    p.add_argument(
        "--max-message-bytes",
        type=int,
        default=64 << 20,
        help="largest gRPC message accepted or sent (default 64 MiB)",
    )
    p.add_argument(
        "--drain-seconds",
        type=float,
        default=30.0,
        help="on SIGTERM, how long in-flight calls may take to finish",
    )
    p.add_argument(
        "--redis-deadline",
        type=float,
        default=10.0,
        help="seconds a Redis call is retried for before the request fails",
    )
    p.add_argument(
        "--durability-timeout-ms",
        type=int,
        default=5000,
        help="how long WAIT/WAITAOF may take before a commit fails with DURABILITY",
    )
    p.add_argument(
        "--parent-pid",
        type=int,
        default=None,
        help="exit (draining) when this process, normally the executor JVM, is gone",
    )
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])


def from_args(ns: argparse.Namespace) -> SidecarConfig:
    """Build the frozen config from parsed arguments."""
    return SidecarConfig(
        redis_url=ns.redis_url,
        listen=tuple(ns.listen),
        max_message_bytes=ns.max_message_bytes,
        drain_seconds=ns.drain_seconds,
        redis_deadline_s=ns.redis_deadline,
        durability_timeout_ms=ns.durability_timeout_ms,
        log_level=ns.log_level,
        parent_pid=ns.parent_pid,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments and run the sidecar until SIGTERM."""
    p = argparse.ArgumentParser(prog="taskstate sidecar", description="The taskstate sidecar.")
    add_arguments(p)
    ns = p.parse_args(argv)
    if not ns.redis_url:
        p.error("no Redis: pass --redis-url URL or set TASKSTATE_REDIS_URL")
    logs.setup(ns.log_level)
    return run(from_args(ns))


if __name__ == "__main__":
    sys.exit(main())
