"""Where a task's sidecar is: the address forms, and the executor plugin's sockets.

Public because the Spark glue and the operator commands find sidecars the way a task
does. `grpc_target` turns what a user writes (`unix:///PATH`, `tcp://HOST:PORT`) into
gRPC's form, `address` turns it back for messages.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping

from taskstate.proto import frames
from taskstate.proto.properties import SIDECAR_CONF, SIDECAR_PROPERTY

from ._errors import ConfigError
from ._settings import RUN_DIR, SIDECAR

DEFAULT_SIDECAR = SIDECAR.default
ENV_SIDECAR = SIDECAR.env
ENV_RUN_DIR = RUN_DIR.env
DEFAULT_RUN_DIR = RUN_DIR.default
# the plugin's flush barrier listens on RUN_DIR/jvm-<pid>.barrier.sock, beside the sidecar's
# RUN_DIR/jvm-<pid>.sock: never a sidecar
BARRIER_SUFFIX = ".barrier.sock"
_found: dict[int, str] = {}  # pid -> plugin sidecar found by this process


def ancestors(pid: int, depth: int = 6) -> list[int]:
    """Parent, grandparent, ... of `pid` (Linux /proc), nearest first."""
    out: list[int] = []
    for _ in range(depth):
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            break
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid <= 1:
            break
        out.append(ppid)
        pid = ppid
    return out


def task_sidecar(
    given: str | None, env: Mapping[str, str], local_property: Callable[[str], str | None]
) -> str:
    """The sidecar a task (or a piece of the data source) talks to, checked (ConfigError).

    In order: `given`; `TASKSTATE_SIDECAR`; what `configure(spark, sidecar=...)` set (the
    `taskstate.sidecar` local property, or on Spark Connect the `spark.taskstate.sidecar`
    session conf); the sidecar the executor plugin started for this executor; the default.
    """
    target = (
        given
        or env.get(ENV_SIDECAR)
        or local_property(SIDECAR_PROPERTY)
        or local_property(SIDECAR_CONF)
        or plugin_sidecar(env)
        or DEFAULT_SIDECAR
    )
    grpc_target(target)
    return target


def plugin_sidecar(env: Mapping[str, str]) -> str | None:
    """The sidecar the executor plugin started for the JVM this worker descends from.

    The plugin (io.taskstate.spark.TaskStatePlugin) listens on
    `$TASKSTATE_RUN_DIR/jvm-<executor pid>.sock` (default /tmp/taskstate-run); a Python
    worker's ancestry leads to that executor JVM (worker -> pyspark daemon -> JVM).
    """
    pid = os.getpid()
    if pid in _found:
        return _found[pid]
    run_dir = env.get(ENV_RUN_DIR) or DEFAULT_RUN_DIR
    for ancestor in ancestors(pid):
        path = os.path.join(run_dir, f"jvm-{ancestor}.sock")
        if os.path.exists(path):
            _found[pid] = f"unix://{path}"
            return _found[pid]
    return None


def _refuse_the_lane(spec: str, path: str) -> None:
    if path.endswith(frames.SUFFIX):
        raise ConfigError(
            f"sidecar {spec!r} is a sidecar's frame lane, which the client finds by "
            f"itself: give the sidecar's own socket, unix://"
            f"{path.removesuffix(frames.SUFFIX)}.sock"
        )


def address(target: str) -> str:
    """A gRPC target as users write it (the inverse of `grpc_target`), for messages."""
    if target.startswith("unix:") and not target.startswith("unix://"):
        return "unix://" + target[len("unix:") :]  # the path is absolute: unix:///PATH
    return target if "://" in target else f"tcp://{target}"


@functools.lru_cache(maxsize=64)  # a ConfigError is raised again, never cached
def grpc_target(spec: str) -> str:
    """`unix:///path`, `tcp://host:port` or `host:port` -> a gRPC target string."""
    if spec.startswith("unix://"):
        path = spec[len("unix://") :]
        if not path.startswith("/"):
            raise ConfigError(f"sidecar {spec!r}: use an absolute path, unix:///run/x.sock")
        if path.endswith(BARRIER_SUFFIX):
            raise ConfigError(
                f"sidecar {spec!r} is the executor plugin's flush barrier socket, not a "
                f"sidecar: its executor's sidecar is unix://{path.removesuffix(BARRIER_SUFFIX)}"
                ".sock"
            )
        _refuse_the_lane(spec, path)
        return f"unix:{path}"
    if spec.startswith("unix:"):
        _refuse_the_lane(spec, spec[len("unix:") :])
        return spec
    if spec.startswith("tcp://"):
        spec = spec[len("tcp://") :]
    host, sep, port = spec.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(
            f"sidecar address {spec!r} is not understood: use unix:///PATH or tcp://HOST:PORT"
        )
    return spec
