"""Task attempts whose held group changes sit in a worker that must attach again.

A worker's Attach stream ends when its sidecar is restarted (the journal tells the new
sidecar which worker held which attempt) or when the stream breaks. The worker, if it
lives, attaches again and names what it holds (client/_attach.py); a FLUSH of such an
attempt waits for that while the worker's process lives, up to the flush's deadline.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterable

POLL_S = 0.1  # how often a waiting flush checks that the worker still lives


class Orphans:
    """Attempt -> pids of the workers that held its changes on a stream that ended."""

    def __init__(self) -> None:
        self._pids: dict[int, set[int]] = {}
        self._attached = asyncio.Event()  # set (and cleared) when a worker adopts attempts

    def add(self, attempt: int, pid: int) -> None:
        """Worker `pid` held changes of `attempt` on a stream that ended."""
        self._pids.setdefault(attempt, set()).add(pid)

    def forget(self, attempt: int) -> None:
        """`attempt` ended (discarded): nobody is waited for."""
        self._pids.pop(attempt, None)

    def attached(self, pid: int, named: Iterable[int]) -> set[int]:
        """Worker `pid` attached naming what it holds: of those, the attempts waiting for it.

        What it does not name it holds no more: nothing waits for it there.
        """
        named = set(named)
        taken = set()
        for attempt in list(self._pids):
            pids = self._pids[attempt]
            if pid in pids:
                pids.discard(pid)
                if attempt in named:
                    taken.add(attempt)
            if not pids:
                del self._pids[attempt]
        return taken

    def adopted(self) -> None:
        """Wake the flushes waiting for a worker (it attached and adopted attempts)."""
        self._attached.set()
        self._attached.clear()

    async def wait(self, attempt: int, deadline: float, timeout_s: float) -> list[str]:
        """Wait, until `deadline`, for the live workers that held `attempt` to attach again.

        Problems: a worker whose process is gone, or one that did not attach in time.
        """
        problems: list[str] = []
        while pids := self._pids.get(attempt):
            for pid in sorted(pids):
                if not alive(pid):
                    pids.discard(pid)
                    problems.append(
                        f"the Python worker (pid {pid}) that held its changes ended before "
                        "they were flushed"
                    )
            if not pids:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                problems.append(
                    f"Python worker pid {', '.join(map(str, sorted(pids)))} held group changes "
                    f"of this task attempt and did not attach again within {timeout_s:g} s "
                    "(after a sidecar restart or a broken Attach stream)"
                )
                break
            try:
                await asyncio.wait_for(self._attached.wait(), timeout=min(POLL_S, left))
            except TimeoutError:
                pass
        self._pids.pop(attempt, None)
        return problems


def alive(pid: int) -> bool:
    """Whether process `pid` exists (the workers are the executor's, on this host)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's: alive
        return True
    return True
