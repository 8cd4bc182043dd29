"""What every figure shares: the Figure, the fixtures of a run, and small helpers."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from taskstate.testing import RedisServer, SidecarProcess, find_redis_server


@dataclass
class Figure:
    """One measured figure: ours against the baseline (ratio > 1 means we are faster)."""

    name: str
    ours: float
    baseline: float
    unit: str
    ratio: float
    target: str
    met: bool | None  # None: the issue sets no target for this figure
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Bench:
    """One run's fixtures: a private redis-server, a sidecar on it, a work directory."""

    redis: RedisServer
    side: SidecarProcess
    work: Path

    @property
    def target(self) -> str:
        """The sidecar's address."""
        return self.side.target


def value(i: int, batch: int, size: int = 100) -> str:
    """A value whose JSON encoding is `size` bytes."""
    tag = f"{i}-{batch}-"
    return tag + "x" * (size - 2 - len(tag))


def say(msg: str) -> None:
    """Progress on stderr (the table goes to stdout)."""
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def rss_kb(pid: int) -> int:
    """A process's resident set, KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def hscan_s(redis: Any, key: str, count: int = 2000) -> tuple[float, int]:
    """redis-py's HSCAN of `key` into a dict of bytes, no decoding: (seconds, fields).

    The baseline of a restore, which asks for pages of 2,000 fields too.
    """
    t0 = time.perf_counter()
    got: dict[bytes, bytes] = {}
    cursor = 0
    while True:
        cursor, page = redis.hscan(key, cursor, count=count)
        got.update(page)
        if cursor == 0:
            return time.perf_counter() - t0, len(got)


def pct(xs: list[float], q: float) -> float:
    """The q-quantile of sorted `xs`."""
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def machine() -> dict[str, Any]:
    """Where the figures were measured."""
    import redis

    r_ver = ""
    try:
        r_ver = subprocess.run(  # noqa: S603
            [find_redis_server(), "--version"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except Exception:  # noqa: S110 - informational only
        pass
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "redis_server": r_ver,
        "redis_py": redis.__version__,
    }
