"""`--redis-url` for the operator commands: a private sidecar started for one call.

Operators often have a Redis and no sidecar to ask: a plugin-based job's sidecars end
with its executors. With `--redis-url`, `taskstate ls|show|export|import|drop|adopt|
doctor` start the real sidecar on a Unix socket in a private temporary directory, ask it,
and stop it. The sidecar reads the Redis password as `taskstate sidecar` does
($TASKSTATE_REDIS_PASSWORD or $TASKSTATE_REDIS_PASSWORD_FILE keep it off the command
line); it serves this process only (socket mode 0600, no TCP).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from taskstate.sidecar.process import SidecarProcess
from taskstate.sidecar.storage.redis.connect import redact


class PrivateSidecarError(RuntimeError):
    """The private sidecar did not start; the message has the end of its log."""


def _serving(target: str, timeout_s: float) -> bool:
    """Whether the sidecar reports SERVING (it reaches its Redis) within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    with grpc.insecure_channel(target.replace("unix://", "unix:")) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            try:
                r = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=2)
                if r.status == health_pb2.HealthCheckResponse.SERVING:
                    return True
            except grpc.RpcError:
                pass
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)


def _log_tail(side: SidecarProcess, text: str | None = None) -> str:
    if text is None:
        text = side.log_path.read_text(errors="replace") if side.log_path.exists() else ""
    return "\n".join(text.strip().splitlines()[-5:])


@contextmanager
def private_sidecar(
    redis_url: str, *, need_redis: bool = True, timeout_s: float = 30.0
) -> Iterator[str]:
    """Start a sidecar for `redis_url`; yield its target; stop it and remove its files.

    With `need_redis`, first wait until it reaches Redis (else the error says so, with
    the end of its log): `doctor` goes on without, and reports what it finds.
    """
    workdir = Path(tempfile.mkdtemp(prefix="taskstate-cli-"))
    side = SidecarProcess(
        redis_url,
        workdir / "s.sock",
        extra=["--socket-mode", "600", "--log-level", "warning"],
        python=sys.executable,
    )
    try:
        try:
            side.start(timeout=timeout_s)
        except RuntimeError as exc:
            tail = _log_tail(side, str(exc).partition("its log:\n")[2])
            raise PrivateSidecarError(
                f"could not start a sidecar for --redis-url {redact(redis_url)}: {tail}"
            ) from None
        if need_redis and not _serving(side.target, min(timeout_s, 8.0)):
            raise PrivateSidecarError(
                f"Redis at {redact(redis_url)} does not answer (check the URL, that Redis "
                f"runs and its password); the sidecar's log ends:\n{_log_tail(side)}"
            )
        yield side.target
    finally:
        side.stop()
        shutil.rmtree(workdir, ignore_errors=True)
