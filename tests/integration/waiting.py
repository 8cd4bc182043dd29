"""Waiting in a test for what another process does: a bounded poll that names what it awaited.

A sidecar's metric, Redis' replication link, a sweep: each comes true some time after the
test's own step, in another process. `eventually` polls for it and, past its timeout,
fails the test saying what never happened, so a hang is a clear failure, not CI's timeout.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


def eventually(check: Callable[[], object], what: str, timeout: float, every: float = 0.05) -> None:
    """Return once `check()` is true; past `timeout` s, fail with `what` (what never happened)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} (waited {timeout:g} s)")
        time.sleep(every)


async def eventually_async(
    check: Callable[[], object], what: str, timeout: float, every: float = 0.05
) -> None:
    """`eventually` inside an event loop: the loop runs while it waits."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} (waited {timeout:g} s)")
        await asyncio.sleep(every)
