"""A task attempt's identity: the same in every process serving it, new in a new application."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from taskstate.client import LocalContext, TaskState, _cache
from taskstate.client._context import identity
from taskstate.proto import ids
from taskstate.testing import FakeSidecar


class SparkLikeContext:
    """What pyspark's TaskContext offers a Python worker (local properties, ids)."""

    def __init__(self, props: dict[str, str], task_attempt_id: int = 41) -> None:
        self.props = props
        self.tid = task_attempt_id

    def partitionId(self) -> int:  # noqa: N802
        return 0

    def attemptNumber(self) -> int:  # noqa: N802
        return 0

    def taskAttemptId(self) -> int:  # noqa: N802
        return self.tid

    def getLocalProperty(self, key: str) -> str | None:  # noqa: N802
        return self.props.get(key)


@pytest.fixture
def no_local_dirs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_LOCAL_DIRS", raising=False)


def attempt_of(props: dict[str, str], tid: int = 41) -> str:
    return identity(SparkLikeContext(props, tid)).attempt_id


@pytest.mark.usefixtures("no_local_dirs")
def test_scope_is_found_in_spark_order() -> None:
    streaming = {"sql.streaming.queryId": "q-1", "spark.jobGroup.id": "run-2"}
    assert attempt_of({"spark.app.id": "local-1795436555573", **streaming}) == (
        "local-1795436555573:41"
    )
    assert attempt_of({"taskstate.app": "app-20261123-0001", **streaming}) == (
        "app-20261123-0001:41"
    )
    assert attempt_of(streaming) == "run-2:41"
    # a job group outside a streaming query is the user's, not a run id
    assert attempt_of({"spark.jobGroup.id": "mine"}).startswith("process-")


def test_executor_local_dirs_are_the_last_spark_scope(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK_LOCAL_DIRS", "/tmp/blockmgr-09661d30")
    first = attempt_of({})
    assert first.startswith("dirs-") and first == attempt_of({})
    monkeypatch.setenv("SPARK_LOCAL_DIRS", "/tmp/blockmgr-ffff")  # another application
    assert attempt_of({}) != first


@pytest.mark.usefixtures("no_local_dirs")
def test_every_scope_is_a_valid_wire_attempt_id() -> None:
    odd = "yarn application/with spaces:and:colons" + "x" * 200
    for props in ({"spark.app.id": odd}, {}, {"spark.app.id": "spark-8a7b"}):
        attempt = attempt_of(props, tid=2**40)
        assert ids.attempt_problem(attempt) is None, attempt
    assert attempt_of({"spark.app.id": odd}).startswith("h-")


def test_attempt_problem_grammar() -> None:
    assert ids.attempt_problem("") is None  # an older client
    assert ids.attempt_problem("local-1:-3") is None
    for bad in ("x", "x:", ":1", "a b:1", "x:1:2", "x" * 129 + ":1", "x:" + "9" * 21):
        assert ids.attempt_problem(bad), bad


def test_a_local_context_is_one_attempt_wherever_it_is_pickled() -> None:
    ctx = LocalContext(3, batch_id=5)
    copy: Any = pickle.loads(pickle.dumps(ctx))
    assert identity(copy).attempt_id == identity(ctx).attempt_id
    assert identity(LocalContext(3, batch_id=5)).attempt_id != identity(ctx).attempt_id
    same = LocalContext(3, batch_id=5, app_id="app-a", task_attempt_id=7)
    assert identity(same).attempt_id == "app-a:7"
    assert identity(LocalContext(3, app_id="app-b", task_attempt_id=7)).attempt_id == "app-b:7"


def test_a_second_process_of_the_attempt_shares_the_claim(
    fake: FakeSidecar, namespace: str
) -> None:
    """The memory backend, through the client: another process = an empty claim cache."""
    attempt = LocalContext(0, batch_id=2)

    def block(ctx: LocalContext, changes: dict[str, int]) -> Any:
        with TaskState(ctx, component="c", namespace=namespace, sidecar=fake.target) as s:
            s.update(changes)
            return s.info

    block(LocalContext(0, batch_id=1), {"base": 1})
    first = block(attempt, {"g": 1})
    _cache.sessions.clear()  # the attempt's timed-out groups, in another worker
    second = block(attempt, {"t": 1})
    assert second.reused_claim and not second.rolled_back and second.epoch == first.epoch
    _cache.sessions.clear()
    replay = block(LocalContext(0, batch_id=2), {})  # Spark's next attempt of batch 2
    assert replay.rolled_back and replay.rolled_back_keys == 2
