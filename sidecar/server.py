"""Run the sidecar: listeners, health, reflection, graceful drain on SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

from grpc import aio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection

from taskstate.proto import taskstate_pb2 as pb
from taskstate.proto import taskstate_pb2_grpc as pb_grpc

from .retry import RetryPolicy
from .service import Limits, TaskStateServicer
from .storage.base import Storage
from .storage.redis_backend import RedisStorage

log = logging.getLogger("taskstate.sidecar")
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["TaskStateService"].full_name


class ConfigError(ValueError):
    """Bad sidecar settings; the message says which and what to do."""


@dataclass(frozen=True)
class SidecarConfig:
    """Everything the sidecar needs, parsed once from the command line."""

    redis_url: str
    listen: tuple[str, ...] = field(default_factory=tuple)
    max_message_bytes: int = 64 << 20
    drain_seconds: float = 30.0
    redis_deadline_s: float = 10.0
    durability_timeout_ms: int = 5000
    log_level: str = "info"
    parent_pid: int | None = None


def _listen_address(spec: str) -> tuple[str, Path | None]:
    """`unix:///path` or `tcp://host:port` -> (grpc address, socket path)."""
    if spec.startswith("unix://"):
        path = spec[len("unix://") :]
        if not path.startswith("/"):
            raise ConfigError(f"--listen {spec!r}: use an absolute path, unix:///run/x.sock")
        return f"unix:{path}", Path(path)
    if spec.startswith("tcp://"):
        hostport = spec[len("tcp://") :]
        host, sep, port = hostport.rpartition(":")
        if not sep or not port.isdigit() or not host:
            raise ConfigError(f"--listen {spec!r}: use tcp://HOST:PORT (PORT 0 picks a free one)")
        return hostport, None
    raise ConfigError(f"--listen {spec!r}: use unix:///PATH or tcp://HOST:PORT")


class Sidecar:
    """One running sidecar process."""

    def __init__(self, config: SidecarConfig, storage: Storage | None = None) -> None:
        self.config = config
        self.storage: Storage = storage or RedisStorage(
            config.redis_url,
            retry=RetryPolicy(deadline_s=config.redis_deadline_s),
            durability_timeout_ms=config.durability_timeout_ms,
        )
        opts = [
            ("grpc.max_receive_message_length", config.max_message_bytes),
            ("grpc.max_send_message_length", config.max_message_bytes),
        ]
        self.server = aio.server(options=opts)
        pb_grpc.add_TaskStateServiceServicer_to_server(
            TaskStateServicer(self.storage, Limits(config.max_message_bytes)), self.server
        )
        self.health = HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection(
            (
                SERVICE_NAME,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            ),
            self.server,
        )
        self.addresses: list[str] = []
        self._sockets: list[Path] = []

    async def start(self) -> list[str]:
        """Bind every listener and start serving; returns the bound addresses."""
        for spec in self.config.listen:
            addr, path = _listen_address(spec)
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                if path.exists() or path.is_symlink():
                    path.unlink()  # a stale socket from a killed sidecar
                self._sockets.append(path)
            port = self.server.add_insecure_port(addr)
            if path is None:
                host = addr.rpartition(":")[0]
                self.addresses.append(f"tcp://{host}:{port}")
            else:
                self.addresses.append(spec)
        await self.server.start()
        status = health_pb2.HealthCheckResponse.SERVING
        try:
            await self.storage.ping()
        except Exception as exc:  # serve anyway; health tells the truth
            log.error("redis unreachable at start", extra={"error": repr(exc)})
            status = health_pb2.HealthCheckResponse.NOT_SERVING
        await self.health.set("", status)
        await self.health.set(SERVICE_NAME, status)
        return self.addresses

    async def stop(self) -> None:
        """Drain: refuse new calls, let in-flight ones finish (bounded), close Redis."""
        await self.health.enter_graceful_shutdown()
        await self.server.stop(self.config.drain_seconds)
        await self.storage.close()
        for path in self._sockets:
            try:
                path.unlink()
            except FileNotFoundError:
                pass


async def serve(config: SidecarConfig) -> int:
    """Run until SIGTERM/SIGINT; print one ready line once listening."""
    sidecar = Sidecar(config)
    addresses = await sidecar.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    watcher = None
    if config.parent_pid is not None:
        watcher = asyncio.create_task(_watch_parent(config.parent_pid, stop))
    print(
        f"taskstate sidecar ready: listening on {' '.join(addresses)} pid {os.getpid()}", flush=True
    )
    log.info("sidecar ready", extra={"listen": addresses})
    await stop.wait()
    if watcher is not None:
        watcher.cancel()
    log.info("draining", extra={"grace_s": config.drain_seconds})
    await sidecar.stop()
    log.info("sidecar stopped")
    return 0


async def _watch_parent(pid: int, stop: asyncio.Event, every_s: float = 0.5) -> None:
    """Set `stop` once process `pid` is gone (we were re-parented, or it no longer exists).

    A sidecar started by the executor plugin must not outlive a SIGKILLed executor.
    """
    while not stop.is_set():
        gone = os.getppid() != pid
        if not gone:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                gone = True
            except PermissionError:
                pass
        if gone:
            log.warning("parent process is gone: stopping", extra={"parent_pid": pid})
            stop.set()
            return
        await asyncio.sleep(every_s)


def run(config: SidecarConfig) -> int:
    """Blocking entry point."""
    try:
        return asyncio.run(serve(config))
    except ConfigError as exc:
        print(f"taskstate sidecar: {exc}", file=sys.stderr)
        return 2
