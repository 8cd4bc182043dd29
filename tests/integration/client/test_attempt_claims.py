"""One task attempt, several Python processes: one claim (real sidecar, real Redis).

Spark may serve one task attempt with two pooled Python workers (applyInPandasWithState
runs the groups with data and the timed-out groups in separate runners). Each test runs
blocks of one attempt in separate, spawned processes (`attempt_worker.Worker`) and checks
the stored state exactly.
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from taskstate.client import LocalContext
from taskstate.proto import taskstate_pb2 as pb
from taskstate.proto import taskstate_pb2_grpc as pb_grpc
from taskstate.sidecar.storage.redis.keys import data_key, meta_key
from taskstate.testing import RedisServer, SidecarProcess

from ..attempt_worker import Worker, WorkerError, worker_pool
from ..conftest import snapshot, stored

pytestmark = pytest.mark.integration


@pytest.fixture
def workers(sidecar: SidecarProcess, namespace: str) -> Iterator[list[Worker]]:
    with worker_pool(sidecar.target, namespace) as ws:
        yield ws


def meta(r: RedisServer, ns: str, *fields: str) -> list[str | None]:
    values = r.client().hmget(meta_key(ns, "c", 0), *fields)
    return [None if v is None else v.decode() for v in values]


@pytest.mark.parametrize("order", ["first-worker-first", "second-worker-first"])
def test_one_attempt_in_two_processes_keeps_every_commit(
    redis_server: RedisServer, workers: list[Worker], namespace: str, order: str
) -> None:
    holder, other, _ = workers
    holder.block(LocalContext(0, batch_id=4), {"base": 0})  # holder caches batch 4
    first, second = (holder, other) if order == "first-worker-first" else (other, holder)
    attempt = LocalContext(0, batch_id=5)  # one Spark task attempt of batch 5

    a = first.block(attempt, {"data-group": 1})
    b = second.block(attempt, {"timed-out-group": 2})

    assert not a["reused_claim"] and not a["rolled_back"]
    assert b["reused_claim"] and not b["rolled_back"] and b["epoch"] == a["epoch"]
    # the second process's restore sees what the attempt committed so far
    assert b["data"] == {"base": 0, "data-group": 1}
    assert stored(redis_server, namespace) == {
        "base": b"0",
        "data-group": b"1",
        "timed-out-group": b"2",
    }
    assert meta(redis_server, namespace, "batch", "rollbacks") == ["5", None]
    # the next batch, in either process, starts from everything batch 5 committed
    for w in (holder, other):
        nxt = w.block(LocalContext(0, batch_id=6), {})
        assert nxt["data"] == {"base": 0, "data-group": 1, "timed-out-group": 2}


def test_interleaved_blocks_of_one_attempt_neither_fenced_nor_stale(
    redis_server: RedisServer, workers: list[Worker], namespace: str
) -> None:
    p1, p2, _ = workers
    p1.block(LocalContext(0, batch_id=0), {"base": 0})  # p1 caches the state of batch 0
    attempt = LocalContext(0, batch_id=1)
    first = p1.call("enter", attempt)
    second = p2.call("enter", attempt)  # concurrently open in both processes
    assert second["reused_claim"] and second["epoch"] == first["epoch"]
    p2.call("update", {"t1": "p2"})
    p2.call("exit")  # p2 commits first ...
    p1.call("update", {"g1": "p1"})
    p1.call("exit")  # ... then p1, whose cache lacks p2's key: it must not pass as current
    p2.block(attempt, {"t2": "p2-again"})
    p1.block(attempt, {"g2": "p1-again"})  # a later group block in p1: no new Open
    assert stored(redis_server, namespace) == {
        "base": b"0",
        "t1": b'"p2"',
        "g1": b'"p1"',
        "g2": b'"p1-again"',
        "t2": b'"p2-again"',
    }
    everything = {"base": 0, "t1": "p2", "g1": "p1", "g2": "p1-again", "t2": "p2-again"}
    nxt = p1.block(LocalContext(0, batch_id=2), {})
    assert nxt["restored"] and nxt["data"] == everything


def test_a_new_attempt_of_the_batch_rolls_back_both_processes_commits(
    redis_server: RedisServer, workers: list[Worker], namespace: str
) -> None:
    p1, p2, p3 = workers
    p1.block(LocalContext(0, batch_id=7), {"k": 1, "gone-in-8": 1})
    before = snapshot(redis_server, namespace)
    failed = LocalContext(0, batch_id=8)
    p1.block(failed, {"k": 2, "new": 1})
    p2.block(failed, {"timed-out": 1})
    p2.call("enter", failed)
    p2.call("update", {"gone-in-8": None})
    p2.call("exit")
    retry = p3.block(LocalContext(0, batch_id=8), {})  # Spark's next attempt of batch 8
    assert retry["rolled_back"] and not retry["reused_claim"]
    assert retry["data"] == {"k": 1, "gone-in-8": 1}
    after = snapshot(redis_server, namespace)
    data = data_key(namespace, "c", 0).encode()
    assert after[data] == before[data]  # byte for byte


def test_a_displaced_attempt_is_fenced_in_every_process(
    redis_server: RedisServer, workers: list[Worker], namespace: str
) -> None:
    p1, p2, p3 = workers
    p1.block(LocalContext(0, batch_id=2), {"k": 1})
    zombie = LocalContext(0, batch_id=3)
    p1.call("enter", zombie)
    p1.call("update", {"k": "zombie"})
    newer = LocalContext(0, batch_id=3)
    p2.block(newer, {"k": "newer"})
    after_newer = snapshot(redis_server, namespace)
    with pytest.raises(WorkerError) as held:  # its open block commits
        p1.call("exit")
    assert held.value.kind == "FencedError"
    with pytest.raises(WorkerError) as opened:  # its second worker opens (no rollback!)
        p3.call("enter", zombie)
    assert opened.value.kind == "FencedError" and f"{namespace}/c/0" in opened.value.message
    assert snapshot(redis_server, namespace) == after_newer
    assert stored(redis_server, namespace) == {"k": b'"newer"'}


def test_an_older_attempt_that_opens_late_cannot_undo_the_newer_ones_batch(
    redis_server: RedisServer, workers: list[Worker], namespace: str
) -> None:
    """A zombie of a failed stage attempt opens after its replacement finished the batch.

    Spark launched attempt 9 of batch 4 first; a stage retry launched attempt 12, which
    committed the whole batch and was counted done. Attempt 9 opened only then. Before, it
    was a new claim: it rolled batch 4 back, committed its first group and was killed when
    the stage ended (its held groups discarded), so batch 5 built on half of batch 4.
    """
    p1, p2, p3 = workers
    p1.block(LocalContext(0, batch_id=3, app_id="app", task_attempt_id=5), {"k": 1})
    newer = LocalContext(0, batch_id=4, app_id="app", task_attempt_id=12)
    p2.block(newer, {"k": 2, "first-group": 1})
    p2.block(newer, {"later-group": 1})
    after_newer = snapshot(redis_server, namespace)
    older = LocalContext(0, batch_id=4, app_id="app", task_attempt_id=9)
    with pytest.raises(WorkerError) as opened:
        p3.call("enter", older)
    assert opened.value.kind == "FencedError" and f"{namespace}/c/0" in opened.value.message
    assert snapshot(redis_server, namespace) == after_newer
    nxt = p1.block(LocalContext(0, batch_id=5, app_id="app", task_attempt_id=20), {})
    assert nxt["data"] == {"k": 2, "first-group": 1, "later-group": 1}
    # a replay of batch 4 by a new application (a restarted driver) still rolls it back
    replay = p3.block(LocalContext(0, batch_id=5, app_id="app-after", task_attempt_id=3), {})
    assert replay["rolled_back"] and replay["data"] == {"k": 2, "first-group": 1, "later-group": 1}


def test_an_attempt_id_reused_by_a_new_application_is_a_new_attempt(
    redis_server: RedisServer, workers: list[Worker], namespace: str
) -> None:
    p1, p2, _ = workers
    p1.block(LocalContext(0, batch_id=0, app_id="app-before", task_attempt_id=3), {"k": 1})
    p1.block(LocalContext(0, batch_id=1, app_id="app-before", task_attempt_id=7), {"k": 2})
    # the driver dies before batch 1 is in the checkpoint; the new application's task
    # attempt ids start again, and its attempt 7 replays batch 1
    replay = p2.block(LocalContext(0, batch_id=1, app_id="app-after", task_attempt_id=7), {})
    assert replay["rolled_back"] and not replay["reused_claim"]
    assert replay["data"] == {"k": 1}
    assert meta(redis_server, namespace, "claim", "claim_batch") == ["app-after:7", "1"]


def test_unnamed_claims_and_bad_attempt_ids(
    redis_server: RedisServer, sidecar: SidecarProcess, workers: list[Worker], namespace: str
) -> None:
    p1, p2, _ = workers
    attempt = LocalContext(0, batch_id=0)
    first = p1.block(attempt, {"k": 1})
    assert sidecar.target.startswith("unix://")
    with grpc.insecure_channel(sidecar.target) as ch:
        stub = pb_grpc.TaskStateServiceStub(ch)
        task = pb.TaskId(namespace=namespace, component="c", partition=0)
        before = snapshot(redis_server, namespace)
        for bad in ("no-colon", "a b:1", "x:1:2", "x" * 129 + ":1", ":5"):
            with pytest.raises(grpc.RpcError) as info:
                stub.Open(pb.OpenRequest(task=task, batch=0, codec="json", attempt_id=bad))
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "attempt id" in (info.value.details() or "")
        assert snapshot(redis_server, namespace) == before
        # an older client names no attempt: a new claim, which nobody else shares
        old = stub.Open(pb.OpenRequest(task=task, batch=0, codec="json"))
        assert old.rolled_back and not old.reused_claim and old.epoch == first["epoch"] + 1
    assert meta(redis_server, namespace, "claim") == [None]
    after = snapshot(redis_server, namespace)
    with pytest.raises(WorkerError) as refused:  # the displaced attempt cannot come back
        p2.call("enter", attempt)
    assert refused.value.kind == "FencedError"
    assert snapshot(redis_server, namespace) == after
