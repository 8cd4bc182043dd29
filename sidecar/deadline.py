"""`asyncio.timeout` for the hot path, without asking the kernel for the process id.

On Python 3.11 every `asyncio.get_running_loop()` and `asyncio.current_task()` calls
getpid(2) (a check against a forked child running its parent's loop; gone in 3.12), and
`async with asyncio.timeout(s)` makes three such calls. A task's block went through two
timeouts (the frame lane's deadline and the Redis retry deadline): six system calls, and
in this kind of virtual machine a system call costs microseconds (docs/benchmarks.md,
figure 19).

`Deadline(seconds)` does what `asyncio.timeout` does (the task is cancelled when time is
up, and that cancellation, only that one, leaves the block as TimeoutError), with the
loop found once: a loop whose `_thread_id` is this thread is the one running
here (asyncio's loops set it while they run, and one thread runs one loop at a time).
A loop without that attribute is asked for every time, as asyncio does. The deadlines
of a loop share one timer (`_Watch`): a deadline fires up to TICK_S (20 ms) late.
"""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType

TICK_S = 0.02  # how often the live deadlines of a loop are checked while there are any


class _Watch:
    """The deadlines live on one loop: checked every TICK_S while there are any.

    A call's deadline is then two dictionary operations, where a timer of its own was a
    TimerHandle pushed on the loop's heap and cancelled (and left there until the heap is
    cleaned); a busy sidecar holds one timer, not one per call and per Redis call. A
    deadline fires at most TICK_S late.
    """

    __slots__ = ("live", "loop", "ticking")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.live: dict[Deadline, float] = {}
        self.ticking = False

    def add(self, deadline: Deadline, when: float) -> None:
        self.live[deadline] = when
        if not self.ticking:
            self.ticking = True
            self.loop.call_later(TICK_S, self._tick)

    def _tick(self) -> None:
        live = self.live
        if live:
            now = self.loop.time()
            for deadline in [d for d, when in live.items() if when <= now]:
                del live[deadline]
                deadline.expire()
        if live:
            self.loop.call_later(TICK_S, self._tick)
        else:
            self.ticking = False


_last: _Watch | None = None  # the watch found last (a global: threading.local costs more)


def _watch() -> _Watch:
    """The watch of the loop running in this thread (found once while that loop runs).

    The last one found is the answer when its loop runs in this thread; otherwise (a new
    loop, another thread) a new one is made. Each serves its own deadlines to their end.
    """
    global _last
    watch = _last
    if watch is None or getattr(watch.loop, "_thread_id", None) != threading.get_ident():
        watch = _last = _Watch(asyncio.get_running_loop())
    return watch


class Deadline:
    """`with Deadline(seconds):` inside a task: TimeoutError when `seconds` pass first.

    A synchronous context manager (entering and leaving it waits for nothing), to be
    used inside a coroutine that runs as an asyncio task. None means no deadline.
    """

    __slots__ = ("_cancelling", "_expired", "_seconds", "_task", "_watch")

    def __init__(self, seconds: float | None) -> None:
        self._seconds = seconds
        self._task: asyncio.Task[object] | None = None
        self._watch: _Watch | None = None
        self._cancelling = 0
        self._expired = False

    def __enter__(self) -> Deadline:
        watch = _watch()
        task = asyncio.current_task(watch.loop)
        if task is None:
            raise RuntimeError("a Deadline is used inside an asyncio task")
        self._task = task
        self._cancelling = task.cancelling()
        if self._seconds is not None:
            self._watch = watch
            watch.add(self, watch.loop.time() + self._seconds)
        return self

    def expire(self) -> None:
        """Time is up: cancel the task (its block ends in TimeoutError)."""
        assert self._task is not None  # noqa: S101 - watched from __enter__ on
        self._task.cancel()
        self._expired = True

    @property
    def expired(self) -> bool:
        """Whether the time ran out (the block was cancelled for it)."""
        return self._expired

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._watch is not None:
            self._watch.live.pop(self, None)
            self._watch = None
        if self._expired:
            assert self._task is not None  # noqa: S101 - set by __enter__
            # as asyncio.timeout: only when no other cancellation came meanwhile
            if self._task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
                raise TimeoutError from exc
