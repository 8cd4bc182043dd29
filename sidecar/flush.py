"""Deferred group commits: the workers' Attach streams and the executor plugin's barrier.

applyInPandasWithState runs one `with TaskState` block per group. Beside the executor
plugin, the blocks after an attempt's first keep their changes in the Python worker
(client/_buffer.py) instead of committing each group. The changes become durable once,
in the plugin's `onTaskSucceeded`, which Spark calls on the task thread just before it
sends the task's FINISHED status:

1. A worker attaches once (`Attach` stream, AttachHello -> ATTACHED with its id).
2. The first block it defers for task attempt N registers N on the stream
   (DeferRequest -> DEFERRED). The block returns only after that answer, so the
   registration is here before the worker's output can reach the JVM and the task end.
3. The plugin connects to the barrier socket and writes `FLUSH N`. Every worker that
   registered N gets a FLUSH order, commits N's changes through the ordinary Commit RPC
   (fenced by its epoch, durable as the job asked) and answers with a FlushResult. A
   commit Redis does not take (an outage, replicas behind) the worker hands over
   instead (HandOver messages): the sidecar makes it, waiting out Redis within the
   flush timeout (flush_writes.py), so the worker need not live that long.
4. The barrier answers `OK <keys>` when every one of them committed, else `FAIL
   <reason>`: the plugin then stops the executor before FINISHED can be sent (fail-stop),
   Spark runs the task again and the retry rolls the batch back. A Redis outage is
   waited out first, within the flush timeout. A worker
   whose stream ended is waited for while its process lives (it attaches again and says
   which attempts it still holds); one that died makes its attempts fail.
5. `DISCARD N` (onTaskFailed) tells the workers to drop N's changes.
6. A FLUSH that succeeds also marks each task attempt N opened here at a batch as
   finished by N (`TaskStore.mark_done`), when N still holds the task's claim; else the
   flush fails: another attempt rolled the batch back meanwhile, so N must not be
   reported done. Once marked, another attempt of the same application that replays the
   batch (a zombie of a failed stage attempt, a speculative copy) keeps the finished
   state aside, which a later batch restores if that attempt never finishes. How the
   mark waits for Redis is flush_writes.py's.

The plugin's end, a line protocol on a Unix socket, is barrier.py.

A sidecar the plugin restarts (the old one was killed) must still answer FLUSH truthfully
for tasks that ran across the restart. The coordinator therefore writes what a successor
needs to a journal beside the barrier socket (`Journal`) before it acknowledges it: each
attempt's Opens at a batch (to be marked finished) and each worker's deferral. The
worker, still alive and still holding its changes, attaches to the new sidecar and names
the attempts it holds (AttachHello.held); the new sidecar adopts those the journal names
for that worker, and their FLUSH reaches it as before. Only a worker that died with the
sidecar leaves an attempt that cannot be flushed.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import cast

from taskstate.proto import taskstate_pb2 as pb
from taskstate.proto.ids import split_attempt

from . import metrics
from .flush_writes import Commit, MarkDone, commit_handed_over, mark_finished
from .journal import Inherited, Journal, inherited
from .orphans import Orphans
from .storage.values import TaskKey

log = logging.getLogger("taskstate.sidecar.flush")

Order = pb.AttachOrder

DEFAULT_FLUSH_TIMEOUT_S = 120.0
OPENED_MAX = 4096  # task attempts whose Opens are remembered until their FLUSH or DISCARD


@dataclass(eq=False)
class _Link:
    """One worker's Attach stream."""

    worker: str
    orders: asyncio.Queue[pb.AttachOrder | None] = field(default_factory=asyncio.Queue)
    pid: int = 0
    attempts: set[int] = field(default_factory=set)
    waiting: dict[int, asyncio.Future[pb.FlushResult]] = field(default_factory=dict)
    handed: dict[int, list[pb.CommitRequest]] = field(default_factory=dict)  # HandOver
    refused: dict[int, str] = field(default_factory=dict)  # a HandOver the stream may not make
    allows: Callable[[str], bool] | None = None  # the stream's token: which namespaces
    gone: bool = False


