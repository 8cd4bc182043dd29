"""The flush barrier marks the batches a task attempt finished (flush.py, step 6).

FlushCoordinator with a recording `mark_done` in place of the store: which tasks a FLUSH
marks, what it answers when a mark is refused or fails, what DISCARD and the bound on
remembered attempts forget, and what a restarted sidecar takes over from the journal.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from taskstate.proto import codes
from taskstate.proto import taskstate_pb2 as pb
from taskstate.sidecar import flush, metrics
from taskstate.sidecar.errors import SidecarError
from taskstate.sidecar.flush import FlushCoordinator
from taskstate.sidecar.journal import Journal
from taskstate.sidecar.storage.values import TaskKey

A, B = TaskKey("ns", "c", 0), TaskKey("ns", "c", 1)
DOWN = SidecarError(codes.STORAGE_UNAVAILABLE, "Redis did not answer done within 25 s.")


def _dead_pid() -> int:
    """The pid of a process that has ended (a worker killed with its sidecar)."""
    p = subprocess.Popen([sys.executable, "-c", ""])
    p.wait()
    return p.pid


class Marks:
    def __init__(self, answer: bool | Exception = True, failures: int = 0) -> None:
        self.answer = answer
        self.failures = failures  # the first calls raise DOWN (Redis away)
        self.calls: list[tuple[TaskKey, int, str]] = []

    async def __call__(self, task: TaskKey, batch: int, attempt: str) -> bool:
        self.calls.append((task, batch, attempt))
        if self.failures:
            self.failures -= 1
            raise DOWN
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_a_flush_marks_every_task_the_attempt_opened_at_its_batch() -> None:
    marks = Marks()
    fc = FlushCoordinator(mark_done=marks)
    fc.opened(A, 4, "app:7")
    fc.opened(A, 4, "app:7")  # a second worker of the attempt: one mark
    fc.opened(B, 4, "app:7")
    fc.opened(A, 4, "app:8")  # another attempt: not this FLUSH's
    fc.opened(A, None, "app:9")  # a batch job: nothing to mark
    fc.opened(A, 4, "no-number")  # not SCOPE:N: nothing to mark
    assert asyncio.run(fc.flush(7)) == (True, "", 0)
    assert marks.calls == [(A, 4, "app:7"), (B, 4, "app:7")]
    assert asyncio.run(fc.flush(7)) == (True, "", 0)  # marked once: forgotten after
    assert asyncio.run(fc.flush(9)) == (True, "", 0)
    assert len(marks.calls) == 2


def test_a_refused_or_failed_mark_fails_the_flush() -> None:
    fc = FlushCoordinator(mark_done=Marks(False))
    fc.opened(A, 4, "app:7")
    ok, why, _ = asyncio.run(fc.flush(7))
    assert not ok and "task ns/c/0: another attempt claimed batch 4" in why
    fc = FlushCoordinator(mark_done=Marks(ConnectionError("Redis is down")))
    fc.opened(A, 4, "app:7")
    ok, why, _ = asyncio.run(fc.flush(7))
    assert not ok and "could not mark batch 4 done: Redis is down" in why


def test_a_mark_waits_for_redis_within_the_flush_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Redis away at the task's end is waited out: the mark lands when it is back."""
    monkeypatch.setattr(asyncio, "sleep", _no_sleep)
    marks = Marks(failures=3)
    fc = FlushCoordinator(mark_done=marks, timeout_s=60)
    fc.opened(A, 4, "app:7")
    assert asyncio.run(fc.flush(7)) == (True, "", 0)
    assert len(marks.calls) == 4


def test_redis_away_past_the_flush_timeout_leaves_the_batch_unmarked_not_the_executor_stopped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The task's changes are durable: a task that deferred nothing is never fail-stopped."""
    before = metrics.UNMARKED_BATCHES._value.get()
    fc = FlushCoordinator(mark_done=Marks(DOWN), timeout_s=0.5)
    fc.opened(A, 4, "app:7")
    with caplog.at_level(logging.ERROR, logger="taskstate.sidecar.flush"):
        assert asyncio.run(fc.flush(7)) == (True, "", 0)
    assert metrics.UNMARKED_BATCHES._value.get() == before + 1
    assert "not marked finished" in caplog.text


