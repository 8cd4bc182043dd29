"""TaskState against the in-process fake sidecar (real gRPC service, real Redis store)."""

from __future__ import annotations

import os
import pickle
import re
import threading
import time
from typing import Any

import grpc
import pytest

from taskstate.client import (
    CodecError,
    ConfigError,
    FencedError,
    LimitError,
    LocalContext,
    Phase,
    SidecarUnavailableError,
    StateAheadError,
    StateLostError,
    TaskState,
    _wires,
)
from taskstate.client._security import SidecarSecurity
from taskstate.client.admin import AdminClient
from taskstate.proto import codes
from taskstate.sidecar.errors import SidecarError
from taskstate.sidecar.storage.redis.keys import data_key, meta_key
from taskstate.testing import FakeSidecar


def open_state(
    fake: FakeSidecar, ns: str, batch: int | None, part: int = 0, **kw: Any
) -> TaskState:
    return TaskState(
        LocalContext(part, batch_id=batch), component="c", namespace=ns, sidecar=fake.target, **kw
    )


def stored(fake: FakeSidecar, ns: str, part: int = 0, comp: str = "c") -> dict[str, bytes]:
    raw = fake.client().hgetall(data_key(ns, comp, part))
    return {k.decode(): v for k, v in raw.items()}


def epoch(fake: FakeSidecar, ns: str, part: int = 0) -> int:
    return int(fake.client().hget(meta_key(ns, "c", part), "epoch"))


def test_commit_on_exit_and_restore_in_a_new_process_view(
    fake: FakeSidecar, namespace: str
) -> None:
    with open_state(fake, namespace, 0) as s:
        s["a"] = 1
        s["b"] = {"x": [1, 2]}
    assert stored(fake, namespace) == {"a": b"1", "b": b'{"x":[1,2]}'}
    # forget what this process holds: the next block must restore from the sidecar
    from taskstate.client import _cache

    _cache.sessions.clear()
    with open_state(fake, namespace, 1) as s:
        assert dict(s) == {"a": 1, "b": {"x": [1, 2]}}
        assert s.info.restored and s.info.committed_batch == 0


def test_same_process_skips_restore_when_it_holds_the_committed_version(
    fake: FakeSidecar, namespace: str
) -> None:
    with open_state(fake, namespace, 0) as s:
        s["a"] = 1
    with open_state(fake, namespace, 1) as s:
        assert not s.info.restored and dict(s) == {"a": 1}
        s["a"] = 2
    # another writer changed the state: the version differs, so this process restores
    with open_state(fake, namespace, 2) as s:
        pass
    fake.client().hincrby(meta_key(namespace, "c", 0), "ver", 1)
    with open_state(fake, namespace, 3) as s:
        assert dict(s) == {"a": 2} and s.info.restored


def test_nested_value_changed_in_place_is_committed(fake: FakeSidecar, namespace: str) -> None:
    with open_state(fake, namespace, 0) as s:
        s["k"] = {"n": 1, "l": []}
    with open_state(fake, namespace, 1) as s:
        s["k"]["n"] += 1
        s["k"]["l"].append("x")
    assert stored(fake, namespace)["k"] == b'{"n":2,"l":["x"]}'
    with open_state(fake, namespace, 2) as s:
        for _, v in s.items():
            v["n"] = 99
    assert stored(fake, namespace)["k"] == b'{"n":99,"l":["x"]}'


def test_value_set_then_mutated_before_commit_is_committed_mutated(
    fake: FakeSidecar, namespace: str
) -> None:
    with open_state(fake, namespace, 0) as s:
        v: dict[str, int] = {"n": 1}
        s["k"] = v
        v["n"] = 5
    assert stored(fake, namespace)["k"] == b'{"n":5}'


def test_exception_inside_with_commits_nothing_and_next_enter_sees_committed(
    fake: FakeSidecar, namespace: str
) -> None:
    with open_state(fake, namespace, 0) as s:
        s["a"] = {"n": 1}
    before = stored(fake, namespace)
    st = open_state(fake, namespace, 1)
    with pytest.raises(RuntimeError, match="boom"), st as s:
        s["a"]["n"] = 100
        s["b"] = 2
        raise RuntimeError("boom")
    assert st.phase is Phase.FAILED
    assert stored(fake, namespace) == before
    with open_state(fake, namespace, 1) as s:
        assert dict(s) == {"a": {"n": 1}}


