"""Faults the example job strikes in itself, once per run, in partition 0 of a batch.

A marker file in the run's fault directory records each fault as it strikes, so a
replayed batch does not strike it again and the tests can see that it happened.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .jobs import JobOptions


def once(fault_dir: str, name: str) -> bool:
    """True the first time `name` is asked for in this run (a marker file records it)."""
    try:
        fd = os.open(Path(fault_dir) / name, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def executor_pid() -> int | None:
    """The executor JVM this worker descends from."""
    from taskstate.client._config import _ancestors

    for pid in _ancestors(os.getpid()):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "java":
                return pid
        except OSError:
            continue
    return None


def maybe_fault(opts: JobOptions, batch: int, part: int) -> None:
    """Strike the configured fault in partition 0 of the chosen batch (once per run)."""
    if part != 0 or not opts.fault_dir:
        return
    if batch == opts.kill_worker_at and once(opts.fault_dir, "worker-killed"):
        os.kill(os.getpid(), signal.SIGKILL)  # after the commit, before Spark has the output
    if batch == opts.pause_at and once(opts.fault_dir, "paused"):
        (Path(opts.fault_dir) / "executor-pid").write_text(str(executor_pid() or ""))
        time.sleep(3600)  # the test kills the query or the executor now
    if batch == opts.hold_at and once(opts.fault_dir, "held"):
        # the test breaks something outside Spark (e.g. fails Redis over), then releases us
        release = Path(opts.fault_dir) / "release"
        deadline = time.monotonic() + 300
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
