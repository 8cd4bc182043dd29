"""Command line of the sidecar."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from . import logs
from .auth import Authorizer, TokenConfigError
from .config import SidecarConfig
from .retry import DEFAULT_DEADLINE_S as DEFAULT_REDIS_DEADLINE_S
from .server import run
from .storage.redis.connect import RedisSettings, RedisUrlError, TlsFiles


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The sidecar's options (shared by `taskstate sidecar` and `python -m`)."""
    p.add_argument(
        "--redis-url",
        default=os.environ.get("TASKSTATE_REDIS_URL"),
        help="redis://[user:password@]HOST:PORT/DB, rediss://... (TLS), unix:///PATH?db=N, "
        "redis+sentinel://HOST:PORT[,HOST:PORT...]/MASTER[/DB], "
        "redis+cluster://HOST:PORT[,HOST:PORT...] (default: $TASKSTATE_REDIS_URL, which "
        "keeps a password off the command line). See docs/how-to/redis.md",
    )
    p.add_argument(
        "--redis-username",
        default=os.environ.get("TASKSTATE_REDIS_USERNAME"),
        help="ACL user (default: from the URL or $TASKSTATE_REDIS_USERNAME)",
    )
    p.add_argument(
        "--redis-password-file",
        default=os.environ.get("TASKSTATE_REDIS_PASSWORD_FILE"),
        metavar="FILE",
        help="read the Redis password from FILE (wins over $TASKSTATE_REDIS_PASSWORD and the URL)",
    )
    p.add_argument(
        "--sentinel-password-file",
        default=os.environ.get("TASKSTATE_SENTINEL_PASSWORD_FILE"),
        metavar="FILE",
        help="password of the Sentinel processes themselves, if they require one "
        "(or $TASKSTATE_SENTINEL_PASSWORD)",
    )
    p.add_argument("--redis-tls-ca", metavar="FILE", help="CA bundle that signed Redis' cert")
    p.add_argument("--redis-tls-cert", metavar="FILE", help="client certificate (mutual TLS)")
    p.add_argument("--redis-tls-key", metavar="FILE", help="key of the client certificate")
    p.add_argument(
        "--redis-tls-no-check-hostname",
        action="store_true",
        help="verify the certificate chain but not that it names the host (not recommended)",
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
        help="on SIGTERM, how long in-flight calls may take to finish (default 30)",
    )
    p.add_argument(
        "--redis-deadline",
        type=float,
        default=DEFAULT_REDIS_DEADLINE_S,
        help="seconds a Redis call is retried for before the request fails (default "
        f"{DEFAULT_REDIS_DEADLINE_S:g}: a Redis failover of up to a minute costs a task two "
        "retries at most)",
    )
    p.add_argument(
        "--durability-timeout-ms",
        type=int,
        default=None,
        help="how long WAIT/WAITAOF may take before a commit fails with DURABILITY "
        "(default: 5000, or half of --redis-deadline when that is shorter)",
    )
    p.add_argument(
        "--allow-volatile-redis",
        action="store_true",
        help="do not warn at start about a Redis that can lose state by itself (no "
        "persistence, or an allkeys-* eviction policy): for throwaway setups such as the demo",
    )
    p.add_argument(
        "--parent-pid",
        type=int,
        default=None,
        help="exit (draining) when this process, normally the executor JVM, is gone",
    )
    p.add_argument(
        "--barrier",
        metavar="PATH",
        default=None,
        help="Unix socket of the executor plugin's flush barrier (set by the plugin): the "
        "later group blocks of a micro-batch attempt commit once, when the plugin asks, "
        "instead of one by one (default: off)",
    )
    p.add_argument(
        "--flush-timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="how long a flush may wait for the workers' commits before it fails and the "
        "plugin stops the executor (default 120)",
    )
    p.add_argument(
        "--sweep-every",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="sweep the tasks this sidecar served for keys whose time to live ran out, this "
        "often, when their query no longer opens them (0: never; default 60)",
    )
    p.add_argument(
        "--sweep-idle",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="a sweep leaves alone a task opened or written this recently (default 60)",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus metrics on http://HOST:PORT/metrics (0: any free port; "
        "default: off)",
    )
    p.add_argument(
        "--metrics-host",
        default="0.0.0.0",  # noqa: S104 - scraped from the pod IP
        help="address the metrics endpoint binds (default 0.0.0.0)",
    )
    p.add_argument(
        "--socket-mode",
        type=_socket_mode,
        default=0o660,
        help="permissions of Unix sockets, octal (default 0660: owner and group only)",
    )
    p.add_argument(
        "--socket-group",
        type=_group,
        default=None,
        help="group (name or id) of Unix sockets, e.g. the Spark executors' group",
    )
    p.add_argument("--tls-cert", metavar="FILE", help="TLS certificate chain of TCP listeners")
    p.add_argument("--tls-key", metavar="FILE", help="its private key")
    p.add_argument(
        "--tls-client-ca",
        metavar="FILE",
        help="require client certificates signed by this CA on TCP listeners (mutual TLS)",
    )
    p.add_argument(
        "--insecure-tcp-loopback",
        action="store_true",
        help="allow a plaintext TCP listener on a loopback address (tests, local tools)",
    )
    p.add_argument(
        "--no-frame-lane",
        dest="frame_lane",
        action="store_false",
        help="serve only gRPC: no frame lane socket (X.frames.sock) beside a Unix listener "
        "X.sock, so clients make every call over gRPC",
    )
    for flag, default, what in (
        ("--max-commit-keys", 1_000_000, "keys (upserts + deletes) in one commit or import"),
        ("--max-key-bytes", 4096, "bytes of one key"),
        ("--max-value-bytes", 16 << 20, "bytes of one encoded value"),
        ("--max-in-flight", 1024, "requests served at once; more are refused with LIMIT"),
        ("--max-streams-per-connection", 100, "concurrent calls of one client connection; "
         "more wait"),
    ):  # fmt: skip
        p.add_argument(flag, type=_positive, default=default, help=f"limit: {what} ({default})")
    p.add_argument(
        "--tokens-file",
        metavar="FILE",
        help='require tokens: JSON {"tokens": [{name, token, namespaces}]} (or '
        "$TASKSTATE_TOKENS); tokens never go on the command line",
    )
    p.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="the least severe records logged (info)",
    )


