"""The flush barrier marks the batches a task attempt finished (flush.py, step 6).

FlushCoordinator with a recording `mark_done` in place of the store: which tasks a FLUSH
marks, what it answers when a mark is refused or fails, and what DISCARD and the bound
on remembered attempts forget.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from taskstate.sidecar import flush
from taskstate.sidecar.flush import FlushCoordinator
from taskstate.sidecar.storage.values import TaskKey

A, B = TaskKey("ns", "c", 0), TaskKey("ns", "c", 1)


class Marks:
    def __init__(self, answer: bool | Exception = True) -> None:
        self.answer = answer
        self.calls: list[tuple[TaskKey, int, str]] = []

    async def __call__(self, task: TaskKey, batch: int, attempt: str) -> bool:
        self.calls.append((task, batch, attempt))
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
