"""Waiting in a test for what another process does: a bounded poll that names what it awaited.

A sidecar's metric, Redis' replication link, a sweep: each comes true some time after the
test's own step, in another process. `eventually` polls for it and, past its timeout,
fails the test saying what never happened, so a hang is a clear failure, not CI's timeout.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry


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


def redis_blocked(socket: Path, timeout: float = 5.0) -> None:
    """Return once the Redis at `socket` stops answering (a `DEBUG SLEEP` sent from another
    thread has begun), so that what the test does next meets a busy Redis, not an idle one."""

    def busy() -> bool:
        # no retries: redis-py's default retries a timeout with backoff until Redis wakes
        probe = redis.Redis(
            unix_socket_path=str(socket), socket_timeout=0.05, retry=Retry(NoBackoff(), 0)
        )
        try:
            probe.ping()
            return False
        except redis.TimeoutError:
            return True
        finally:
            probe.close()

    eventually(busy, "Redis never became busy (the DEBUG SLEEP did not start)", timeout, 0.01)
