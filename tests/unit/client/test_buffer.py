"""Which processes may hold group changes until the plugin's flush (client/_buffer.py)."""

from __future__ import annotations

from typing import Any

import pytest

from taskstate.client import LocalContext
from taskstate.client._buffer import Buffer, Held, _Attempt, changes_can_wait_for_the_flush
from taskstate.client._session import OpenInfo, Session
from taskstate.proto import taskstate_pb2 as pb


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

        def requests(
            self, session: Session, upserts: list[tuple[str, bytes]], deletes: list[str]
        ) -> list[pb.CommitRequest]:
            return []

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

        def requests(
            self, session: Session, upserts: list[tuple[str, bytes]], deletes: list[str]
        ) -> list[pb.CommitRequest]:
            return []

    b = Buffer()
    entry = _Attempt(attachment=object())  # type: ignore[arg-type]
    entry.tasks["t"] = Held(session, Recorder())
    entry.tasks["t"].merge([("a", b"1")], [])
    b._held[7] = entry
    assert b.holds(7)
    monkeypatch.setattr("taskstate.client._buffer.os.getpid", lambda: -1)  # the child
    assert not b.holds(7)
    b.commit_task(7, "t")
    assert b.flush(7)[-1].flushed.keys == 0
    assert sent == []


@pytest.mark.parametrize("held_before", [True, False], ids=["entry", "first-block"])
@pytest.mark.parametrize("flush_at", [1, 2, 3, 4])
def test_a_flush_that_lands_while_a_block_holds_never_strands_its_changes(
    held_before: bool, flush_at: int
) -> None:
    """A FLUSH (or DISCARD) takes the attempt's entry at the block's `flush_at`-th taking
    of the buffer's lock: the block's changes are either in an entry a flush will still
    find, or not held at all (the block then commits them itself). Never in an entry
    nobody will flush again (a block that looked at the entry, let go of the lock and
    merged into it under the lock again without a second look would strand them)."""
    info = OpenInfo(1, 0, 0, "v", False, 0, restored=False, reused_claim=False)
    session = Session("s:1", 1, 1, "v", {}, None, info)
    b = Buffer()

    class Attached:
        broken = False

        def register(self, attempt: int, timeout_s: float) -> bool:
            return True

    if held_before:
        b._held[7] = _Attempt(attachment=Attached())  # type: ignore[arg-type]
    b._attachment = lambda transport: Attached()  # type: ignore[method-assign,assignment,return-value]
    real = b._lock
    stranded: list[_Attempt] = []

    class FlushAt:
        """The buffer's lock; the flush takes the entry just before the flush_at-th look."""

        looks = 0

        def __enter__(self) -> None:
            FlushAt.looks += 1
            if FlushAt.looks == flush_at and 7 in b._held:
                stranded.append(b._held.pop(7))
            real.__enter__()

        def __exit__(self, *exc: Any) -> None:
            real.__exit__(*exc)

    class Transport:
        timeout_s = 1.0

    class Committer:
        transport = Transport()

    b._lock = FlushAt()  # type: ignore[assignment]
    held = b.hold(7, "t", session, [("a", b"1")], [], Committer())  # type: ignore[arg-type]
    assert all(e.tasks == {} for e in stranded), "changes went into an entry already flushed"
    if held:
        assert b._held[7].tasks["t"].upserts == {"a": b"1"} and session.deferred is True
    else:
        assert 7 not in b._held and session.deferred is False
