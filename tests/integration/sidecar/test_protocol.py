"""The commit protocol against a real redis-server and the real sidecar process."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any, cast

import grpc
import msgpack
import pytest

from taskstate.client import (
    CodecError,
    ConfigError,
    FencedError,
    LimitError,
    LocalContext,
    StateAheadError,
    StorageUnavailableError,
    TaskState,
    _cache,
)
from taskstate.proto import taskstate_pb2 as pb
from taskstate.proto import taskstate_pb2_grpc as pb_grpc
from taskstate.sidecar.storage.redis.keys import data_key, meta_key, namespace_key
from taskstate.testing import RedisServer, SidecarProcess

from ..conftest import committed_snapshot, snapshot, strip_claim
from ..lost_answer import check_a_lost_answer_counts_once
from ..proxy import LossyProxy
from ..waiting import eventually, redis_blocked

pytestmark = pytest.mark.integration


def ts(sidecar: SidecarProcess, ns: str, batch: int | None, part: int = 0, **kw: Any) -> TaskState:
    return TaskState(
        LocalContext(part, batch_id=batch),
        component="c",
        namespace=ns,
        sidecar=sidecar.target,
        **kw,
    )


def data_of(r: RedisServer, ns: str, part: int = 0) -> dict[bytes, bytes]:
    return r.client().hgetall(data_key(ns, "c", part))  # type: ignore[no-any-return]


def test_round_trip_100k_keys_survives_sidecar_sigkill(
    redis_server: RedisServer, tmp_path: Path, namespace: str
) -> None:
    side = SidecarProcess(redis_server.url, tmp_path / "s.sock").start()
    expected = {f"key-{i:06d}": {"i": i, "tag": f"#t{i % 97}", "w": i / 7} for i in range(100_000)}
    try:
        with ts(side, namespace, 0) as s:
            s.update(expected)
        assert side.kill(signal.SIGKILL) == -signal.SIGKILL
        side.start()  # a new sidecar on the same socket
        _cache.sessions.clear()  # and a new worker process
        with ts(side, namespace, 1) as s:
            assert s.info.on_demand and s.info.size == 100_000
            assert s["key-099999"] == expected["key-099999"]  # one key, read on demand
            assert dict(s) == expected and s.info.restored  # then everything
        stored = data_of(redis_server, namespace)
        assert len(stored) == 100_000
        assert stored[b"key-000042"] == b'{"i":42,"tag":"#t42","w":6.0}'
    finally:
        side.kill()


def test_replay_restores_the_previous_batch_byte_for_byte(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str
) -> None:
    with ts(sidecar, namespace, 5) as s:
        s.update({f"k{i}": {"v": i} for i in range(50)})
    with ts(sidecar, namespace, 6) as s:
        s.update({"k1": {"v": 100}, "only6": [6]})
        s.commit(position={"offset": 600})
    c = redis_server.client()
    meta = meta_key(namespace, "c", 0)
    after6 = data_of(redis_server, namespace)
    after6_meta = c.hmget(meta, "batch", "pos")
    with ts(sidecar, namespace, 7) as s:
        s["k1"]["v"] = 7  # changed in place
        s["k2"] = "replaced"  # changed
        s["new7"] = {"x": 1}  # added
        del s["k3"]  # deleted
        del s["only6"]
        s.commit(position={"offset": 700})
    assert data_of(redis_server, namespace) != after6
    _cache.sessions.clear()
    with ts(sidecar, namespace, 7) as s:  # Spark replays batch 7
        assert s.info.rolled_back and s.info.committed_batch == 6
        assert data_of(redis_server, namespace) == after6  # byte for byte
        assert c.hmget(meta, "batch", "pos") == after6_meta
        assert s.position == {"offset": 600}
        # a different replay of batch 7 commits cleanly
        s["k4"] = "second run"
        s.commit(position={"offset": 701})
    expected = dict(after6)
    expected[b"k4"] = b'"second run"'
    assert data_of(redis_server, namespace) == expected
    with ts(sidecar, namespace, 8) as s:
        assert s.position == {"offset": 701} and s.info.committed_batch == 7


def test_fencing_zombie_attempt_cannot_write(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str
) -> None:
    with ts(sidecar, namespace, 1) as s:
        s["base"] = 0
    a = ts(sidecar, namespace, 2)
    a.__enter__()
    a["a-only"] = "A"
    a["base"] = "A"
    sess_a = _cache.sessions.pop(a.task_id)  # B runs in another process
    with ts(sidecar, namespace, 2) as b:
        b["base"] = "B"
    _cache.sessions[a.task_id] = sess_a
    before = data_of(redis_server, namespace)
    with pytest.raises(FencedError) as info:
        a.__exit__(None, None, None)
    assert f"{namespace}/c/0" in str(info.value)
    assert data_of(redis_server, namespace) == before == {b"base": b'"B"'}


def test_a_claim_redis_lost_is_not_taken_for_a_newer_attempt(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str
) -> None:
    """Redis' epoch below the attempt's: its Open was lost (a failover), nobody fenced it.

    The commit is refused as retryable (a new attempt opens again), nothing written.
    """
    with ts(sidecar, namespace, 1) as s:
        s["base"] = 0
    a = ts(sidecar, namespace, 2)
    a.__enter__()
    a["base"] = 2
    # the Open's epoch bump never reached the replica that became the master
    redis_server.client().hincrby(meta_key(namespace, "c", 0), "epoch", -1)
    before = data_of(redis_server, namespace)
    with pytest.raises(StorageUnavailableError, match="lost the attempt's claim") as info:
        a.__exit__(None, None, None)
    assert f"{namespace}/c/0" in str(info.value) and "newer attempt" not in str(info.value)
    assert data_of(redis_server, namespace) == before


def test_state_ahead_names_task_batches_and_action_and_changes_nothing(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str
) -> None:
    with ts(sidecar, namespace, 9) as s:
        s["a"] = 1
    before = snapshot(redis_server, namespace)
    with pytest.raises(StateAheadError) as info:
        ts(sidecar, namespace, 5).__enter__()
    msg = str(info.value)
    assert f"{namespace}/c/0" in msg and "batch 9" in msg and "batch 5" in msg
    assert "Operator action" in msg and info.value.task == f"{namespace}/c/0"
    assert snapshot(redis_server, namespace) == before


def test_ambiguous_commit_response_lost_then_retried_equals_one_commit(
    redis_server: RedisServer, tmp_path: Path, namespace: str
) -> None:
    proxy = LossyProxy(str(redis_server.socket))
    side = SidecarProcess(proxy.url, tmp_path / "s.sock").start()
    try:
        # the commit's EVALSHA reaches Redis; its reply is lost
        check_a_lost_answer_counts_once(redis_server, namespace, side.target, proxy.arm)
        assert proxy.replies_lost == 1
    finally:
        side.kill()
        proxy.close()


def test_exception_inside_with_commits_nothing(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str
) -> None:
    with ts(sidecar, namespace, 1) as s:
        s["n"] = {"count": 1}
    before = snapshot(redis_server, namespace)
    with pytest.raises(ZeroDivisionError), ts(sidecar, namespace, 2) as s:
        s["n"]["count"] += 1
        s["m"] = 1
        _ = 1 / 0
    after = snapshot(redis_server, namespace)
    meta = meta_key(namespace, "c", 0).encode()
    assert committed_snapshot(redis_server, namespace) == strip_claim(before)
    after_meta, before_meta = (
        cast(dict[bytes, bytes], after[meta]),
        cast(dict[bytes, bytes], before[meta]),
    )
    assert int(after_meta[b"epoch"]) == int(before_meta[b"epoch"]) + 1
    with ts(sidecar, namespace, 2) as s:
        assert dict(s) == {"n": {"count": 1}}


@pytest.mark.parametrize("component", ["a}b", "x/y", "c" * 200, "{ns/c/0}"])
def test_bad_component_is_refused_and_redis_untouched(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str, component: str
) -> None:
    keys_before = sorted(redis_server.client().keys("*"))
    with pytest.raises(ConfigError) as info:
        TaskState(
            LocalContext(0, batch_id=0),
            component=component,
            namespace=namespace,
            sidecar=sidecar.target,
        )
    assert "component" in str(info.value)
    assert sorted(redis_server.client().keys("*")) == keys_before


@pytest.mark.parametrize(
    "task",
    [
        pb.TaskId(namespace="ns", component="a}b", partition=0),
        pb.TaskId(namespace="ns/x", component="c", partition=0),
        pb.TaskId(namespace="ns", component="c" * 200, partition=0),
        pb.TaskId(namespace="", component="c", partition=0),
        pb.TaskId(namespace="ns", component="c", partition=-1),
    ],
)
def test_sidecar_itself_refuses_bad_task_ids(
    redis_server: RedisServer, sidecar: SidecarProcess, task: pb.TaskId
) -> None:
    keys_before = sorted(redis_server.client().keys("*"))
    with grpc.insecure_channel(f"unix:{sidecar.socket}") as ch:
        stub = pb_grpc.TaskStateServiceStub(ch)
        for call, req in (
            (stub.Open, pb.OpenRequest(task=task, batch=1)),
            (
                stub.Commit,
                pb.CommitRequest(
                    task=task, epoch=1, batch=1, packed_upserts=msgpack.packb(["k", "1"])
                ),
            ),
        ):
            with pytest.raises(grpc.RpcError) as info:
                call(req, timeout=10)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "invalid task id" in (info.value.details() or "")
    assert sorted(redis_server.client().keys("*")) == keys_before


def test_non_json_value_is_refused_before_sending(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str
) -> None:
    with ts(sidecar, namespace, 0) as s:
        s["ok"] = 1
    before = snapshot(redis_server, namespace)
    with ts(sidecar, namespace, 1) as s:
        with pytest.raises(CodecError) as info:
            s["when"] = {"t": time}  # a module is not JSON
        assert "'when'" in str(info.value) and "module" in str(info.value)
    after = snapshot(redis_server, namespace)
    assert (
        after[data_key(namespace, "c", 0).encode()] == before[data_key(namespace, "c", 0).encode()]
    )


def test_message_over_the_sidecar_limit_is_a_clear_error_and_redis_untouched(
    redis_server: RedisServer, tmp_path: Path, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    side = SidecarProcess(
        redis_server.url, tmp_path / "s.sock", extra=["--max-message-bytes", str(1 << 20)]
    ).start()
    try:
        with ts(side, namespace, None) as s:
            s["small"] = 1
        before = committed_snapshot(redis_server, namespace)
        # the client allows more than this sidecar: the sidecar refuses the message
        with pytest.raises(LimitError) as info, ts(side, namespace, None) as s:
            s["big"] = "x" * (3 << 20)
        assert "max-message-bytes" in str(info.value)
        assert committed_snapshot(redis_server, namespace) == before
        # the client's own limit refuses before sending
        monkeypatch.setenv("TASKSTATE_MAX_MESSAGE_BYTES", str(1 << 20))
        with (
            pytest.raises(LimitError, match="'big'.*TASKSTATE_MAX_MESSAGE_BYTES"),
            ts(side, namespace, None) as s,
        ):
            s["big"] = "x" * (3 << 20)
        assert committed_snapshot(redis_server, namespace) == before
    finally:
        side.kill()


def test_sigterm_drains_an_in_flight_commit_and_exits_zero(
    redis_server: RedisServer, tmp_path: Path, namespace: str
) -> None:
    side = SidecarProcess(redis_server.url, tmp_path / "s.sock", extra=["--metrics-port", "0"])
    side.start()
    slept: list[object] = []
    blocker = threading.Thread(
        target=lambda: slept.append(redis_server.client().execute_command("DEBUG", "SLEEP", "3"))
    )
    errors: list[BaseException] = []
    with ts(side, namespace, 0, part=1) as s:  # warm up: scripts loaded, channel made
        s["warm"] = 1
    st = ts(side, namespace, 0)
    st.__enter__()
    st["drained"] = True

    def commit() -> None:
        try:
            st.__exit__(None, None, None)
        except BaseException as exc:
            errors.append(exc)

    blocker.start()
    redis_blocked(redis_server.socket)  # Redis is now busy for at most 3 s
    worker = threading.Thread(target=commit)
    worker.start()
    eventually(  # the commit is in flight inside the sidecar, waiting for Redis
        lambda: side.metrics().get('taskstate_requests_in_flight{method="Commit"}') == 1,
        "the commit never reached the sidecar",
        2,
        0.01,
    )
    assert side.proc is not None
    side.proc.send_signal(signal.SIGTERM)
    code = side.proc.wait(timeout=30)
    worker.join(timeout=30)
    blocker.join(timeout=30)
    assert slept == [b"OK"]  # Redis really was busy while SIGTERM arrived
    assert code == 0
    assert errors == []
    assert data_of(redis_server, namespace) == {b"drained": b"true"}
    log = side.log_path.read_text()
    assert "draining" in log and "sidecar stopped" in log
    side.kill()


def test_health_reflection_and_ready_line(sidecar: SidecarProcess) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    assert sidecar.ready_line.startswith("taskstate sidecar ready: listening on unix://")
    with grpc.insecure_channel(f"unix:{sidecar.socket}") as ch:
        h = health_pb2_grpc.HealthStub(ch).Check(
            health_pb2.HealthCheckRequest(service="taskstate.v1.TaskStateService"), timeout=5
        )
        assert h.status == health_pb2.HealthCheckResponse.SERVING
        refl = reflection_pb2_grpc.ServerReflectionStub(ch)
        replies = list(
            refl.ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
            )
        )
        names = {s.name for s in replies[0].list_services_response.service}
        assert "taskstate.v1.TaskStateService" in names and "grpc.health.v1.Health" in names


def test_describe_list_drop(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str
) -> None:
    for p in range(3):
        with ts(sidecar, namespace, 4, part=p) as s:
            s["p"] = p
    with grpc.insecure_channel(f"unix:{sidecar.socket}") as ch:
        stub = pb_grpc.TaskStateServiceStub(ch)
        info = stub.Describe(
            pb.DescribeRequest(task=pb.TaskId(namespace=namespace, component="c", partition=1))
        )
        assert info.exists and info.committed_batch == 4 and info.size == 1
        listed = stub.List(pb.ListRequest(namespace=namespace))
        assert [t.task.partition for t in listed.tasks] == [0, 1, 2]
        dropped = stub.Drop(pb.DropRequest(namespace=namespace, component="c", partition=1))
        assert dropped.tasks_dropped == 1
        assert [t.task.partition for t in stub.List(pb.ListRequest(namespace=namespace)).tasks] == [
            0,
            2,
        ]
        assert stub.Drop(pb.DropRequest(namespace=namespace)).tasks_dropped == 2
    # only the namespace's record is left: a drop keeps the namespace known
    assert list(snapshot(redis_server, namespace)) == [namespace_key(namespace).encode()]


def test_python_m_entry_point_and_bad_listen_address(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    import subprocess
    import sys

    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "taskstate.sidecar",
            "--redis-url",
            redis_server.url,
            "--listen",
            "unix://relative.sock",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 2 and "absolute path" in r.stderr


def test_replaying_a_batch_whose_rollback_record_was_used_is_refused(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str
) -> None:
    """Batch 1 rolled back once; Spark then asks for batch 0 again (an older checkpoint)."""
    with ts(sidecar, namespace, 0) as s:
        s["a"] = 0
    with ts(sidecar, namespace, 1) as s:
        s["a"] = 1
    _cache.sessions.clear()
    replay = ts(sidecar, namespace, 1)
    assert replay.__enter__().info.rolled_back  # this replay dies before it commits
    _cache.sessions.clear()
    before = committed_snapshot(redis_server, namespace)
    with pytest.raises(StateAheadError) as info:
        ts(sidecar, namespace, 0).__enter__()
    assert "checkpoint is older than the state" in str(info.value)
    assert committed_snapshot(redis_server, namespace) == before


def test_sidecar_killed_mid_task_and_restarted_commit_lands_once(
    redis_server: RedisServer, tmp_path: Path, namespace: str
) -> None:
    side = SidecarProcess(redis_server.url, tmp_path / "s.sock").start()
    try:
        with ts(side, namespace, 1) as s:
            s["n"] = 1
        st = ts(side, namespace, 2)
        st.__enter__()
        st["n"] = st["n"] + 1
        side.kill(signal.SIGKILL)  # the sidecar dies while the task is running
        restarter = threading.Timer(1.5, side.start)
        restarter.start()
        st.__exit__(None, None, None)  # waits for the new sidecar, then commits
        restarter.join()
        assert data_of(redis_server, namespace) == {b"n": b"2"}
        assert int(redis_server.client().hget(meta_key(namespace, "c", 0), "batch")) == 2
    finally:
        side.kill()


def test_a_request_with_a_field_of_another_version_is_refused(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str
) -> None:
    """A commit in a form the sidecar does not read is refused, never applied as empty."""
    with ts(sidecar, namespace, 1) as s:
        s["k"] = 1
    task = pb.TaskId(namespace=namespace, component="c", partition=0)
    before = data_of(redis_server, namespace)
    # field 4: a per-entry upsert, gone from the wire before its first release
    raw = pb.CommitRequest(task=task, epoch=1, batch=2).SerializeToString()
    raw += b"\x22\x06\x0a\x01k\x12\x012"
    with grpc.insecure_channel(f"unix:{sidecar.socket}") as ch:
        commit = ch.unary_unary(
            "/taskstate.v1.TaskStateService/Commit", request_serializer=None,
            response_deserializer=pb.CommitResponse.FromString,
        )  # fmt: skip
        with pytest.raises(grpc.RpcError) as info:
            commit(raw, timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "field(s) 4 not in the wire's version 1" in (info.value.details() or "")
    assert data_of(redis_server, namespace) == before


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"epoch": 1, "pattern": "k*"}, "with an epoch takes no pattern"),
        ({"epoch": 1, "changes_since_batch": 0}, "with an epoch takes no pattern and no batch"),
        ({"since_version": "g:1"}, "since a version needs an epoch"),
        ({"delta_only": True}, "since a version needs an epoch"),
        ({"changes_since_batch": -2}, "out of range"),
        ({"packed_keys": b"\x91\xa1k", "changes_since_batch": 0}, "reads no changes"),
        ({"epoch": 1, "packed_keys": b"\x91\xa1k", "since_version": "g:1"}, "reads no changes"),
        ({"epoch": 1, "packed_keys": b"\x91\xa1k", "delta_only": True}, "reads no changes"),
    ],
)
def test_a_read_that_mixes_a_claims_read_with_a_claim_free_one_is_refused(
    sidecar: SidecarProcess, namespace: str, fields: dict[str, Any], says: str
) -> None:
    with ts(sidecar, namespace, 0) as s:
        s["k"] = 1
    task = pb.TaskId(namespace=namespace, component="c", partition=0)
    with grpc.insecure_channel(f"unix:{sidecar.socket}") as ch:
        stub = pb_grpc.TaskStateServiceStub(ch)
        with pytest.raises(grpc.RpcError) as info:
            list(stub.Read(pb.ReadRequest(task=task, **fields), timeout=10))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert says in (info.value.details() or "")
