"""Which sidecar a piece of the data source talks to, from the driver or a Spark task.

In order: option `sidecar`; option `redisUrl` (a private sidecar for that Redis, started
once per Python process, as `taskstate --redis-url` does, and gone with the process);
then as a task finds its own (`taskstate.client.address.task_sidecar`):
`TASKSTATE_SIDECAR`, `configure(spark, sidecar=...)`, the executor plugin's sidecar, the
default socket. Tokens and TLS come from the environment, as for TaskState, or option
tokenFile.
Python tasks never speak to Redis: the sidecar stays the one place that knows the layout.
"""

from __future__ import annotations

import atexit
import os
import sys
import tempfile
from pathlib import Path

from taskstate.client import ConfigError, SidecarUnavailableError
from taskstate.client.address import task_sidecar
from taskstate.client.admin import AdminClient
from taskstate.sidecar.process import SidecarProcess

from .options import FORMAT, Options

_private: dict[tuple[int, str], SidecarProcess] = {}  # (pid, redis url) -> its sidecar
_clients: dict[tuple[int, str, str | None], AdminClient] = {}


def local_property(name: str) -> str | None:
    """A Spark local property of the running task (None outside a task)."""
    try:
        from pyspark import TaskContext
    except ImportError:  # pragma: no cover - pyspark is there wherever this runs
        return None
    ctx = TaskContext.get()
    return None if ctx is None else ctx.getLocalProperty(name)


def target(options: Options) -> str:
    """The sidecar to talk to (see the module docstring)."""
    if options.redis_url and not options.sidecar:
        return _private_sidecar(options.redis_url).target
    return task_sidecar(options.sidecar, os.environ, local_property)


def client_for(options: Options) -> AdminClient:
    """A client of the sidecar for this process (kept: Spark reuses its Python workers)."""
    where = target(options)
    key = (os.getpid(), where, options.token_file)
    client = _clients.get(key)
    if client is None:
        client = _clients[key] = AdminClient(where, token_file=options.token_file)
    return client


def unreachable(options: Options, exc: SidecarUnavailableError) -> ConfigError:
    """Say how to reach a sidecar when none answers."""
    return ConfigError(
        f"{FORMAT} data source ({options.where}): {exc}. Load the executor plugin (its "
        "sidecar answers in every executor and, in local mode, on the driver), or pass "
        '.option("sidecar", "tcp://HOST:PORT") or .option("redisUrl", "redis://...") '
        "(a private sidecar per Python process)."
    )


def _private_sidecar(redis_url: str) -> SidecarProcess:
    key = (os.getpid(), redis_url)
    side = _private.get(key)
    if side is not None and side.proc is not None and side.proc.poll() is None:
        return side
    work = Path(tempfile.mkdtemp(prefix="taskstate-ds-"))
    side = SidecarProcess(
        redis_url,
        work / "s.sock",
        extra=["--socket-mode", "600", "--log-level", "warning", "--parent-pid",
               str(os.getpid())],
        python=sys.executable,
    )  # fmt: skip
    try:
        side.start(timeout=30)
    except RuntimeError as exc:
        raise ConfigError(
            f"{FORMAT} data source: could not start a sidecar for option redisUrl: {exc}"
        ) from None
    _private[key] = side
    atexit.register(side.stop)
    return side
