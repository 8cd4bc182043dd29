"""The real sidecar as a child process: `python -m taskstate.sidecar` on a Unix socket.

Started by the operator commands' `--redis-url` (a private sidecar for one call), by the
demo and the example job, and by tests (`taskstate.testing` re-exports it). It runs in a
session (process group) of its own, so that it can be killed whole.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import IO


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
        """Start the sidecar and wait for its ready line.

        A sidecar already running is an error (`kill()` or `stop()` it first): a second
        one on the same socket would leave the first running, out of the test's reach.
        """
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(
                f"the sidecar on {self.socket} is already running (pid {self.proc.pid}); "
                "stop() or kill() it before starting it again, or use "
                "`with SidecarProcess(...) as side:` without calling start()"
            )
        self._log = open(self.log_path, "ab")
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
        """Start it, unless `start()` already did (`with SidecarProcess(...).start() as s:`)."""
        running = self.proc is not None and self.proc.poll() is None
        return self if running else self.start()

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