async def _no_sleep(_: float) -> None:
    return None


def test_discard_forgets_and_the_oldest_attempt_is_forgotten_past_the_bound(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    marks = Marks()
    fc = FlushCoordinator(mark_done=marks)
    fc.opened(A, 4, "app:7")
    fc.discard(7)
    assert asyncio.run(fc.flush(7)) == (True, "", 0) and marks.calls == []
    monkeypatch.setattr(flush, "OPENED_MAX", 2)
    with caplog.at_level(logging.WARNING, logger="taskstate.sidecar.flush"):
        for n in (1, 2, 3):
            fc.opened(A, 4, f"app:{n}")
    assert [r.task_attempt for r in caplog.records] == [1]  # type: ignore[attr-defined]
    for n in (1, 2, 3):
        asyncio.run(fc.flush(n))
    assert [c[2] for c in marks.calls] == ["app:2", "app:3"]


# -- the journal a restarted sidecar reads (flush.py: Journal) ---------------------------


async def _defer(fc: FlushCoordinator, pid: int, attempt: int) -> None:
    """A worker `pid` attaches and registers `attempt`; returns once DEFERRED came back."""
    requests: asyncio.Queue[pb.AttachMessage] = asyncio.Queue()

    async def stream() -> AsyncIterator[pb.AttachMessage]:
        while True:
            yield await requests.get()

    orders = fc.attach(stream())
    requests.put_nowait(pb.AttachMessage(hello=pb.AttachHello(pid=pid)))
    assert (await anext(orders)).kind == pb.AttachOrder.ATTACHED
    requests.put_nowait(pb.AttachMessage(defer=pb.DeferRequest(request_id=1, task_attempt=attempt)))
    assert (await anext(orders)).kind == pb.AttachOrder.DEFERRED


def test_a_restarted_sidecar_fails_only_the_flushes_of_attempts_that_held_changes(
    tmp_path: Path,
) -> None:
    """What the killed sidecar journaled: changes held by a worker that died with it fail
    their FLUSH, Opens get marked."""
    path = tmp_path / "jvm-1.barrier.journal"
    dead = _dead_pid()
    killed = FlushCoordinator(mark_done=Marks(), journal=Journal(path))
    killed.opened(A, 4, "app:7")  # a one-block task: deferred nothing
    killed.opened(B, 4, "app:8")  # a group task whose worker held changes, then died
    asyncio.run(_defer(killed, dead, 8))
    killed.opened(A, 5, "app:9")
    killed.discard(9)  # ended: its successor need not know it
    marks = Marks()
    successor = FlushCoordinator(mark_done=marks, journal=Journal(path))
    assert asyncio.run(successor.flush(7)) == (True, "", 0)
    assert marks.calls == [(A, 4, "app:7")]  # still marked finished, by the successor
    ok, why, _ = asyncio.run(successor.flush(8))
    assert not ok
    assert f"the Python worker (pid {dead}) that held its changes ended before they were" in why
    assert asyncio.run(successor.flush(9)) == (True, "", 0) and len(marks.calls) == 1
    third = FlushCoordinator(mark_done=marks, journal=Journal(path))
    assert not asyncio.run(third.flush(8))[0]  # a failed flush is failed again when re-asked
    assert asyncio.run(third.flush(7)) == (True, "", 0) and len(marks.calls) == 1


def test_a_flush_asked_again_of_the_same_sidecar_fails_again() -> None:
    fc = FlushCoordinator(mark_done=Marks(False))
    fc.opened(A, 4, "app:7")
    assert not asyncio.run(fc.flush(7))[0]
    ok, why, _ = asyncio.run(fc.flush(7))
    assert not ok and "an earlier FLUSH of this task attempt failed" in why


def test_the_journal_keeps_only_live_attempts_and_skips_a_line_cut_short(tmp_path: Path) -> None:
    path = tmp_path / "j"
    journal = Journal(path, compact_bytes=2000)
    fc = FlushCoordinator(mark_done=Marks(), journal=journal)
    fc.opened(A, 1, "app:1")  # never ended
    for n in range(2, 200):
        fc.opened(A, n, f"app:{n}")
        asyncio.run(fc.flush(n))
    assert path.stat().st_size < 2000  # rewritten with the live attempts alone
    with path.open("a") as f:
        f.write('["opened",300,"ns","c",0')  # the kill cut the last write short
    assert Journal(path).open() == [["opened", 1, "ns", "c", 0, 1, "app:1"]]
    assert path.read_text().count("\n") == 1


def test_the_bound_on_opens_keeps_a_deferral_in_the_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Forgetting an attempt's Opens (OPENED_MAX) must not forget that it held changes."""
    monkeypatch.setattr(flush, "OPENED_MAX", 2)
    path = tmp_path / "j"
    fc = FlushCoordinator(mark_done=Marks(), journal=Journal(path, compact_bytes=1))
    fc.opened(A, 4, "app:7")
    dead = _dead_pid()
    asyncio.run(_defer(fc, dead, 7))
    for n in (8, 9, 10):  # 7's Opens fall past the bound; each append rewrites the file
        fc.opened(A, 4, f"app:{n}")
    ok, why, _ = asyncio.run(FlushCoordinator(journal=Journal(path)).flush(7))
    assert not ok and f"Python worker (pid {dead})" in why


def test_a_worker_that_attaches_again_to_a_restarted_sidecar_is_flushed(tmp_path: Path) -> None:
    """The worker lives on with its held changes: the successor adopts what it names."""
    path = tmp_path / "j"
    pid = os.getpid()  # a live worker
    killed = FlushCoordinator(mark_done=Marks(), journal=Journal(path))
    killed.opened(B, 4, "app:8")
    asyncio.run(_defer(killed, pid, 8))
    asyncio.run(_defer(killed, pid, 9))
    killed.discard(9)  # ended before the kill: the journal says so
    marks = Marks()
    successor = FlushCoordinator(mark_done=marks, journal=Journal(path), timeout_s=30)

    async def flush_after_reattach() -> tuple[tuple[bool, str, int], pb.AttachOrder]:
        answer = asyncio.create_task(successor.flush(8))  # the plugin asks before it attaches
        await asyncio.sleep(0.3)
        assert not answer.done()  # it waits for the live worker
        requests: asyncio.Queue[pb.AttachMessage] = asyncio.Queue()

        async def stream() -> AsyncIterator[pb.AttachMessage]:
            while True:
                yield await requests.get()

        orders = successor.attach(stream())
        # 9: an attempt the old sidecar ended (the worker answered its FLUSH): ignored
        requests.put_nowait(pb.AttachMessage(hello=pb.AttachHello(pid=pid, held=[8, 9])))
        assert (await anext(orders)).kind == pb.AttachOrder.ATTACHED
        order = await anext(orders)
        requests.put_nowait(
            pb.AttachMessage(flushed=pb.FlushResult(task_attempt=8, ok=True, keys=3))
        )
        return await answer, order

    result, order = asyncio.run(flush_after_reattach())
    assert order.kind == pb.AttachOrder.FLUSH and order.task_attempt == 8
    assert result == (True, "", 3)
    assert marks.calls == [(B, 4, "app:8")]


def test_a_live_worker_that_never_attaches_again_fails_the_flush_at_the_timeout(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j"
    killed = FlushCoordinator(journal=Journal(path))
    asyncio.run(_defer(killed, os.getpid(), 8))
    ok, why, _ = asyncio.run(FlushCoordinator(journal=Journal(path), timeout_s=0.5).flush(8))
    assert not ok and f"Python worker pid {os.getpid()} held group changes" in why
    assert "did not attach again within 0.5 s" in why


def test_a_flush_asked_again_while_it_runs_fails(tmp_path: Path) -> None:
    """The plugin asks again when its connection broke: the first flush is still running.

    The second fails at once and takes nothing of the first's (its Opens, its marks).
    """
    marks = Marks()
    fc = FlushCoordinator(mark_done=marks, timeout_s=5)
    fc.opened(A, 4, "app:7")

    async def both() -> tuple[tuple[bool, str, int], tuple[bool, str, int]]:
        requests: asyncio.Queue[pb.AttachMessage] = asyncio.Queue()

        async def stream() -> AsyncIterator[pb.AttachMessage]:
            while True:
                yield await requests.get()

        orders = fc.attach(stream())
        requests.put_nowait(pb.AttachMessage(hello=pb.AttachHello(pid=1)))
        await anext(orders)
        requests.put_nowait(pb.AttachMessage(defer=pb.DeferRequest(request_id=1, task_attempt=7)))
        await anext(orders)
        first = asyncio.create_task(fc.flush(7))
        assert (await anext(orders)).kind == pb.AttachOrder.FLUSH  # the worker commits now
        second = await fc.flush(7)  # asked again meanwhile
        requests.put_nowait(pb.AttachMessage(flushed=pb.FlushResult(task_attempt=7, ok=True)))
        return await first, second

    first, second = asyncio.run(both())
    assert first[0] and not second[0] and "still under way" in second[1]
    assert marks.calls == [(A, 4, "app:7")]  # the first flush marked the batch finished


def test_a_short_write_is_an_error_and_leaves_no_fragment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk: the record is refused, and the next one is read back whole."""
    path = tmp_path / "j"
    journal = Journal(path)
    journal.open()
    write = os.write
    left = [2]

    def failing(fd: int, data: bytes) -> int:  # half a record, then nothing: a full disk
        left[0] -= 1
        return write(fd, bytes(data)[:5]) if left[0] else 0

    monkeypatch.setattr(os, "write", failing)
    with pytest.raises(OSError, match="wrote 0 bytes"):
        journal.deferred(7, 4242)
    monkeypatch.setattr(os, "write", write)
    journal.deferred(8, 4243)
    assert ["deferred", 8, 4243] in Journal(path).open()


async def _hello(fc: FlushCoordinator, pid: int, held: list[int]) -> pb.AttachOrder:
    """A worker `pid` attaches naming `held`; returns the ATTACHED order."""
    requests: asyncio.Queue[pb.AttachMessage] = asyncio.Queue()

    async def stream() -> AsyncIterator[pb.AttachMessage]:
        while True:
            yield await requests.get()

    orders = fc.attach(stream())
    requests.put_nowait(pb.AttachMessage(hello=pb.AttachHello(pid=pid, held=held)))
    order = await anext(orders)
    assert order.kind == pb.AttachOrder.ATTACHED
    return order


def test_a_worker_that_names_nothing_holds_nothing_and_is_not_waited_for(tmp_path: Path) -> None:
    """The sidecar journaled a deferral and died before the worker heard DEFERRED: the
    worker committed that block itself. Its next hello names nothing, so the FLUSH
    answers at once instead of waiting for the flush timeout and failing."""
    path = tmp_path / "j"
    killed = FlushCoordinator(journal=Journal(path))
    asyncio.run(_defer(killed, os.getpid(), 8))
    successor = FlushCoordinator(journal=Journal(path), timeout_s=60)

    async def attach_then_flush() -> tuple[bool, str, int]:
        order = await _hello(successor, os.getpid(), [])
        assert list(order.adopted) == []
        return await asyncio.wait_for(successor.flush(8), timeout=5)

    assert asyncio.run(attach_then_flush()) == (True, "", 0)


def test_a_new_stream_of_the_same_worker_takes_over_before_the_old_ones_end_is_seen() -> None:
    """The worker's stream broke without a restart and its new hello came first."""
    fc = FlushCoordinator(timeout_s=30)

    async def run() -> tuple[list[int], tuple[bool, str, int]]:
        await _defer(fc, 4242, 8)  # the old stream: still open on this side
        requests: asyncio.Queue[pb.AttachMessage] = asyncio.Queue()

        async def stream() -> AsyncIterator[pb.AttachMessage]:
            while True:
                yield await requests.get()

        orders = fc.attach(stream())
        requests.put_nowait(pb.AttachMessage(hello=pb.AttachHello(pid=4242, held=[8])))
        attached = await anext(orders)
        flush_8 = asyncio.create_task(fc.flush(8))
        order = await anext(orders)  # the FLUSH comes to the new stream
        assert order.kind == pb.AttachOrder.FLUSH and order.task_attempt == 8
        requests.put_nowait(
            pb.AttachMessage(flushed=pb.FlushResult(task_attempt=8, ok=True, keys=2))
        )
        return list(attached.adopted), await flush_8

    adopted, result = asyncio.run(run())
    assert adopted == [8] and result == (True, "", 2)


def test_marks_of_several_tasks_end_within_the_flush_timeout_when_redis_hangs() -> None:
    """Each mark call is bounded by what is left of the flush's time, so the plugin (which
    waits the flush timeout and 30 s more) always hears an answer."""

    async def hangs(task: TaskKey, batch: int, attempt: str) -> bool:
        await asyncio.sleep(3600)  # a stopped Redis: no answer, ever
        return True

    fc = FlushCoordinator(mark_done=hangs, timeout_s=1.5)
    for p in range(3):
        fc.opened(TaskKey("ns", "c", p), 4, "app:7")

    async def timed() -> tuple[tuple[bool, str, int], float]:
        t0 = asyncio.get_running_loop().time()
        answer = await fc.flush(7)
        return answer, asyncio.get_running_loop().time() - t0

    answer, took = asyncio.run(timed())
    assert answer == (True, "", 0)  # unmarked, not failed: the changes are durable
    assert took < 3.0, took


class Commits:
    """The Commit RPC as the coordinator calls it for hand-overs: `fail` errors first."""

    def __init__(self, *fail: SidecarError) -> None:
        self.fail = list(fail)
        self.made: list[pb.CommitRequest] = []

    async def __call__(self, req: pb.CommitRequest) -> object:
        if self.fail:
            raise self.fail.pop(0)
        self.made.append(req)
        return None


def _request(key: str, namespace: str = "ns") -> pb.CommitRequest:
    return pb.CommitRequest(
        task=pb.TaskId(namespace=namespace, component="c", partition=0),
        epoch=3,
        packed_upserts=key.encode(),  # the coordinator does not unpack them
    )


def _hand_over(
    fc: FlushCoordinator,
    handed: list[pb.CommitRequest],
    count: int,
    allows: Any = None,
) -> tuple[bool, str, int]:
    """A worker that holds attempt 8 answers its FLUSH with `handed`, then goes away."""

    async def run() -> tuple[bool, str, int]:
        requests: asyncio.Queue[pb.AttachMessage | None] = asyncio.Queue()

        async def stream() -> AsyncIterator[pb.AttachMessage]:
            while (msg := await requests.get()) is not None:
                yield msg

        orders = fc.attach(stream(), allows)
        requests.put_nowait(pb.AttachMessage(hello=pb.AttachHello(pid=os.getpid())))
        await anext(orders)
        requests.put_nowait(pb.AttachMessage(defer=pb.DeferRequest(request_id=1, task_attempt=8)))
        await anext(orders)
        flushing = asyncio.create_task(fc.flush(8))
        assert (await anext(orders)).kind == pb.AttachOrder.FLUSH
        for req in handed:
            requests.put_nowait(pb.AttachMessage(handover=pb.HandOver(task_attempt=8, commit=req)))
        done = pb.FlushResult(task_attempt=8, ok=True, keys=3, handed_over=count)
        requests.put_nowait(pb.AttachMessage(flushed=done))
        result = await flushing
        requests.put_nowait(None)  # the worker is closed (PySpark's idle workers)
        return result

    return asyncio.run(run())


def test_commits_a_worker_hands_over_are_made_in_order_waiting_out_redis(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("taskstate.sidecar.flush_writes.PAUSE_S", 0.01)
    commits = Commits(DOWN, DOWN)  # Redis away for two tries
    fc = FlushCoordinator(timeout_s=30, commit=commits)
    assert _hand_over(fc, [_request("a"), _request("b")], 2) == (True, "", 3)
    assert [r.packed_upserts for r in commits.made] == [b"a", b"b"]


def test_a_hand_over_short_of_its_count_or_refused_fails_the_flush_at_once() -> None:
    missing = FlushCoordinator(timeout_s=30, commit=Commits())
    ok, why, _ = _hand_over(missing, [_request("a")], 2)
    assert not ok and "handed over 2 commits, 1 arrived" in why
    fenced = SidecarError(codes.FENCED, "task ns/c/0: fenced")
    refused = FlushCoordinator(timeout_s=30, commit=Commits(fenced))
    ok, why, _ = _hand_over(refused, [_request("a")], 1)  # FENCED: no waiting (30 s)
    assert not ok and "FENCED" in why
    other = FlushCoordinator(timeout_s=30, commit=Commits())
    ok, why, _ = _hand_over(other, [_request("a", "other")], 1, allows=lambda ns: ns == "ns")
    assert not ok and "namespace 'other'" in why
