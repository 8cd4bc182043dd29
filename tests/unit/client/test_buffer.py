"""Which processes may hold group changes until the plugin's flush (client/_buffer.py)."""

from __future__ import annotations

import pytest

from taskstate.client import LocalContext
from taskstate.client._buffer import Held, worker_outlives_its_runner
from taskstate.client._session import OpenInfo, Session


class TaskContext:
    """Stands for pyspark.TaskContext: only its module matters here."""


TaskContext.__module__ = "pyspark.taskcontext"


@pytest.mark.parametrize(
    ("ctx", "env", "holds"),
    [
        (LocalContext(0, batch_id=1), {}, True),  # outside PySpark: the process lives on
        # a driver's SparkContext sets SPARK_BUFFER_SIZE in its own process: still not a worker
        (LocalContext(0, batch_id=1), {"SPARK_BUFFER_SIZE": "65536"}, True),
        (TaskContext(), {"SPARK_REUSE_WORKER": "1"}, True),
        (TaskContext(), {}, False),  # spark.python.worker.reuse=false
    ],
)
def test_only_a_process_that_outlives_its_runner_holds_changes(
    monkeypatch: pytest.MonkeyPatch, ctx: object, env: dict[str, str], holds: bool
) -> None:
    for key in ("SPARK_BUFFER_SIZE", "SPARK_REUSE_WORKER"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert worker_outlives_its_runner(ctx) is holds


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
