"""The sweep of idle tasks: keys whose time to live ran out, deleted when no query opens them.

A running query deletes its expired keys itself: the first claim of each batch does it
(lua/open.lua), as a write of that batch. A task its query no longer opens (the query
stopped, or its partition gets no data) would keep them: every `every_s` seconds this
sidecar sweeps the tasks it has served that nobody opened or wrote for `idle_s` seconds
(lua/sweep.lua: processing time only; an event-time component's keys expire as its
events move time on). A task served by a sidecar that is gone is swept by
`taskstate sweep NS` (the Sweep call), or by its query's next batch.
"""

from __future__ import annotations

import asyncio
import logging
import time

from . import metrics
from .storage.base import AdminStore
from .storage.values import TaskKey

log = logging.getLogger("taskstate.sidecar.sweeper")

FORGET_AFTER_S = 7 * 24 * 3600  # a task not seen this long is no longer this sidecar's


class Sweeper:
    """The tasks this sidecar served, and their sweep."""

    def __init__(self, store: AdminStore, every_s: float, idle_s: float) -> None:
        self.store = store
        self.every_s = every_s
        self.idle_s = idle_s
        self.served: dict[TaskKey, float] = {}  # task -> when last opened or committed here

    def note(self, task: TaskKey) -> None:
        """A task was opened or committed through this sidecar."""
        self.served[task] = time.monotonic()

    async def sweep_once(self) -> int:
        """Sweep the idle tasks this sidecar served; how many keys expired."""
        now = time.monotonic()
        total = 0
        for task, seen in list(self.served.items()):
            if now - seen > FORGET_AFTER_S:
                del self.served[task]
            elif now - seen >= self.idle_s:
                total += await sweep_task(self.store, task, self.idle_s)
        return total

    async def run(self) -> None:
        """Sweep every `every_s` seconds until cancelled (a failed sweep is logged)."""
        while True:
            await asyncio.sleep(self.every_s)
            try:
                await self.sweep_once()
            except Exception:  # Redis away: the next round tries again
                log.warning("the sweep of idle tasks failed; it runs again", exc_info=True)


async def sweep_task(store: AdminStore, task: TaskKey, idle_s: float) -> int:
    """Sweep one task, counting what expired by component."""
    n = await store.sweep(task, idle_s)
    if n:
        metrics.EXPIRED_KEYS.labels(task.component).inc(n)
        log.info("expired keys swept", extra={"task": task.fq, "keys": n})
    return n
