"""The sidecar's settings, parsed once from its command line, and its request limits."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from taskstate.proto import codes

from .auth import Authorizer
from .errors import SidecarError
from .flush import DEFAULT_FLUSH_TIMEOUT_S
from .retry import DEFAULT_DEADLINE_S as DEFAULT_REDIS_DEADLINE_S
from .storage.redis.connect import RedisSettings, redact


class ConfigError(ValueError):
    """Bad sidecar settings; the message says which and what to do."""


@dataclass(frozen=True)
class SidecarConfig:
    """Everything the sidecar needs, parsed once from the command line."""

    redis_url: str
    listen: tuple[str, ...] = field(default_factory=tuple)
    max_message_bytes: int = 64 << 20
    drain_seconds: float = 30.0
    redis_deadline_s: float = DEFAULT_REDIS_DEADLINE_S
    durability_timeout_ms: int | None = None  # None: 5000, or half the deadline
    log_level: str = "info"
    parent_pid: int | None = None
    # no start-up warning about a Redis that can lose state (storage/redis/safety.py)
    allow_volatile_redis: bool = False
    # Secrets and TLS files beside the URL; None: the URL alone.
    redis: RedisSettings | None = None
    health_interval_s: float = 1.0
    # Prometheus /metrics: None = off; 0 picks a free port (printed in the ready line).
    metrics_port: int | None = None
    metrics_host: str = "0.0.0.0"  # noqa: S104 - Prometheus scrapes the pod IP
    # Unix sockets: who may connect (owner and group only, by default).
    socket_mode: int = 0o660
    socket_group: int | None = None
    # TCP listeners: TLS (server certificate; with a client CA, mutual TLS) unless the
    # operator explicitly allows plaintext on a loopback address.
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None
    insecure_tcp_loopback: bool = False
    # beside each Unix listener, the frame lane for the task calls (taskstate.proto.frames)
    frame_lane: bool = True
    # Limits (each refusal names its setting)
    max_commit_keys: int = 1_000_000
    max_key_bytes: int = 4096
    max_value_bytes: int = 16 << 20
    max_in_flight: int = 1024
    max_streams_per_connection: int = 100
    # Tokens (from --tokens-file or $TASKSTATE_TOKENS); None: no tokens.
    auth: Authorizer | None = None
    # The executor plugin's flush barrier (a Unix socket path); None: group blocks commit
    # one by one, as without the plugin.
    barrier: str | None = None
    flush_timeout_s: float = DEFAULT_FLUSH_TIMEOUT_S
    # the sweep of idle tasks' expired keys (sweeper.py): how often (0: never), and how
    # long a task must have been left alone first
    sweep_every_s: float = 60.0
    sweep_idle_s: float = 60.0

    def __repr__(self) -> str:
        return f"SidecarConfig(redis_url={redact(self.redis_url)!r}, listen={self.listen!r})"


LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})


def listen_address(spec: str) -> tuple[str, Path | None]:
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


@dataclass(frozen=True, slots=True)
class Limits:
    """Request limits; each refusal names the limit and the setting that raises it."""

    max_message_bytes: int = 64 << 20
    max_commit_keys: int = 1_000_000
    max_key_bytes: int = 4096
    max_value_bytes: int = 16 << 20
    max_in_flight: int = 1024

    def check_entries(
        self,
        fq: str,
        keys: Sequence[str],
        values: Sequence[bytes | str],
        what: str,
        values_of: Sequence[str] | None = None,
    ) -> None:
        """Refuse a change set over the key count, key size or value size limits.

        `keys`: every key the change set names; `values`: the values it sets, those of
        `values_of` (the first keys, by default).
        """
        n = len(keys)
        if n > self.max_commit_keys:
            raise limit_error(
                f"task {fq}: this {what} has {n} keys, over the limit of {self.max_commit_keys} "
                "(sidecar --max-commit-keys). Nothing was written. Commit more often "
                "(s.commit(position=...)) or raise --max-commit-keys."
            )
        # UTF-8 takes at most 4 bytes a character: only keys longer than a quarter of the
        # limit can be over it, and usually there are none (one C-level pass decides)
        limit = self.max_key_bytes
        over = _over(keys, limit)
        if over is not None:
            key = keys[over]
            raise limit_error(
                f"task {fq}: key {key[:80]!r}... is {len(key.encode())} bytes, over the "
                f"limit of {limit} (sidecar --max-key-bytes). Nothing was written. Use "
                "shorter keys (e.g. a hash of the long one)."
            )
        over = _over(values, self.max_value_bytes)
        if over is not None:
            key, value = (values_of or keys)[over], values[over]
            size = len(value.encode()) if isinstance(value, str) else len(value)
            raise limit_error(
                f"task {fq}: the value of key {key[:80]!r} is {size} bytes, over the "
                f"limit of {self.max_value_bytes} (sidecar --max-value-bytes). Nothing was "
                "written. Split it over several keys, or raise --max-value-bytes."
            )


def _over(items: Sequence[bytes | str], limit: int) -> int | None:
    """The index of the first item longer than `limit` bytes (str: UTF-8), or None."""
    if max(map(len, items), default=0) * 4 <= limit:
        return None  # the common case: one C-level pass
    for i, x in enumerate(items):
        if len(x) > limit:
            return i
        if isinstance(x, str) and len(x) * 4 > limit and len(x.encode()) > limit:
            return i
    return None


def limit_error(message: str) -> SidecarError:
    """A refusal for a request over one of the limits (LIMIT)."""
    return SidecarError(codes.LIMIT, message)
