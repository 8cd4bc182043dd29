"""Delta restore: a worker that holds version v of a task gets only what changed since v.

Real redis-server, real sidecar, real worker processes (`attempt_worker.Worker`: each its
own claim cache, as PySpark's pooled workers). A task moves between workers as PySpark
hands it to whichever is idle; each test checks that the moved-to worker's state equals
the stored state exactly, and whether it came as a delta (and of how many keys) or whole.
"""

from __future__ import annotations

import grpc
import pytest

from taskstate.client import LocalContext
from taskstate.proto import chunks
from taskstate.proto import taskstate_pb2 as pb
from taskstate.proto import taskstate_pb2_grpc as pb_grpc
from taskstate.proto.versions import Version, token
from taskstate.sidecar.storage.redis.keys import meta_key, task_key
from taskstate.sidecar.storage.values import LOG_MIN
from taskstate.testing import RedisServer, SidecarProcess

from ..attempt_worker import Worker
from ..conftest import stored

pytestmark = pytest.mark.integration


def restores(side: SidecarProcess) -> dict[str, float]:
    m = side.metrics()
    return {
        kind: m.get(f'taskstate_restores_total{{kind="{kind}"}}', 0.0) for kind in ("delta", "full")
    }


def test_alternating_workers_get_only_what_changed(
    redis_server: RedisServer,
    metered_sidecar: SidecarProcess,
    workers: list[Worker],
    namespace: str,
) -> None:
    w1, w2, _ = workers
    w1.block(LocalContext(0, batch_id=0), {f"k{i}": i for i in range(1000)})
    first = w2.block(LocalContext(0, batch_id=1), {"k1": -1, "new": 7}, deletes=("k2", "k3"))
    assert first["restored"] and not first["delta"] and first["restored_keys"] == 1000
    before = restores(metered_sidecar)

    # w1 holds batch 0's version: it gets the 4 keys batch 1 changed, nothing else
    again = w1.block(LocalContext(0, batch_id=2), {"k4": -4}, deletes=("new",))
    assert again["delta"] and again["restored_keys"] == 4
    expected = {f"k{i}": i for i in range(1000) if i not in (2, 3)} | {"k1": -1, "new": 7}
    assert again["data"] == expected
    # and w2 gets batch 2's two keys
    back = w2.block(LocalContext(0, batch_id=3), {})
    assert back["delta"] and back["restored_keys"] == 2
    expected = {k: v for k, v in expected.items() if k != "new"} | {"k4": -4}
    assert back["data"] == expected == stored(redis_server, namespace, int)
    after = restores(metered_sidecar)
    assert after["delta"] - before["delta"] == 2 and after["full"] == before["full"]


@pytest.mark.parametrize("mode", ["fields", "copy"])
def test_delta_after_a_replayed_batch_is_rolled_back(
    redis_server: RedisServer, workers: list[Worker], namespace: str, mode: str
) -> None:
    w1, w2, w3 = workers
    base = {f"k{i}": i for i in range(100)}
    w1.block(LocalContext(0, batch_id=0), base)  # w1 holds batch 0
    # batch 1's first attempt: few keys -> a fields-mode record, many -> a whole copy
    touched = {"k1": 100, "fresh": 1} if mode == "fields" else {f"k{i}": -i for i in range(60)}
    w2.block(LocalContext(0, batch_id=1), touched, deletes=("k99",))
    meta = redis_server.client().hget(meta_key(namespace, "c", 0), "undo_mode")
    assert meta == mode.encode()
    # the attempt died; Spark's retry replays batch 1 in w3: rolled back, then written again
    retry = w3.block(LocalContext(0, batch_id=1), {"k5": 55})
    assert retry["rolled_back"] and retry["data"] == base

    nxt = w1.block(LocalContext(0, batch_id=2), {})
    assert nxt["data"] == {**base, "k5": 55} == stored(redis_server, namespace, int)
    if mode == "fields":
        # the rollback's keys are in the log: k1, fresh, k99 undone, k5 written
        assert nxt["delta"] and nxt["restored_keys"] == 4
    else:
        # a whole-copy rollback starts the log afresh: older versions restore in full
        assert not nxt["delta"] and nxt["restored_keys"] == 100


