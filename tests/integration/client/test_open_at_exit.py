"""`TaskState(open_at="exit")`: a block that only writes Opens with its Commit, in one call.

Real redis-server, real sidecar. Each test checks the stored state exactly and which calls
the sidecar served (its metrics): the one call must do everything Open then Commit did,
the rollback of a replayed batch and the fencing of a displaced attempt included, and a
sidecar killed while the call is in flight must not make it land twice.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import grpc
import msgpack
import orjson
import pytest

from taskstate.client import FencedError, LocalContext, TaskState, _cache
from taskstate.proto import taskstate_pb2 as pb
from taskstate.proto import taskstate_pb2_grpc as pb_grpc
from taskstate.sidecar.storage.redis.keys import meta_key, task_key
from taskstate.testing import RedisServer, SidecarProcess

from ..conftest import snapshot, stored
from ..waiting import redis_blocked

pytestmark = pytest.mark.integration

CALLS = ("Open", "Commit", "OpenCommit", "Restore", "Get")  # (a task's Reads: service.label)


def ts(side: SidecarProcess, ns: str, ctx: LocalContext, open_at: str = "exit") -> TaskState:
    return TaskState(ctx, component="c", namespace=ns, sidecar=side.target, open_at=open_at)


def calls(side: SidecarProcess) -> dict[str, float]:
    m = side.metrics()
    return {c: m.get(f'taskstate_requests_total{{code="ok",method="{c}"}}', 0.0) for c in CALLS}


def moved(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in before if after[k] != before[k]}


def values(r: RedisServer, ns: str) -> dict[str, object]:
    return stored(r, ns, orjson.loads)


def test_a_block_that_only_writes_costs_one_call_and_keeps_the_copy_here(
    redis_server: RedisServer, metered_sidecar: SidecarProcess, namespace: str
) -> None:
    with ts(metered_sidecar, namespace, LocalContext(0, batch_id=0), "enter") as s:
        s["a"] = 1  # the first block of this process opens at its enter
    before = calls(metered_sidecar)
    with ts(metered_sidecar, namespace, LocalContext(0, batch_id=1)) as s:
        s["b"] = {"n": 2}
        s["b"]["n"] += 1  # a value it wrote is read without an Open
        s["c"] = "three"
    assert moved(before, calls(metered_sidecar)) == {"OpenCommit": 1}
    assert s.info.with_commit and s.info.committed_batch == 0
    assert values(redis_server, namespace) == {"a": 1, "b": {"n": 3}, "c": "three"}
    # the copy here is the committed version with the block's writes: no Restore
    before = calls(metered_sidecar)
    with ts(metered_sidecar, namespace, LocalContext(0, batch_id=2), "enter") as s:
        assert dict(s) == {"a": 1, "b": {"n": 3}, "c": "three"}
        assert not s.info.restored and not s.info.on_demand
    assert moved(before, calls(metered_sidecar)) == {"Open": 1, "Commit": 1}


def test_a_read_or_a_delete_opens_the_block_as_at_its_enter(
    redis_server: RedisServer, metered_sidecar: SidecarProcess, namespace: str
) -> None:
    with ts(metered_sidecar, namespace, LocalContext(0, batch_id=0), "enter") as s:
        s.update({"a": 1, "b": 2})
    before = calls(metered_sidecar)
    with ts(metered_sidecar, namespace, LocalContext(0, batch_id=1)) as s:
        s["c"] = 3
        assert "c" in s and s["c"] == 3  # its own write: still no Open
        assert s["a"] == 1  # opens here, on the copy this process holds (no read on demand)
        del s["b"]
    assert moved(before, calls(metered_sidecar)) == {"Open": 1, "Commit": 1}
    assert values(redis_server, namespace) == {"a": 1, "c": 3}
    before = calls(metered_sidecar)
    with ts(metered_sidecar, namespace, LocalContext(0, batch_id=2)) as s:
        pass  # nothing written: the batch is still committed (empty), in one call
    assert moved(before, calls(metered_sidecar)) == {"OpenCommit": 1}
    assert redis_server.client().hget(meta_key(namespace, "c", 0), "batch") == b"2"


def test_a_replayed_batch_is_rolled_back_by_the_one_call_before_its_writes(
    redis_server: RedisServer, metered_sidecar: SidecarProcess, namespace: str
) -> None:
    with ts(metered_sidecar, namespace, LocalContext(0, batch_id=0), "enter") as s:
        s["kept"] = 0
    with ts(metered_sidecar, namespace, LocalContext(0, batch_id=1)) as s:
        s["first attempt"] = 1  # the attempt that Spark replays (its task failed later)
    assert values(redis_server, namespace) == {"kept": 0, "first attempt": 1}
    with ts(metered_sidecar, namespace, LocalContext(0, batch_id=1)) as s:  # the retry
        s["retry"] = 1
    assert s.info.with_commit and s.info.rolled_back and s.info.rolled_back_keys == 1
    assert values(redis_server, namespace) == {"kept": 0, "retry": 1}


def test_a_displaced_attempt_is_fenced_at_its_exit_and_writes_nothing(
    redis_server: RedisServer, metered_sidecar: SidecarProcess, namespace: str
) -> None:
    zombie, retry = LocalContext(0, batch_id=3), LocalContext(0, batch_id=3)
    with ts(metered_sidecar, namespace, zombie, "enter") as s:
        s["zombie"] = 1
    with ts(metered_sidecar, namespace, retry, "enter") as s:  # displaces it, rolls back
        s["retry"] = 1
    before = snapshot(redis_server, namespace)
    with pytest.raises(FencedError, match=f"{namespace}/c/0"):
        with ts(metered_sidecar, namespace, zombie) as s:
            s["zombie"] = 2  # no Open yet: the refusal comes at the exit
    assert s.phase.value == "failed"
    assert snapshot(redis_server, namespace) == before
    assert values(redis_server, namespace) == {"retry": 1}


def test_an_exception_in_a_block_that_never_opened_sends_nothing(
    redis_server: RedisServer, metered_sidecar: SidecarProcess, namespace: str
) -> None:
    with ts(metered_sidecar, namespace, LocalContext(0, batch_id=0), "enter") as s:
        s["a"] = 1
    before, state = calls(metered_sidecar), snapshot(redis_server, namespace)
    with pytest.raises(RuntimeError), ts(metered_sidecar, namespace, LocalContext(0, 1)) as s:
        s["a"] = 2
        raise RuntimeError("the task failed")
    assert moved(before, calls(metered_sidecar)) == {}
    assert snapshot(redis_server, namespace) == state
    with ts(metered_sidecar, namespace, LocalContext(0, batch_id=1), "enter") as s:
        assert dict(s) == {"a": 1}  # the copy here was not touched by the failed block
        assert not s.info.restored and not s.info.on_demand


def test_a_change_set_over_one_message_opens_and_commits_in_pieces(
    redis_server: RedisServer,
    metered_sidecar: SidecarProcess,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TASKSTATE_MAX_MESSAGE_BYTES", str(1 << 18))
    with ts(metered_sidecar, namespace, LocalContext(0, batch_id=0), "enter") as s:
        s["a"] = 1
    big = {f"k{i}": "x" * 1000 for i in range(600)}  # about 600 KiB: over one message
    before = calls(metered_sidecar)
    with ts(metered_sidecar, namespace, LocalContext(0, batch_id=1)) as s:
        s.update(big)
    went = moved(before, calls(metered_sidecar))
    assert went["Open"] == 1 and went["Commit"] >= 4 and "OpenCommit" not in went
    assert values(redis_server, namespace) == {"a": 1, **big}


def test_a_copy_read_on_demand_goes_through_the_one_call_and_stays_true(
    redis_server: RedisServer, metered_sidecar: SidecarProcess, namespace: str
) -> None:
    state: dict[str, object] = {f"k{i}": i for i in range(100)}
    with ts(metered_sidecar, namespace, LocalContext(0, batch_id=0), "enter") as s:
        s.update(state)
    _cache.sessions.clear()  # a new worker: it reads on demand
    with ts(metered_sidecar, namespace, LocalContext(0, batch_id=1), "enter") as s:
        assert s.info.on_demand and s["k1"] == 1
    before = calls(metered_sidecar)
    with ts(metered_sidecar, namespace, LocalContext(0, batch_id=2)) as s:
        s["k1"] = "one"
        s["new"] = "n"
    assert moved(before, calls(metered_sidecar)) == {"OpenCommit": 1}
    state.update({"k1": "one", "new": "n"})
    assert values(redis_server, namespace) == state
    with ts(metered_sidecar, namespace, LocalContext(0, batch_id=3), "enter") as s:
        assert s["k1"] == "one" and s["new"] == "n" and s["k2"] == 2  # k2: read on demand
        assert dict(s) == state


def test_bad_open_at_is_refused_before_anything_is_sent(
    metered_sidecar: SidecarProcess, namespace: str
) -> None:
    with pytest.raises(Exception, match="open_at='later' is not one of 'enter', 'exit'"):
        ts(metered_sidecar, namespace, LocalContext(0, batch_id=0), "later")


def test_a_call_whose_commit_is_not_its_opens_is_refused_with_nothing_done(
    redis_server: RedisServer, metered_sidecar: SidecarProcess, namespace: str
) -> None:
    with ts(metered_sidecar, namespace, LocalContext(0, batch_id=0), "enter") as s:
        s["a"] = 1
    before = snapshot(redis_server, namespace)
    task = pb.TaskId(namespace=namespace, component="c", partition=0)
    other = pb.TaskId(namespace=namespace, component="c", partition=1)
    ups = msgpack.packb(["a", "2"])
    opening = pb.OpenRequest(task=task, batch=1, codec="json", attempt_id="x:1")
    bad = {
        "another task": pb.CommitRequest(task=other, batch=1, packed_upserts=ups),
        "another batch": pb.CommitRequest(task=task, batch=2, packed_upserts=ups),
        "no batch": pb.CommitRequest(task=task, packed_upserts=ups),
        "a bad change set": pb.CommitRequest(task=task, batch=1, packed_upserts=b"\xc1"),
    }
    with grpc.insecure_channel(metered_sidecar.target) as ch:
        stub = pb_grpc.TaskStateServiceStub(ch)
        for what, commit in bad.items():
            with pytest.raises(grpc.RpcError) as info:
                stub.OpenCommit(pb.OpenCommitRequest(open=opening, commit=commit))
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, what
            assert f"{namespace}/c/0" in (info.value.details() or ""), what
    assert snapshot(redis_server, namespace) == before


def test_a_sidecar_killed_during_the_one_call_lands_it_once(
    redis_server: RedisServer, tmp_path: Path, namespace: str
) -> None:
    """kill -9 the sidecar while OpenCommit waits on Redis; the retry through a new one."""
    sock = tmp_path / "s.sock"
    side = SidecarProcess(redis_server.url, sock).start()
    metered = ["--metrics-port", "0"]
    replacement: list[SidecarProcess] = []
    try:
        with ts(side, namespace, LocalContext(0, batch_id=0), "enter") as s:
            s.update({"a": 0, "b": 0})
        r = redis_server.client()
        ver = int(r.hget(meta_key(namespace, "c", 0), "ver") or 0)

        def fault() -> None:
            time.sleep(0.5)  # the call is in the sidecar, its script behind DEBUG SLEEP
            side.kill()
            replacement.append(SidecarProcess(redis_server.url, sock, extra=metered).start())

        sleeper = threading.Thread(target=lambda: r.execute_command("DEBUG", "SLEEP", 3))
        killer = threading.Thread(target=fault)
        sleeper.start()
        redis_blocked(redis_server.socket)
        killer.start()
        with ts(side, namespace, LocalContext(0, batch_id=1)) as s:
            s["a"] = 1
            s["c"] = 1
        killer.join()
        sleeper.join()
        assert s.info.with_commit
        assert values(redis_server, namespace) == {"a": 1, "b": 0, "c": 1}
        meta = r.hgetall(meta_key(namespace, "c", 0))
        assert meta[b"batch"] == b"1" and b"rollbacks" not in meta
        # Once, or the first script ran after all and the retry applied the same absolute
        # values again (as a retried Commit does): the same change set, no rollback
        landed = int(meta[b"ver"]) - ver
        log = r.hgetall(task_key(namespace, "c", 0, "log"))
        assert landed in (1, 2)
        assert all(
            sorted(msgpack.unpackb(log[b"%d" % v])) == ["a", "c"]
            for v in range(ver + 1, ver + landed + 1)
        )
        assert calls(replacement[0])["OpenCommit"] == 1  # the retry, through the new one
        with ts(replacement[0], namespace, LocalContext(0, batch_id=2), "enter") as s:
            assert dict(s) == {"a": 1, "b": 0, "c": 1}
    finally:
        side.kill()
        for p in replacement:
            p.kill()
