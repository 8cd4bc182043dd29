from __future__ import annotations

import os
import pickle
import sys
import threading
from typing import Any

import pytest

from taskstate.client import (
    CodecError,
    ConfigError,
    DurabilitySpec,
    FencedError,
    LocalContext,
    StateAheadError,
    TaskState,
    TaskStateConfig,
    TaskStateError,
)
from taskstate.client._codec import JsonCodec
from taskstate.client.address import DEFAULT_SIDECAR, grpc_target
from taskstate.proto import ids


@pytest.mark.parametrize(
    "bad", ["", "a}b", "a/b", "{x}", "x" * 200, "-lead", "sp ace", "ü", "a:b", "a\nb"]
)
def test_bad_component_names_are_refused_with_the_value(bad: str) -> None:
    with pytest.raises(ConfigError) as info:
        TaskState(LocalContext(0), component=bad, namespace="ns", sidecar="unix:///x")
    assert "component" in str(info.value)
    if bad:
        assert repr(bad)[:20] in str(info.value) or len(bad) > 128


@pytest.mark.parametrize("good", ["a", "A-1", "x.y_z", "9" * 128])
def test_good_names(good: str) -> None:
    assert ids.name_problem("component", good) is None


def test_namespace_precedence_argument_env_property() -> None:
    prop = {"taskstate.namespace": "from-prop"}.get
    env = {"TASKSTATE_NAMESPACE": "from-env"}
    assert (
        TaskStateConfig.resolve(
            component="c", namespace="arg", env=env, local_property=prop
        ).namespace
        == "arg"
    )
    assert TaskStateConfig.resolve(component="c", env=env, local_property=prop).namespace == (
        "from-env"
    )
    assert TaskStateConfig.resolve(component="c", env={}, local_property=prop).namespace == (
        "from-prop"
    )
    with pytest.raises(ConfigError, match="no namespace"):
        TaskStateConfig.resolve(component="c", env={})


def test_sidecar_precedence_and_default() -> None:
    env = {"TASKSTATE_SIDECAR": "unix:///env.sock"}
    assert (
        TaskStateConfig.resolve(component="c", namespace="n", sidecar="tcp://h:1", env=env).sidecar
        == "tcp://h:1"
    )
    assert TaskStateConfig.resolve(component="c", namespace="n", env=env).sidecar == (
        "unix:///env.sock"
    )
    assert TaskStateConfig.resolve(component="c", namespace="n", env={}).sidecar == (
        DEFAULT_SIDECAR
    )
    assert grpc_target("unix:///a/b.sock") == "unix:/a/b.sock"
    assert grpc_target("tcp://127.0.0.1:5") == "127.0.0.1:5"
    with pytest.raises(ConfigError):
        grpc_target("unix://relative")
    with pytest.raises(ConfigError):
        grpc_target("nonsense")


def test_settings_are_resolved_once_per_task_attempt(monkeypatch: pytest.MonkeyPatch) -> None:
    """The blocks of one attempt (a group call each) share its settings; a new attempt
    reads the environment again, and bad arguments are refused whatever was cached."""
    monkeypatch.setenv("TASKSTATE_TIMEOUT", "7")
    attempt = LocalContext(0, batch_id=3)
    first = TaskState(attempt, component="c", namespace="n", sidecar="unix:///x.sock")
    assert first.config.timeout_s == 7.0
    monkeypatch.setenv("TASKSTATE_TIMEOUT", "9")
    again = TaskState(attempt, component="c", namespace="n", sidecar="unix:///x.sock")
    assert again.config is first.config  # the attempt's next block: nothing resolved again
    other = TaskState(attempt, component="d", namespace="n", sidecar="unix:///x.sock")
    assert other.config.timeout_s == 9.0  # other arguments: resolved for them
    retry = LocalContext(0, batch_id=3, attempt=1)
    assert (
        TaskState(retry, component="c", namespace="n", sidecar="unix:///x.sock").config.timeout_s
        == 9.0
    )
    monkeypatch.setenv("TASKSTATE_TIMEOUT", "soon")
    with pytest.raises(ConfigError, match="TASKSTATE_TIMEOUT='soon' is not a number"):
        TaskState(LocalContext(0, batch_id=3), component="c", namespace="n", sidecar="unix:///x")
    monkeypatch.setenv("TASKSTATE_TIMEOUT", "9")
    with pytest.raises(ConfigError, match=r"partitions=\[2\]"):  # unhashable: still refused
        TaskState(attempt, component="c", namespace="n", sidecar="unix:///x", partitions=[2])  # type: ignore[arg-type]


