"""Run the sidecar: listeners, health, reflection, graceful drain on SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
from grpc import aio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection
from redis.exceptions import RedisError

from taskstate.proto import frames
from taskstate.proto.durability import Durability

from . import metrics
from .barrier import BarrierServer
from .config import LOOPBACK, ConfigError, Limits, SidecarConfig, listen_address
from .flush import FlushCoordinator
from .journal import Journal
from .retry import RetryPolicy, permanent_cause
from .rpc.frames import FrameLane
from .rpc.service import SERVICE_NAME, add_to_server
from .storage.base import Backend
from .storage.redis.backend import RedisBackend
from .storage.redis.connect import RedisSettings, RedisUrlError, redact
from .storage.redis.safety import EVICTION, PERSISTENCE, SILENCE_WITH
from .sweeper import Sweeper

log = logging.getLogger("taskstate.sidecar")


def redis_backend(config: SidecarConfig) -> RedisBackend:
    """The Redis store `config` names, with its deadlines (ConfigError when they clash)."""
    wait_ms = config.durability_timeout_ms
    if wait_ms is None:
        wait_ms = int(min(5000, config.redis_deadline_s * 500))
    elif config.redis_deadline_s * 1000 <= wait_ms:
        raise ConfigError(
            f"--redis-deadline {config.redis_deadline_s:g} s must be longer than "
            f"--durability-timeout-ms {wait_ms} (a WAIT must fit inside the deadline)"
        )
    try:
        return RedisBackend(
            config.redis or RedisSettings(url=config.redis_url),
            retry=RetryPolicy(deadline_s=config.redis_deadline_s),
            durability_timeout_ms=wait_ms,
        )
    except RedisUrlError as exc:
        raise ConfigError(str(exc)) from None


class Sidecar:
    """One running sidecar process."""

    def __init__(self, config: SidecarConfig, storage: Backend | None = None) -> None:
        self.config = config
        self.storage: Backend = storage if storage is not None else redis_backend(config)
        self._health_task: asyncio.Task[None] | None = None
        self._serving: bool | None = None
        # tries left to check Redis' persistence (at start, or once it first answers)
        self._persistence_tries = 0 if self.config.allow_volatile_redis else 3
        opts = [
            ("grpc.max_receive_message_length", config.max_message_bytes),
            ("grpc.max_send_message_length", config.max_message_bytes),
            # one client (connection) cannot hog the sidecar: further calls wait
            ("grpc.max_concurrent_streams", config.max_streams_per_connection),
        ]
        self.server = aio.server(options=opts)
        self.flush: FlushCoordinator | None = None
        self.barrier: BarrierServer | None = None
        if config.barrier:
            barrier = Path(config.barrier)
            journal = Journal(barrier.with_suffix(".journal"))
            self.flush = FlushCoordinator(config.flush_timeout_s, journal=journal)
            self.barrier = BarrierServer(self.flush, barrier)
        self.sweeper: Sweeper | None = None
        self._sweep_task: asyncio.Task[None] | None = None
        if config.sweep_every_s > 0:
            self.sweeper = Sweeper(self.storage.admin, config.sweep_every_s, config.sweep_idle_s)
        served = add_to_server(
            self.server,
            self.storage,
            limits=Limits(
                config.max_message_bytes,
                config.max_commit_keys,
                config.max_key_bytes,
                config.max_value_bytes,
                config.max_in_flight,
            ),
            redis_url=redact(config.redis_url),
            auth=config.auth,
            flush=self.flush,
            sweeper=self.sweeper,
        )
        self.frames = FrameLane(served, config.max_message_bytes) if config.frame_lane else None
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

    async def _redis_reachable(self) -> bool:
        """Ping Redis once; a refusal that asking again cannot fix is a ConfigError."""
        try:
            await asyncio.wait_for(self.storage.ping(), timeout=max(2.0, self._ping_timeout()))
        except Exception as exc:
            cause = permanent_cause(exc)
            if cause is not None or not isinstance(exc, RedisError | OSError | TimeoutError):
                cause = cause or exc
                raise ConfigError(
                    f"Redis at {redact(self.config.redis_url)} refused the sidecar: "
                    f"{type(cause).__name__}: {cause}. Check the Redis user and password "
                    "(URL, --redis-password-file or $TASKSTATE_REDIS_PASSWORD) and the TLS "
                    "files (--redis-tls-ca/-cert/-key)."
                ) from None
            if self._serving is not False:
                log.error(
                    "redis unreachable: health is NOT_SERVING",
                    extra={"error": f"{type(exc).__name__}: {exc}"},
                )
            return False
        if self._serving is False:
            log.info("redis reachable again: health is SERVING")
        return True

    async def _warn_if_redis_can_lose_state(self) -> None:
        """Log a warning for each way this Redis can lose state by itself (doctor's checks).

        Once, when Redis first answers: at start, or later when it was not up then (a
        DaemonSet's sidecar often starts before its Redis); a check that fails is tried
        again at the next health checks, three times in all.
        """
        if self._persistence_tries <= 0:
            return
        self._persistence_tries -= 1
        try:
            report = await asyncio.wait_for(
                self.storage.admin.doctor(Durability()), timeout=self._ping_timeout()
            )
        except Exception as exc:  # only a warning: never stop the sidecar for it
            log.info("could not check Redis persistence", extra={"error": repr(exc)})
            return  # tried again at the next good health check, three times in all
        self._persistence_tries = 0
        for c in report.checks:
            if c.name in (PERSISTENCE, EVICTION) and not c.ok:
                log.warning(
                    "redis can lose task state",
                    extra={
                        "check": c.name,
                        "detail": c.detail,
                        "silence_with": SILENCE_WITH,
                    },
                )

    def _ping_timeout(self) -> float:
        return min(5.0, self.config.redis_deadline_s)

    async def _set_health(self, serving: bool) -> None:
        metrics.REDIS_UP.set(1 if serving else 0)
        if serving == self._serving:
            return
        self._serving = serving
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        await self.health.set("", status)
        await self.health.set(SERVICE_NAME, status)

    async def _watch_health(self) -> None:
        """Keep the gRPC health status equal to "Redis answers", checked every interval."""
        while True:
            await asyncio.sleep(self.config.health_interval_s)
            try:
                ok = await self._redis_reachable()
            except ConfigError as exc:  # e.g. the password was changed under us
                log.error("redis refuses the sidecar", extra={"error": str(exc)})
                ok = False
            await self._set_health(ok)
            if ok:
                await self._warn_if_redis_can_lose_state()

    async def start(self) -> list[str]:
        """Check Redis, bind every listener and start serving; returns the addresses.

        Redis that cannot be reached is not fatal (health says NOT_SERVING until it is
        back); Redis that refuses the credentials or the certificate is (ConfigError).
        """
        reachable = await self._redis_reachable()
        if reachable:
            await self._warn_if_redis_can_lose_state()
        for spec in self.config.listen:
            addr, path = listen_address(spec)
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                if path.exists() or path.is_symlink():
                    path.unlink()  # a stale socket from a killed sidecar
                self._sockets.append(path)
                with self._socket_permissions(spec, path):
                    port = self.server.add_insecure_port(addr)
                await self._open_frame_lane(spec, path)
            else:
                port = self._add_tcp_port(spec, addr)
            if path is None:
                host = addr.rpartition(":")[0]
                self.addresses.append(f"tcp://{host}:{port}")
            else:
                self.addresses.append(spec)
        if self.barrier is not None:
            await self.barrier.start()
        await self.server.start()
        await self._set_health(reachable)
        self._health_task = asyncio.create_task(self._watch_health())
        if self.sweeper is not None:
            self._sweep_task = asyncio.create_task(self.sweeper.run())
        return self.addresses

    @contextmanager
    def _socket_permissions(self, spec: str, path: Path) -> Iterator[None]:
        """Create the socket at `path` (in the block) with --socket-mode and --socket-group."""
        # created with the final mode's complement as umask: never more open
        old = os.umask(0o777 & ~self.config.socket_mode)
        try:
            yield
        finally:
            os.umask(old)
        try:
            if self.config.socket_group is not None:
                os.chown(path, -1, self.config.socket_group)
            os.chmod(path, self.config.socket_mode)
        except OSError as exc:
            raise ConfigError(
                f"--listen {spec}: cannot set the socket's group "
                f"{self.config.socket_group} / mode {self.config.socket_mode:o}: {exc}. "
                "The sidecar must be a member of --socket-group."
            ) from exc

    async def _open_frame_lane(self, spec: str, path: Path) -> None:
        """The frame lane beside the gRPC socket `path`, unless off or its path is too long."""
        lane = Path(frames.lane_path(str(path)))
        if self.frames is None:
            if lane.is_socket():  # a killed sidecar's, which would refuse the clients
                lane.unlink()
            return
        if len(str(lane).encode()) > frames.MAX_SOCKET_PATH:
            log.warning(
                "no frame lane: its socket path is too long for a Unix socket; the task "
                "calls go over gRPC (a shorter --listen path gives them the lane)",
                extra={"listen": spec, "lane": str(lane)},
            )
            return
        self._sockets.append(lane)
        with self._socket_permissions(spec, lane):
            await self.frames.listen(lane)

    def _add_tcp_port(self, spec: str, addr: str) -> int:
        """Bind a TCP listener: TLS, or plaintext only on loopback when told so."""
        c = self.config
        if c.tls_cert or c.tls_key:
            if not (c.tls_cert and c.tls_key):
                raise ConfigError("--tls-cert and --tls-key go together")
            try:
                chain = Path(c.tls_cert).read_bytes()
                key = Path(c.tls_key).read_bytes()
                roots = Path(c.tls_client_ca).read_bytes() if c.tls_client_ca else None
            except OSError as exc:
                raise ConfigError(f"--listen {spec}: cannot read a TLS file: {exc}") from exc
            creds = grpc.ssl_server_credentials(
                [(key, chain)], root_certificates=roots, require_client_auth=roots is not None
            )
            return self.server.add_secure_port(addr, creds)
        if c.tls_client_ca:
            raise ConfigError("--tls-client-ca needs --tls-cert and --tls-key")
        host = addr.rpartition(":")[0].strip("[]")
        if c.insecure_tcp_loopback and host in LOOPBACK:
            log.warning("plaintext TCP listener on loopback", extra={"listen": spec})
            return self.server.add_insecure_port(addr)
        raise ConfigError(
            f"--listen {spec} would be plaintext: anyone who reaches the port could read and "
            "write every task's state. Give --tls-cert and --tls-key (and --tls-client-ca "
            "for mutual TLS), or use a Unix socket"
            + (
                ", or for a loopback address only, --insecure-tcp-loopback."
                if host in LOOPBACK
                else ". Plaintext is allowed only on a loopback address (127.0.0.1, ::1)."
            )
        )

    async def stop(self) -> None:
        """Drain: refuse new calls, let in-flight ones finish (bounded), close Redis."""
        if self._health_task is not None:
            self._health_task.cancel()
        if self._sweep_task is not None:
            self._sweep_task.cancel()
        await self.health.enter_graceful_shutdown()
        if self.barrier is not None:  # a flush asked for now fails: the executor is stopping
            await self.barrier.stop()
        if self.frames is not None:
            await asyncio.gather(
                self.frames.stop(self.config.drain_seconds),
                self.server.stop(self.config.drain_seconds),
            )
        else:
            await self.server.stop(self.config.drain_seconds)
        await self.storage.close()
        if self.flush is not None and self.flush.journal is not None:
            self.flush.journal.close()  # after the drain: calls under way still journal
        for path in self._sockets:
            try:
                path.unlink()
            except FileNotFoundError:
                pass


async def serve(config: SidecarConfig) -> int:
    """Run until SIGTERM/SIGINT; print one ready line once listening."""
    sidecar = Sidecar(config)
    try:
        addresses = await sidecar.start()
    except ConfigError:
        await sidecar.storage.close()
        raise
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    watcher = None
    if config.parent_pid is not None:
        watcher = asyncio.create_task(_watch_parent(config.parent_pid, stop))
    extra = ""
    if config.metrics_port is not None:
        try:
            http = metrics.serve(config.metrics_port, config.metrics_host)
        except OSError as exc:
            await sidecar.stop()
            raise ConfigError(
                f"--metrics-port {config.metrics_port}: cannot serve metrics on "
                f"{config.metrics_host}: {exc}. Pick a free port, or 0 for any."
            ) from exc
        extra = f" metrics http://{config.metrics_host}:{http.server_port}/metrics"
    print(
        f"taskstate sidecar ready: listening on {' '.join(addresses)} pid {os.getpid()}{extra}",
        flush=True,
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