def _channel(metered_sidecar: SidecarProcess) -> pb_grpc.TaskStateServiceStub:
    return pb_grpc.TaskStateServiceStub(grpc.insecure_channel(metered_sidecar.target))


def test_an_import_or_a_drop_is_never_taken_for_a_delta(
    redis_server: RedisServer,
    metered_sidecar: SidecarProcess,
    workers: list[Worker],
    namespace: str,
) -> None:
    w1, w2, _ = workers
    w1.block(LocalContext(0, batch_id=0), {"a": 1, "b": 2})
    stub = _channel(metered_sidecar)
    task = pb.TaskId(namespace=namespace, component="c", partition=0)
    stub.Import(
        pb.ImportRequest(
            task=task,
            entries=[pb.Entry(key="z", value=b"26")],
            committed_batch=0,
            codec="json",
            replace=True,
        )
    )
    imported = w1.block(LocalContext(0, batch_id=1), {})
    assert not imported["delta"] and imported["data"] == {"z": 26}

    w2.block(LocalContext(0, batch_id=2), {"y": 25})  # w1 now holds batch 1's version
    stub.Drop(pb.DropRequest(namespace=namespace))
    dropped = w1.block(LocalContext(0, batch_id=0), {"x": 24})
    assert dropped["data"] == {} and not dropped["delta"]
    assert stored(redis_server, namespace, int) == {"x": 24}


def test_a_log_trimmed_past_the_held_version_falls_back_to_a_full_restore(
    redis_server: RedisServer, workers: list[Worker], namespace: str
) -> None:
    w1, w2, _ = workers
    w1.block(LocalContext(0, batch_id=0), {"old": 0})
    # more distinct keys than the log keeps (LOG_MIN for a state this size)
    many = {f"n{i}": i for i in range(LOG_MIN + 500)}
    w2.block(LocalContext(0, batch_id=1), many)
    r = redis_server.client()
    floor, kept = r.hmget(meta_key(namespace, "c", 0), "log_floor", "log_n")
    # batch 1's commit alone is over the bound: versions up to it are no longer covered
    assert (int(floor), int(kept)) == (2, 0)
    assert r.hlen(task_key(namespace, "c", 0, "log")) == 0

    nxt = w1.block(LocalContext(0, batch_id=2), {"last": 1})
    assert not nxt["delta"] and nxt["restored_keys"] == len(many) + 1
    assert nxt["data"] == {"old": 0, **many}
    # from here on the log covers w2's version again
    back = w2.block(LocalContext(0, batch_id=3), {})
    assert back["delta"] and back["restored_keys"] == 1
    assert back["data"] == stored(redis_server, namespace, int)


def test_a_delta_restore_is_fenced_like_a_full_one(
    metered_sidecar: SidecarProcess, workers: list[Worker], namespace: str
) -> None:
    w1, w2, _ = workers
    w1.block(LocalContext(0, batch_id=0), {"a": 1})
    w2.block(LocalContext(0, batch_id=1), {"a": 2})  # a newer claim: epoch 2
    stub = _channel(metered_sidecar)
    task = pb.TaskId(namespace=namespace, component="c", partition=0)
    meta = stub.Describe(pb.DescribeRequest(task=task))
    held = Version.parse(meta.version)
    assert held is not None
    since = token(held.gen, 1)
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Read(pb.ReadRequest(task=task, epoch=1, since_version=since)))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "fenced" in (err.value.details() or "").lower()
    # the current epoch gets the delta: a's new value
    got = list(stub.Read(pb.ReadRequest(task=task, epoch=meta.epoch, since_version=since)))
    assert all(c.delta for c in got)
    assert [chunks.unpack(c.packed, text=False) for c in got if c.packed] == [[b"a", b"2"]]
    assert got[-1].last and got[-1].version == meta.version