def test_the_blocks_of_an_attempt_share_its_parts_and_nothing_of_their_own() -> None:
    """A group call's block takes the attempt's settings, schema, transport, claims,
    reads and committer as the attempt's first block built them; its changes are its
    own. Another batch, attempt or argument builds new parts, and an argument that is
    equal to a good one but of another type (True for 1) is still refused."""
    ctx = LocalContext(0, batch_id=3)

    def block(c: Any = ctx, **more: Any) -> TaskState:
        return TaskState(c, component="c", namespace="n", sidecar="unix:///x.sock", **more)

    first, again = block(), block()
    shared = ("config", "_schema", "_transport", "_claims", "_reads")
    assert all(getattr(again, name) is getattr(first, name) for name in shared)
    assert again._block.committer is first._block.committer
    assert again._block is not first._block
    assert again._block.changes is not first._block.changes
    assert again._written is not first._written
    ctx.batch_id = 4  # a LocalContext reused for the next batch: the commits name it
    moved = block()
    assert moved._claims is not first._claims and moved._block.committer.batch == 4
    assert block(ttl=60)._schema.ttl_ms == 60_000 and block(ttl=60)._schema is not first._schema
    assert block(partitions=1).config.partitions == 1
    for bad in ({"ttl": True}, {"version": True}, {"partitions": True}):
        with pytest.raises(ConfigError, match=f"{next(iter(bad))}=True"):
            block(**bad)
    with pytest.raises(ConfigError, match="outside the 1 partitions"):  # every block: refused
        block(LocalContext(1, batch_id=4), partitions=1)
    with pytest.raises(ConfigError, match="outside the 1 partitions"):
        block(LocalContext(1, batch_id=4), partitions=1)
    upgraded = block(version=2, upgrade={1: lambda v: v})
    assert block(version=2, upgrade={1: lambda v: v})._schema is not upgraded._schema


def test_a_block_finds_the_parts_of_the_block_before_it_by_equal_arguments() -> None:
    """The last block's parts are found by one comparison of the arguments: equal ones
    (a string built anew at each call) find them, equal numbers of another type do not
    (a refusal stays a refusal), and a forked child builds its own."""
    ctx = LocalContext(0, batch_id=3)
    sidecar = "unix:///x.sock"
    first = TaskState(ctx, component="c", namespace="n", sidecar=sidecar, partitions=2)
    anew = "".join(["unix:///", "x.sock"])  # equal, another object
    again = TaskState(ctx, component="c", namespace="n", sidecar=anew, partitions=2)
    assert again._claims is first._claims and again.config is first.config
    with pytest.raises(ConfigError, match="partitions=2.0"):
        TaskState(ctx, component="c", namespace="n", sidecar=sidecar, partitions=2.0)  # type: ignore[arg-type]
    other = TaskState(ctx, component="c", namespace="m", sidecar=sidecar, partitions=2)
    assert other._claims is not first._claims and other.task_id.startswith("m/")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        child = TaskState(ctx, component="c", namespace="m", sidecar=sidecar, partitions=2)
        os.write(w, b"own" if child._claims is not other._claims else b"parent's")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(r, 16) == b"own"


def test_blocks_in_two_threads_each_find_their_own_attempts_parts() -> None:
    """Two threads building blocks of two attempts at once: the last block's arguments
    and parts are replaced together, so no block takes the other thread's parts."""
    contexts = [LocalContext(0, batch_id=1), LocalContext(1, batch_id=2)]
    wrong: list[str] = []

    def blocks(ctx: LocalContext) -> None:
        for _ in range(3000):
            s = TaskState(ctx, component="c", namespace="n", sidecar="unix:///x.sock")
            if s._block.committer.batch != ctx.batch_id or s.partition != ctx.partition_id:
                wrong.append(s.task_id)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    try:
        threads = [threading.Thread(target=blocks, args=(c,)) for c in contexts]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert wrong == []


def test_a_spark_task_context_is_read_once_per_attempt() -> None:
    """PySpark makes a TaskContext per task attempt and never changes it: its identity is
    read at the attempt's first block. Another attempt id on the same object is read
    again; a LocalContext, which can change in place, every time."""
    from pyspark.taskcontext import TaskContext

    from taskstate.client._context import identity

    tc = TaskContext()  # (also made the process' current one: not after this test)
    TaskContext._setTaskContext(None)
    tc._partitionId, tc._attemptNumber, tc._taskAttemptId, tc._stageId = 3, 0, 77, 1
    tc._localProperties = {"streaming.sql.batchId": "5", "spark.app.id": "app-1"}
    first = identity(tc)
    assert (first.partition, first.batch, first.attempt_id) == (3, 5, "app-1:77")
    assert identity(tc) is first
    tc._taskAttemptId, tc._localProperties = 78, {"streaming.sql.batchId": "6",
                                                  "spark.app.id": "app-1"}  # fmt: skip
    assert (identity(tc).batch, identity(tc).attempt_id) == (6, "app-1:78")
    local = LocalContext(0, batch_id=1)
    assert identity(local).batch == 1
    local.batch_id = 2
    assert identity(local).batch == 2


