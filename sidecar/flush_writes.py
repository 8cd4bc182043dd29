"""What a flush writes itself, each write waiting out Redis until the flush's deadline.

- Commits a worker handed over: held group changes it could not commit at the FLUSH
  (Redis away, or its replicas behind). The sidecar makes them, so the worker need not
  live through the outage (PySpark closes Python workers idle for a minute). Past the
  deadline the flush fails, naming how long Redis did not take them.
- The batch-done mark: a FLUSH that succeeds marks each task its attempt opened at a
  batch as finished by it (`TaskStore.mark_done`, lua/done.lua): a late attempt of the
  same application that replays the batch then keeps the finished state aside
  (docs/design-notes.md, "An attempt that replays a finished batch"). Past the deadline
  the flush still succeeds, unmarked ("A Redis outage at a task's end").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from taskstate.proto import codes
from taskstate.proto import taskstate_pb2 as pb

from . import metrics
from .errors import SidecarError
from .storage.values import TaskKey

log = logging.getLogger("taskstate.sidecar.flush")

MarkDone = Callable[[TaskKey, int, str], Awaitable[bool]]
Commit = Callable[[pb.CommitRequest], Awaitable[object]]
PAUSE_S = 1.0  # between tries while Redis is away


def passing(exc: SidecarError) -> bool:
    """Whether asking again can succeed: Redis away, or its replicas catching up.

    Not a Redis that refuses the sidecar's credentials, nor a durability the servers cannot
    give (the messages of retry.py and storage/redis/waits.py say which).
    """
    if exc.code == codes.DURABILITY:
        return "did not reach durability" in str(exc)
    return exc.code == codes.STORAGE_UNAVAILABLE and "Redis refused the sidecar" not in str(exc)


async def commit_handed_over(
    commit: Commit, req: pb.CommitRequest, deadline: float, timeout_s: float
) -> str | None:
    """Make a commit a worker handed over, waiting out Redis until `deadline`; the problem."""
    t0 = time.monotonic()
    task = f"{req.task.namespace}/{req.task.component}/{req.task.partition}"
    waited = False
    while True:
        left = deadline - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError
            await asyncio.wait_for(commit(req), timeout=left)
            return None
        except TimeoutError:
            return (
                f"{codes.STORAGE_UNAVAILABLE}: Redis did not take the held group changes of "
                f"task {task} for "
                f"{time.monotonic() - t0:.0f} s (the flush timeout, {timeout_s:g} s: "
                "spark.taskstate.flushTimeoutSeconds)"
            )
        except SidecarError as exc:
            if not passing(exc) or time.monotonic() + PAUSE_S >= deadline:
                return (
                    f"{exc.code}: Redis did not take the held group changes of task {task} "
                    f"for {time.monotonic() - t0:.0f} s (the flush timeout, {timeout_s:g} s: "
                    f"spark.taskstate.flushTimeoutSeconds): {exc}"
                    if passing(exc)
                    else f"{exc.code}: {exc}"
                )
            if not waited:
                waited = True
                log.warning(
                    "a commit handed over by a worker waits for Redis, up to the flush timeout",
                    extra={"task": task, "error": str(exc)},
                )
            await asyncio.sleep(PAUSE_S)
        except Exception as exc:  # e.g. a Redis error reply (OOM): fails the flush, named
            return f"{type(exc).__name__}: {exc}"


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
            if exc.code != codes.STORAGE_UNAVAILABLE or not passing(exc):
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