def test_replay_rolls_back_and_a_different_replay_commits(
    fake: FakeSidecar, namespace: str
) -> None:
    with open_state(fake, namespace, 6) as s:
        s.update({"keep": 1, "change": 1, "drop": 1})
    after6 = stored(fake, namespace)
    with open_state(fake, namespace, 7) as s:
        s["change"] = 2
        s["add"] = 3
        del s["drop"]
    with open_state(fake, namespace, 7) as s:
        assert s.info.rolled_back and s.info.rolled_back_keys == 3
        assert stored(fake, namespace) == after6
        s["other"] = 9
    assert stored(fake, namespace) == {**after6, "other": b"9"}


def test_group_scoped_blocks_share_one_claim_and_a_replay_undoes_all(
    fake: FakeSidecar, namespace: str
) -> None:
    ctx = LocalContext(0, batch_id=3)
    with TaskState(ctx, component="c", namespace=namespace, sidecar=fake.target) as s:
        s["g1"] = 1
        epoch = s.info.epoch
    with TaskState(ctx, component="c", namespace=namespace, sidecar=fake.target) as s:
        assert s.info.reused_claim and s.info.epoch == epoch
        s["g2"] = 2
    assert set(stored(fake, namespace)) == {"g1", "g2"}
    with open_state(fake, namespace, 3) as s:  # a new attempt of batch 3
        assert s.info.rolled_back and dict(s) == {}


def test_fencing_older_attempt_commit_raises_and_writes_nothing(
    fake: FakeSidecar, namespace: str
) -> None:
    a = open_state(fake, namespace, 1)
    a.__enter__()
    a["who"] = "A"
    # B: a newer attempt, as if from another executor
    from taskstate.client import _cache

    saved = _cache.sessions.pop(a.task_id)
    with open_state(fake, namespace, 1) as b:
        b["who"] = "B"
    _cache.sessions[a.task_id] = saved
    with pytest.raises(FencedError, match="fenced"):
        a.__exit__(None, None, None)
    assert stored(fake, namespace) == {"who": b'"B"'}


def test_state_ahead_is_refused_and_changes_nothing(fake: FakeSidecar, namespace: str) -> None:
    with open_state(fake, namespace, 9) as s:
        s["a"] = 1
    before = epoch(fake, namespace)
    with pytest.raises(StateAheadError) as info:
        open_state(fake, namespace, 5).__enter__()
    msg = str(info.value)
    assert f"{namespace}/c/0" in msg and "batch 9" in msg and "batch 5" in msg
    assert "Operator action" in msg
    assert epoch(fake, namespace) == before and stored(fake, namespace) == {"a": b"1"}


def test_an_unknown_namespace_past_batch_0_is_refused_until_adopted(
    fake: FakeSidecar, namespace: str
) -> None:
    """As test_state_lost.py, through the client: a lost Redis is not a fresh start."""
    ns = f"{namespace}-late"  # not known (the fixture's namespace is)
    with pytest.raises(StateLostError, match=f"taskstate adopt {ns}"):
        open_state(fake, ns, 3).__enter__()
    assert list(fake.client().scan_iter(match=f"*{ns}/*")) == []
    with open_state(fake, f"{namespace}-new", 0) as s:  # a query's batch 0: known from then
        s["a"] = 1
    with open_state(fake, f"{namespace}-new", 1, part=1) as s:
        s["b"] = 1
    with AdminClient(fake.target) as admin:
        admin.adopt(ns)
    with open_state(fake, ns, 3) as s:
        s["a"] = 1
    assert stored(fake, ns) == {"a": b"1"}


def test_bad_value_raises_codec_error_at_assignment_before_anything_is_sent(
    fake: FakeSidecar, namespace: str
) -> None:
    with open_state(fake, namespace, 0) as s:
        s["ok"] = 1
    with open_state(fake, namespace, 1) as s:
        with pytest.raises(CodecError, match="'bad'.*set"):
            s["bad"] = {1, 2}
        with pytest.raises(CodecError, match="keys must be str"):
            s[3] = 1  # type: ignore[index]
        s["ok"] = 2
    assert stored(fake, namespace) == {"ok": b"2"}


def test_nested_bad_value_set_in_place_fails_the_commit_and_writes_nothing(
    fake: FakeSidecar, namespace: str
) -> None:
    with open_state(fake, namespace, 0) as s:
        s["k"] = {"n": 1}
    with pytest.raises(CodecError, match="'k'"), open_state(fake, namespace, 1) as s:
        s["k"]["n"] = object()
    assert stored(fake, namespace) == {"k": b'{"n":1}'}