class FlushCoordinator:
    """Which workers hold changes of which task attempt, and the flush that collects them."""

    def __init__(
        self,
        timeout_s: float = DEFAULT_FLUSH_TIMEOUT_S,
        mark_done: MarkDone | None = None,
        journal: Journal | None = None,
        commit: Commit | None = None,
    ) -> None:
        self.timeout_s = timeout_s
        self.mark_done = mark_done  # TaskStore.mark_done (None: nothing is marked)
        self.commit = commit  # the Commit RPC, for what workers hand over
        self.journal = journal  # None: a restarted sidecar would know nothing (tests)
        self._ids = itertools.count(1)
        self._links: dict[str, _Link] = {}
        self._deferred: dict[int, set[str]] = {}  # task attempt -> worker ids
        # held changes of workers whose stream ended (a restarted sidecar's journal, or a
        # detach): waited for until they attach again
        self._orphans = Orphans()
        self._lost: dict[int, str] = {}  # task attempt -> why its changes cannot be flushed
        self._running: set[int] = set()  # task attempts whose FLUSH is under way
        # task attempt -> the tasks it opened here, each at (batch, attempt id SCOPE:N)
        self._opened: dict[int, dict[TaskKey, tuple[int, str]]] = {}
        if journal is not None:
            self._inherit(inherited(journal.open()))

    def _inherit(self, taken: Inherited) -> None:
        """Take over what the killed predecessor's journal says of attempts not ended."""
        self._opened = taken.opened
        for attempt, pids in taken.held.items():
            for pid in pids:
                self._orphans.add(attempt, pid)
        for attempt in taken.unnamed:
            self._lost[attempt] = (
                "the sidecar was restarted during the task while a Python worker held group "
                "changes of this task attempt, and its journal does not say which"
            )
        if taken.opened or taken.held or taken.unnamed:
            log.warning(
                "a restarted sidecar took over the flush barrier's journal; the workers that "
                "held group changes are waited for until they attach again",
                extra={"attempts": len(taken.opened.keys() | taken.held.keys())},
            )

    def opened(self, task: TaskKey, batch: int | None, attempt_id: str) -> None:
        """A Spark task's Open at `batch` (streaming) named attempt `attempt_id` (SCOPE:N)."""
        named = split_attempt(attempt_id)
        if batch is None or named is None:
            return
        tasks = self._opened.setdefault(named[1], {})
        if self.journal is not None and tasks.get(task) != (batch, attempt_id):
            self.journal.opened(named[1], task, batch, attempt_id)
        tasks[task] = (batch, attempt_id)
        while len(self._opened) > OPENED_MAX:  # an attempt whose end never came
            oldest = next(iter(self._opened))
            del self._opened[oldest]
            if self.journal is not None:
                self.journal.forget_opens(oldest)
            log.warning(
                "forgot the Opens of a task attempt that neither flushed nor was discarded: "
                "its batch will not be marked finished",
                extra={"task_attempt": oldest, "kept": OPENED_MAX},
            )

    # -- the workers' side ---------------------------------------------------------

    async def attach(
        self,
        requests: AsyncIterator[pb.AttachMessage],
        allows: Callable[[str], bool] | None = None,
    ) -> AsyncIterator[Order]:
        """Serve one worker's Attach stream until it ends.

        `allows`: the namespaces the stream's token may write (None: tokens are off); a
        commit it hands over for another namespace fails its flush.
        """
        link = _Link(worker=f"w{os.getpid()}-{next(self._ids)}", allows=allows)
        self._links[link.worker] = link
        reader = asyncio.create_task(self._read(link, requests))
        try:
            while True:
                order = await link.orders.get()
                if order is None:
                    return
                yield order
        finally:
            reader.cancel()
            self._detach(link)

    async def _read(self, link: _Link, requests: AsyncIterator[pb.AttachMessage]) -> None:
        try:
            async for msg in requests:
                kind = msg.WhichOneof("kind")
                if kind == "hello":
                    link.pid = msg.hello.pid
                    adopted = self._adopt(link, msg.hello.held)
                    link.orders.put_nowait(
                        Order(kind=Order.ATTACHED, worker=link.worker, adopted=adopted)
                    )
                elif kind == "defer":
                    n = msg.defer.task_attempt
                    if self.journal is not None and n not in link.attempts:
                        self.journal.deferred(n, link.pid)  # before the worker hears DEFERRED
                    link.attempts.add(n)
                    self._deferred.setdefault(n, set()).add(link.worker)
                    metrics.DEFERRED_ATTEMPTS.set(len(self._deferred))
                    link.orders.put_nowait(
                        Order(kind=Order.DEFERRED, request_id=msg.defer.request_id, task_attempt=n)
                    )
                elif kind == "handover":
                    h = msg.handover
                    if link.allows is not None and not link.allows(h.commit.task.namespace):
                        link.refused[h.task_attempt] = (
                            f"a commit handed over for namespace {h.commit.task.namespace!r}, "
                            "which the stream's token may not write"
                        )
                    else:
                        link.handed.setdefault(h.task_attempt, []).append(h.commit)
                elif kind == "flushed":
                    waiter = link.waiting.pop(msg.flushed.task_attempt, None)
                    if waiter is not None and not waiter.done():
                        waiter.set_result(msg.flushed)
        except OSError as exc:  # the journal: no DEFERRED, so the worker commits synchronously
            log.error("could not write the flush barrier's journal: %s", exc)
        except (asyncio.CancelledError, Exception):  # noqa: S110 - the stream ended either way
            pass
        finally:
            link.orders.put_nowait(None)

    def _adopt(self, link: _Link, held: Iterable[int]) -> list[int]:
        """A worker attached: take the attempts it still holds that wait for it.

        A hello names everything the worker holds for this sidecar (client/_attach.py), so
        what it does not name it holds no more (it committed it itself, or never heard
        DEFERRED): nothing is waited for there.
        """
        named = set(held)
        waiting = self._orphans.attached(link.pid, named)
        adopted = []
        for n in sorted(named):
            older = [w for w in self._deferred.get(n, ()) if self._pid_of(w) == link.pid]
            if n not in waiting and not older:
                continue  # ended meanwhile (flushed or discarded), or never deferred here
            for w in older:  # a stream of the same worker whose end is not seen yet
                self._deferred[n].discard(w)
                self._links[w].attempts.discard(n)
            link.attempts.add(n)
            self._deferred.setdefault(n, set()).add(link.worker)
            adopted.append(n)
        if adopted:
            metrics.DEFERRED_ATTEMPTS.set(len(self._deferred))
            metrics.WORKERS_REATTACHED.inc()
            log.warning(
                "a worker attached again with held group changes; their flush goes on",
                extra={"pid": link.pid, "attempts": sorted(adopted)},
            )
            self._orphans.adopted()
        return adopted

    def _pid_of(self, worker: str) -> int | None:
        link = self._links.get(worker)
        return None if link is None else link.pid

    def _detach(self, link: _Link) -> None:
        if link.gone:
            return
        link.gone = True
        self._links.pop(link.worker, None)
        for n in link.attempts:
            holders = self._deferred.get(n)
            if holders is not None and link.worker in holders:
                holders.discard(link.worker)
                if not holders:
                    del self._deferred[n]
                self._orphans.add(n, link.pid)  # it may attach again
        for waiter in link.waiting.values():
            if not waiter.done():
                waiter.set_result(
                    pb.FlushResult(ok=False, error="the worker ended during the flush")
                )
        if link.attempts:
            log.warning(
                "worker detached with unflushed task attempts",
                extra={"pid": link.pid, "attempts": sorted(link.attempts)},
            )

    # -- the plugin's side -----------------------------------------------------------

    async def flush(self, attempt: int) -> tuple[bool, str, int]:
        """Commit everything the workers hold for `attempt`, then mark its tasks finished.

        (ok, why not, keys). Asked again while it runs (the plugin's connection broke), it
        fails at once and touches nothing; one that did not finish fails when asked again.
        """
        if attempt in self._running:
            return False, "a FLUSH of this task attempt was still under way", 0
        self._running.add(attempt)
        finished = False
        try:
            result = await self._flush(attempt)
            finished = True
            return result
        finally:
            self._running.discard(attempt)
            if not finished:
                self._lost[attempt] = "an earlier FLUSH of this task attempt did not finish"

    async def _flush(self, attempt: int) -> tuple[bool, str, int]:
        t0 = time.perf_counter()
        deadline = time.monotonic() + self.timeout_s
        held, problems, keys = await self._flush_held(attempt, deadline)
        opened = self._opened.pop(attempt, {})
        if not problems and self.mark_done is not None:
            for task, (batch, attempt_id) in opened.items():
                problems += await mark_finished(self.mark_done, task, batch, attempt_id, deadline)
        ok = not problems
        if ok and self.journal is not None:
            self.journal.ended(attempt)
        if held or not ok:
            metrics.FLUSHES.labels(outcome="ok" if ok else "failed").inc()
        if held:
            metrics.FLUSH_SECONDS.observe(time.perf_counter() - t0)
        if not ok:
            # asked again (the barrier connection broke), the flush must fail again
            self._lost[attempt] = "an earlier FLUSH of this task attempt failed: " + "; ".join(
                problems
            )
            log.error(
                "flush failed: the executor plugin stops the executor (fail-stop)",
                extra={"task_attempt": attempt, "problems": problems},
            )
        return ok, "; ".join(problems), keys

    async def _flush_held(self, attempt: int, deadline: float) -> tuple[bool, list[str], int]:
        """Commit everything the workers hold for `attempt`: (anything held, problems, keys)."""
        problems = await self._orphans.wait(attempt, deadline, self.timeout_s)
        holders = self._deferred.pop(attempt, set())
        lost = self._lost.pop(attempt, None)
        metrics.DEFERRED_ATTEMPTS.set(len(self._deferred))
        if not holders and lost is None and not problems:
            return False, [], 0  # nothing deferred: the task committed synchronously, or not at all
        if lost:
            problems.insert(0, lost)
        waits: list[tuple[_Link, asyncio.Future[pb.FlushResult]]] = []
        loop = asyncio.get_running_loop()
        for worker in sorted(holders):
            link = self._links.get(worker)
            if link is None:
                problems.append(f"worker {worker} is gone")
                continue
            link.attempts.discard(attempt)
            fut: asyncio.Future[pb.FlushResult] = loop.create_future()
            link.waiting[attempt] = fut
            link.handed.pop(attempt, None)
            link.refused.pop(attempt, None)
            link.orders.put_nowait(Order(kind=Order.FLUSH, task_attempt=attempt))
            waits.append((link, fut))
        keys = 0
        if waits:
            left = max(0.0, deadline - time.monotonic())
            done, pending = await asyncio.wait([f for _, f in waits], timeout=left)
            for link, fut in waits:
                if fut in pending:
                    link.waiting.pop(attempt, None)
                    link.handed.pop(attempt, None)
                    problems.append(
                        f"worker pid {link.pid} did not flush within {self.timeout_s:g} s"
                    )
                    continue
                r = fut.result()
                handed = link.handed.pop(attempt, [])
                refused = link.refused.pop(attempt, None)
                if not r.ok:
                    problems.append(f"worker pid {link.pid}: {r.error}")
                elif refused:
                    problems.append(f"worker pid {link.pid}: {refused}")
                elif len(handed) != r.handed_over or (handed and self.commit is None):
                    problems.append(
                        f"worker pid {link.pid} handed over {r.handed_over} commits, "
                        f"{len(handed)} arrived"
                    )
                else:
                    commit = cast("Commit", self.commit)  # set whenever anything was handed
                    for req in handed:
                        problem = await commit_handed_over(commit, req, deadline, self.timeout_s)
                        if problem:
                            problems.append(f"worker pid {link.pid}: {problem}")
                            break
                    else:
                        keys += r.keys
        return True, problems, keys

    def discard(self, attempt: int) -> None:
        """The attempt failed: its workers drop what they hold for it."""
        self._lost.pop(attempt, None)
        self._orphans.forget(attempt)
        self._opened.pop(attempt, None)
        if self.journal is not None:
            self.journal.ended(attempt)
        for worker in self._deferred.pop(attempt, set()):
            link = self._links.get(worker)
            if link is not None:
                link.attempts.discard(attempt)
                link.orders.put_nowait(Order(kind=Order.DISCARD, task_attempt=attempt))
        metrics.DEFERRED_ATTEMPTS.set(len(self._deferred))