@pytest.mark.parametrize(
    ("text", "replicas", "fsynced"),
    [
        ("applied", 0, False),
        ("replicated:2", 2, False),
        ("fsynced", 0, True),
        ("replicated:1,fsynced", 1, True),
        ("replicated:1+fsynced", 1, True),
    ],
)
def test_durability_parse(text: str, replicas: int, fsynced: bool) -> None:
    d = DurabilitySpec.parse(text)
    assert (d.replicas, d.fsynced) == (replicas, fsynced)


@pytest.mark.parametrize("bad", ["", "fast", "replicated:", "replicated:0", "applied,fsynced"])
def test_durability_bad(bad: str) -> None:
    with pytest.raises(ValueError, match="durability"):
        DurabilitySpec.parse(bad)
    with pytest.raises(ConfigError, match="durability"):
        TaskStateConfig.resolve(component="c", namespace="n", durability=bad, env={})


def test_bad_mode_and_codec() -> None:
    with pytest.raises(ConfigError, match="mode"):
        TaskStateConfig.resolve(component="c", namespace="n", mode="cache", env={})
    with pytest.raises(ConfigError, match="codec"):
        TaskStateConfig.resolve(component="c", namespace="n", codec="pickle", env={})


def test_no_task_context_outside_spark_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="LocalContext"):
        TaskState(component="c", namespace="n")


@pytest.mark.parametrize(
    ("value", "typename"),
    [({1, 2}, "set"), ({"a": object()}, "object"), ([1, b"x"], "bytes"), ({1: 2}, "dict key")],
)
def test_codec_error_names_key_and_type(value: object, typename: str) -> None:
    with pytest.raises(CodecError) as info:
        JsonCodec().encode("ns/c/0", "the-key", value)
    assert "'the-key'" in str(info.value) and typename in str(info.value)
    assert "ns/c/0" in str(info.value)


@pytest.mark.parametrize("value", [float("nan"), {"a": [1.0, float("inf")]}])
def test_codec_refuses_non_finite_floats(value: object) -> None:
    with pytest.raises(CodecError, match="NaN or infinity"):
        JsonCodec().encode("ns/c/0", "k", value)


def test_codec_round_trip_and_bad_stored_bytes() -> None:
    c = JsonCodec()
    v = {"a": [1, 2.5, None, True, "x"], "null": None}
    assert c.decode("t", "k", c.encode("t", "k", v)) == v
    with pytest.raises(CodecError, match="not valid JSON"):
        c.decode("ns/c/0", "k", b"\xff{")


@pytest.mark.parametrize("cls", [FencedError, StateAheadError, ConfigError, CodecError])
def test_errors_survive_pickling_between_spark_processes(cls: type[TaskStateError]) -> None:
    err = cls("message for ns/c/1", "ns/c/1")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is cls and str(back) == "message for ns/c/1" and back.task == "ns/c/1"
    assert back.code == cls.code and isinstance(back, TaskStateError)


def test_plugin_sidecar_is_found_through_the_process_ancestry(tmp_path: Any) -> None:
    import os

    from taskstate.client import address

    parent = os.getppid()
    sock = tmp_path / f"jvm-{parent}.sock"
    sock.write_text("")  # only its existence matters here
    address._found.clear()
    env = {"TASKSTATE_RUN_DIR": str(tmp_path)}
    try:
        assert address.plugin_sidecar(env) == f"unix://{sock}"
        resolved = TaskStateConfig.resolve(component="c", namespace="n", env=env)
        assert resolved.sidecar == f"unix://{sock}"
        # an explicit setting still wins
        env2 = {**env, "TASKSTATE_SIDECAR": "unix:///explicit.sock"}
        assert TaskStateConfig.resolve(component="c", namespace="n", env=env2).sidecar == (
            "unix:///explicit.sock"
        )
    finally:
        address._found.clear()
    assert address.plugin_sidecar({"TASKSTATE_RUN_DIR": str(tmp_path / "none")}) is None


def test_messages_name_a_sidecar_as_users_write_it() -> None:
    from taskstate.client.address import address, grpc_target

    for spec in ("unix:///run/ts.sock", "tcp://10.0.0.1:7070"):
        assert address(grpc_target(spec)) == spec
        assert address(spec) == spec