def test_oversized_value_is_a_limit_error_and_nothing_is_written(namespace: str) -> None:
    os.environ["TASKSTATE_MAX_MESSAGE_BYTES"] = str(1 << 20)
    try:
        with FakeSidecar(max_message_bytes=1 << 20) as fake:
            with open_state(fake, namespace, 0) as s:
                s["small"] = 1
            with (
                pytest.raises(LimitError, match="TASKSTATE_MAX_MESSAGE_BYTES"),
                open_state(fake, namespace, 1) as s,
            ):
                s["big"] = "x" * (2 << 20)
            assert stored(fake, namespace) == {"small": b"1"}
    finally:
        del os.environ["TASKSTATE_MAX_MESSAGE_BYTES"]


def test_large_streaming_commit_is_split_and_a_replay_still_undoes_all(namespace: str) -> None:
    os.environ["TASKSTATE_MAX_MESSAGE_BYTES"] = str(256 << 10)
    try:
        with FakeSidecar(max_message_bytes=256 << 10) as fake:
            with open_state(fake, namespace, 0) as s:
                for i in range(3000):
                    s[f"k{i}"] = "v" * 200  # ~650 KB in all: three or more commits
            assert len(stored(fake, namespace)) == 3000
            with open_state(fake, namespace, 0) as s:
                assert s.info.rolled_back and len(s) == 0
            # a batch job cannot split atomically: it is told what to do instead
            with (
                pytest.raises(LimitError, match="Commit more often"),
                open_state(fake, namespace, None, part=1) as s,
            ):
                for i in range(3000):
                    s[f"k{i}"] = "v" * 200
    finally:
        del os.environ["TASKSTATE_MAX_MESSAGE_BYTES"]


def test_remote_mode_reads_through_the_sidecar(fake: FakeSidecar, namespace: str) -> None:
    with open_state(fake, namespace, 0) as s:
        s.update({"a": 1, "b": [1]})
    with open_state(fake, namespace, 1, mode="remote") as s:
        assert s["a"] == 1 and "zz" not in s
        s["b"].append(2)
        del s["a"]
        s["c"] = 3
        assert sorted(s) == ["b", "c"] and len(s) == 2
        with pytest.raises(KeyError):
            del s["nope"]
    assert stored(fake, namespace) == {"b": b"[1,2]", "c": b"3"}


def test_batch_job_checkpoints_position(fake: FakeSidecar, namespace: str) -> None:
    with open_state(fake, namespace, None) as s:
        assert s.position is None
        s["n"] = 10
        s.commit(position={"offset": 10})
        s["n"] = 20
        s.commit(position={"offset": 20})
    from taskstate.client import _cache

    _cache.sessions.clear()
    with open_state(fake, namespace, None) as s:
        assert s.position == {"offset": 20} and s["n"] == 20


def test_sidecar_errors_arrive_as_taskstate_errors(fake: FakeSidecar, namespace: str) -> None:
    fake.storage.fail_next("open", SidecarError(codes.FENCED, "injected"))
    with pytest.raises(FencedError, match="injected"):
        open_state(fake, namespace, 0).__enter__()
    fake.storage.fail_next("open", ValueError("unexpected bug"))
    with pytest.raises(Exception) as info:
        open_state(fake, namespace, 0).__enter__()
    assert "grpc" not in type(info.value).__module__
    assert "internal error in Open" in str(info.value)


@pytest.mark.parametrize(
    ("timeout", "says"),
    [
        # a call's deadline shorter than the retry deadline: each call gives up, and is
        # retried until the retry deadline
        ("0.5", "did not answer"),
        # longer: the wait for the sidecar ends with the retry deadline all the same (it
        # took the 30 s of TASKSTATE_TIMEOUT before)
        ("30", "could not be reached within TASKSTATE_RETRY_DEADLINE (1 s)"),
    ],
)
def test_unreachable_sidecar_is_a_clear_error_within_the_retry_deadline(
    namespace: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, timeout: str, says: str
) -> None:
    monkeypatch.setenv("TASKSTATE_TIMEOUT", timeout)
    monkeypatch.setenv("TASKSTATE_RETRY_DEADLINE", "1")
    st = TaskState(
        LocalContext(0, batch_id=0),
        component="c",
        namespace=namespace,
        sidecar=f"unix://{tmp_path}/none.sock",
    )
    t0 = time.monotonic()
    with pytest.raises(SidecarUnavailableError, match=re.escape(says)) as info:
        st.__enter__()
    assert time.monotonic() - t0 < 10
    assert info.value.task == f"{namespace}/c/0" and "TASKSTATE_SIDECAR" in str(info.value)
    assert f"the sidecar at unix://{tmp_path}/none.sock " in str(info.value)  # as written
    assert isinstance(info.value, ConnectionError)
    pickle.loads(pickle.dumps(info.value))