def _positive(value: str) -> int:
    """A positive integer (argparse type)."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} must be at least 1")
    return n


def _socket_mode(value: str) -> int:
    """An octal file mode such as 0660 (argparse type)."""
    try:
        mode = int(value, 8)
    except ValueError:
        mode = -1
    if not 0 <= mode <= 0o777:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an octal file mode such as 0660 (owner and group read and write)"
        )
    return mode


def _group(value: str) -> int:
    """A group name or id -> gid (argparse type)."""
    if value.isdigit():
        return int(value)
    import grp

    try:
        return grp.getgrnam(value).gr_gid
    except KeyError:
        raise argparse.ArgumentTypeError(f"no group named {value!r}") from None


def redis_settings(ns: argparse.Namespace) -> RedisSettings:
    """The URL plus secrets from files or the environment (RedisUrlError if unusable)."""
    return RedisSettings.build(
        ns.redis_url,
        username=ns.redis_username,
        password_file=ns.redis_password_file,
        password_env=os.environ.get("TASKSTATE_REDIS_PASSWORD"),
        sentinel_password_file=ns.sentinel_password_file,
        sentinel_password_env=os.environ.get("TASKSTATE_SENTINEL_PASSWORD"),
        tls=TlsFiles(
            ca=ns.redis_tls_ca,
            cert=ns.redis_tls_cert,
            key=ns.redis_tls_key,
            check_hostname=not ns.redis_tls_no_check_hostname,
        ),
    )


def from_args(ns: argparse.Namespace) -> SidecarConfig:
    """Build the frozen config from parsed arguments."""
    return SidecarConfig(
        redis_url=ns.redis_url,
        redis=redis_settings(ns),
        listen=tuple(ns.listen),
        max_message_bytes=ns.max_message_bytes,
        drain_seconds=ns.drain_seconds,
        redis_deadline_s=ns.redis_deadline,
        durability_timeout_ms=ns.durability_timeout_ms,
        log_level=ns.log_level,
        parent_pid=ns.parent_pid,
        allow_volatile_redis=ns.allow_volatile_redis,
        barrier=ns.barrier,
        flush_timeout_s=ns.flush_timeout,
        sweep_every_s=ns.sweep_every,
        sweep_idle_s=ns.sweep_idle,
        metrics_port=ns.metrics_port,
        metrics_host=ns.metrics_host,
        socket_mode=ns.socket_mode,
        socket_group=ns.socket_group,
        tls_cert=ns.tls_cert,
        tls_key=ns.tls_key,
        tls_client_ca=ns.tls_client_ca,
        insecure_tcp_loopback=ns.insecure_tcp_loopback,
        frame_lane=ns.frame_lane,
        max_commit_keys=ns.max_commit_keys,
        max_key_bytes=ns.max_key_bytes,
        max_value_bytes=ns.max_value_bytes,
        max_in_flight=ns.max_in_flight,
        max_streams_per_connection=ns.max_streams_per_connection,
        auth=Authorizer.load(ns.tokens_file, os.environ.get("TASKSTATE_TOKENS")),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments and run the sidecar until SIGTERM."""
    p = argparse.ArgumentParser(
        prog="taskstate sidecar",
        description="The gRPC server beside each executor that talks to Redis for the tasks: "
        "it listens on --listen (a Unix socket, or TCP with TLS), serves the task protocol, "
        "gRPC health and reflection, and prints one ready line once it listens.",
    )
    add_arguments(p)
    ns = p.parse_args(argv)
    if not ns.redis_url:
        p.error("no Redis: pass --redis-url URL or set TASKSTATE_REDIS_URL")
    logs.setup(ns.log_level)
    try:
        config = from_args(ns)
    except (RedisUrlError, TokenConfigError) as exc:
        print(f"taskstate sidecar: {exc}", file=sys.stderr)
        return 2
    return run(config)


if __name__ == "__main__":
    sys.exit(main())
