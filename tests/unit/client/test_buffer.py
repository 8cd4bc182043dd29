"""Which processes may hold group changes until the plugin's flush (client/_buffer.py)."""

from __future__ import annotations

from typing import Any

import pytest

from taskstate.client import LocalContext
from taskstate.client._buffer import Buffer, Held, _Attempt, changes_can_wait_for_the_flush
from taskstate.client._session import OpenInfo, Session


class TaskContext:
    """Stands for pyspark.TaskContext: only its module matters here."""


TaskContext.__module__ = "pyspark.taskcontext"


@pytest.mark.parametrize(
    ("ctx", "env", "holds"),
    [
        # outside PySpark the process lives on, but only a context whose maker sends the
        # FLUSH (plays the plugin's part) may hold: nothing else would ever flush it
        (LocalContext(0, batch_id=1), {}, False),
        (LocalContext(0, batch_id=1, plugin_flush=True), {}, True),
        # a driver's SparkContext sets SPARK_BUFFER_SIZE in its own process: still not a worker
        (LocalContext(0, batch_id=1, plugin_flush=True), {"SPARK_BUFFER_SIZE": "65536"}, True),
        (TaskContext(), {"SPARK_REUSE_WORKER": "1"}, True),
        (TaskContext(), {}, False),  # spark.python.worker.reuse=false
    ],
)
def test_only_a_process_that_lives_until_the_flush_and_gets_one_holds_changes(
    monkeypatch: pytest.MonkeyPatch, ctx: object, env: dict[str, str], holds: bool
) -> None:
    for key in ("SPARK_BUFFER_SIZE", "SPARK_REUSE_WORKER"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert changes_can_wait_for_the_flush(ctx) is holds


def test_a_later_blocks_changes_win_and_one_commit_sends_them() -> None:
    info = OpenInfo(1, 0, 0, "v", False, 0, restored=False, reused_claim=False)
    session = Session("s:1", 1, 1, "v", {}, None, info, deferred=True)
    sent: list[tuple[list[tuple[str, bytes]], list[str]]] = []

    class Recorder:
        def send(
            self,
            session: Session,
            upserts: list[tuple[str, bytes]],
            deletes: list[str],
            position: bytes | None = None,
        ) -> None:
            sent.append((sorted(upserts), sorted(deletes)))

    held = Held(session, Recorder())
    held.merge([("a", b"1"), ("b", b"1")], ["c"])
    held.merge([("c", b"2")], ["a"])
    assert held.commit() == 3
    assert sent == [([("b", b"1"), ("c", b"2")], ["a"])]
    assert session.deferred is False


def test_a_forked_child_neither_flushes_nor_merges_into_its_parents_held_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The parent's held changes are the parent's to flush: in a child (another pid) the
    buffer starts empty, so a block there registers its own attempt with the sidecar."""
    info = OpenInfo(1, 0, 0, "v", False, 0, restored=False, reused_claim=False)
    session = Session("s:1", 1, 1, "v", {}, None, info, deferred=True)
    sent: list[object] = []

    class Recorder:
        def send(self, *args: object) -> None:
            sent.append(args)

    b = Buffer()
    entry = _Attempt(attachment=object())  # type: ignore[arg-type]
    entry.tasks["t"] = Held(session, Recorder())
    entry.tasks["t"].merge([("a", b"1")], [])
    b._held[7] = entry
    assert b.holds(7)
    monkeypatch.setattr("taskstate.client._buffer.os.getpid", lambda: -1)  # the child
    assert not b.holds(7)
    b.commit_task(7, "t")
    assert b.flush(7).flushed.keys == 0
    assert sent == []


def test_a_block_whose_attempt_was_flushed_meanwhile_commits_instead_of_holding() -> None:
    """A FLUSH (or DISCARD) that takes the attempt's entry between a block's two looks at
    it: the block's changes must not go into the entry nobody will flush again."""
    info = OpenInfo(1, 0, 0, "v", False, 0, restored=False, reused_claim=False)
    session = Session("s:1", 1, 1, "v", {}, None, info)
    b = Buffer()

    class Attached:
        broken = False

    entry = _Attempt(attachment=Attached())  # type: ignore[arg-type]
    b._held[7] = entry
    real = b._lock

    class FlushInBetween:
        """The buffer's lock; the flush takes the entry just before the second look."""

        looks = 0

        def __enter__(self) -> None:
            FlushInBetween.looks += 1
            if FlushInBetween.looks == 2:
                b._held.pop(7, None)
            real.__enter__()

        def __exit__(self, *exc: Any) -> None:
            real.__exit__(*exc)

    b._lock = FlushInBetween()  # type: ignore[assignment]
    committer: Any = object()
    assert b.hold(7, "t", session, [("a", b"1")], [], committer) is False
    assert entry.tasks == {} and session.deferred is False