def test_a_sidecar_that_comes_up_within_the_retry_deadline_is_waited_for(
    namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the same bounded wait (the call's deadline longer than the retry deadline) still
    # finds a sidecar that starts while the task waits
    monkeypatch.setenv("TASKSTATE_TIMEOUT", "60")
    monkeypatch.setenv("TASKSTATE_RETRY_DEADLINE", "20")
    fake = FakeSidecar()
    starter = threading.Timer(1.0, fake.start)
    starter.start()
    try:
        with TaskState(
            LocalContext(0, batch_id=0), component="c", namespace=namespace, sidecar=fake.target
        ) as s:
            s["n"] = 1
        starter.join()
        with open_state(fake, namespace, 1) as s:
            assert s["n"] == 1
    finally:
        starter.join()
        fake.stop()


def test_a_connected_channel_is_told_in_microseconds_with_or_without_a_token(
    fake: FakeSidecar, tmp_path: Any
) -> None:
    # the bounded wait above asks first whether the channel is connected, from grpc's
    # core channel (grpc.channel_ready_future costs about 0.5 ms even then): if grpc's
    # internals move, this says so, where the calls would only get slower
    for security in (SidecarSecurity(), SidecarSecurity(token="t0ken")):  # noqa: S106
        wire = _wires.GrpcWire(fake.target, 1 << 20, security)
        grpc.channel_ready_future(wire.channel).result(timeout=10)
        assert wire.connected(), security
    missing = _wires.GrpcWire(f"unix://{tmp_path}/none.sock", 1 << 20, SidecarSecurity())
    assert not missing.connected()


def test_use_outside_the_block_and_double_enter_are_errors(
    fake: FakeSidecar, namespace: str
) -> None:
    st = open_state(fake, namespace, 0)
    with pytest.raises(Exception, match="not open|inside its"):
        st["a"] = 1
    with st:
        with pytest.raises(ConfigError, match="already open"):
            open_state(fake, namespace, 0).__enter__()
    with pytest.raises(Exception, match="entered once"):
        st.__enter__()


def test_channels_are_recreated_after_fork(fake: FakeSidecar, namespace: str) -> None:
    with open_state(fake, namespace, 0) as s:
        s["parent"] = 1
    pid = os.fork()
    if pid == 0:  # child: must build its own channel and work
        code = 1
        try:
            with open_state(fake, namespace, 1, part=1) as s:
                s["child"] = 2
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert stored(fake, namespace, part=1) == {"child": b"2"}


def test_process_cache_is_bounded_but_keeps_the_current_attempt(
    fake: FakeSidecar, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from taskstate.client import _cache

    monkeypatch.setenv("TASKSTATE_CACHE_TASKS", "3")
    _cache.sessions.clear()
    for p in range(6):  # six tasks run one after another in this worker
        with open_state(fake, namespace, 0, part=p) as s:
            s["p"] = p
    assert len(_cache.sessions) == 3
    assert sorted(_cache.sessions) == [f"{namespace}/c/{p}" for p in (3, 4, 5)]
    # one attempt touching many components keeps all its claims (no self-rollback)
    ctx = LocalContext(0, batch_id=1)
    for comp in ("a", "b", "c", "d", "e"):
        with TaskState(ctx, component=comp, namespace=namespace, sidecar=fake.target) as s:
            s["x"] = 1
    with TaskState(ctx, component="a", namespace=namespace, sidecar=fake.target) as s:
        assert s.info.reused_claim and not s.info.rolled_back
    assert stored(fake, namespace, comp="a") == {"x": b"1"}


def test_a_key_over_the_limit_is_read_as_absent(fake: FakeSidecar, namespace: str) -> None:
    """No such key can be stored, so reading it finds nothing (a write of it is refused)."""
    long = "k" * 5000  # over the sidecar's default --max-key-bytes
    with open_state(fake, namespace, 0) as s:
        s["a"] = 1
    from taskstate.client import _cache

    _cache.sessions.clear()  # the next block reads through the sidecar
    with open_state(fake, namespace, 1) as s:
        assert s.get(long, "default") == "default" and long not in s and s["a"] == 1
        s.prefetch([long, "a"])
