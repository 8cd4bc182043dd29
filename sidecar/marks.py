"""The batch-done mark at a flush, and how long it waits for Redis.

A FLUSH that succeeds marks each task its attempt opened at a batch as finished by it
(`TaskStore.mark_done`, lua/done.lua): a late attempt of the same application that
replays the batch then keeps the finished state aside (docs/design-notes.md, "An attempt
that replays a finished batch"). Redis that does not answer is waited for, up to the
flush's deadline; past it the flush still succeeds, unmarked ("A Redis outage at a
task's end").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from taskstate.proto import codes

from . import metrics
from .errors import SidecarError
from .storage.values import TaskKey

log = logging.getLogger("taskstate.sidecar.flush")

MarkDone = Callable[[TaskKey, int, str], Awaitable[bool]]


async def mark_finished(
    mark_done: MarkDone, task: TaskKey, batch: int, attempt_id: str, deadline: float
) -> list[str]:
    """Mark `batch` finished by `attempt_id`, waiting out a Redis outage until `deadline`.

    Problems, if any. Redis that stays away past the deadline is no problem: the task's
    changes are durable, and the mark only guards against a rare race (a late attempt of
    the application replaying the batch and being killed half-way; docs/design-notes.md),
    while a fail-stop would cost an executor on every long outage.
    """
    t0 = time.monotonic()
    waited = False
    while True:
        try:
            left = deadline - time.monotonic()
            if left <= 0:
                raise SidecarError(codes.STORAGE_UNAVAILABLE, "the flush timeout passed")
            # a call may take the Redis deadline: bounded by what is left of the flush's
            if await asyncio.wait_for(mark_done(task, batch, attempt_id), timeout=left):
                return []
            return [
                f"task {task.fq}: another attempt claimed batch {batch} before this "
                "attempt finished (it rolled the batch back)"
            ]
        except (SidecarError, TimeoutError) as exc:
            if isinstance(exc, TimeoutError):
                exc = SidecarError(codes.STORAGE_UNAVAILABLE, "Redis did not answer in time")
            if exc.code != codes.STORAGE_UNAVAILABLE or "Redis refused the sidecar" in str(exc):
                return [f"task {task.fq}: could not mark batch {batch} done: {exc}"]
            if time.monotonic() < deadline - 1.0:
                if not waited:
                    waited = True
                    log.warning(
                        "the batch mark waits for Redis, up to the flush timeout",
                        extra={"task": task.fq, "batch": batch, "error": str(exc)},
                    )
                await asyncio.sleep(min(1.0, max(0.0, deadline - time.monotonic() - 1.0)))
                continue
            metrics.UNMARKED_BATCHES.inc()
            log.error(
                "Redis did not answer for the flush timeout: the task's batch is not "
                "marked finished, and its task is reported done anyway (its changes "
                "are durable)",
                extra={
                    "task": task.fq,
                    "batch": batch,
                    "waited_s": round(time.monotonic() - t0, 1),
                    "error": str(exc),
                },
            )
            return []
        except Exception as exc:  # any other failure fails the flush
            return [f"task {task.fq}: could not mark batch {batch} done: {exc}"]
