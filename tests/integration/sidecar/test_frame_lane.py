"""The frame lane (taskstate.proto.frames) against the real sidecar and redis-server.

A task's Open, Commit, Read and Describe travel it whenever the sidecar serves one
beside its Unix socket; these tests show that they do, that a lost answer and a killed
sidecar cost nothing, that tokens hold there too, and that bad frames are refused.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from taskstate.client import (
    LimitError,
    LocalContext,
    PermissionDeniedError,
    SidecarUnavailableError,
    TaskState,
    UnauthenticatedError,
    _cache,
)
from taskstate.proto import codes, frames
from taskstate.proto import taskstate_pb2 as pb
from taskstate.sidecar.storage.redis.keys import data_key, meta_key
from taskstate.testing import RedisServer, SidecarProcess

from ..lanes import TOKEN, exactly, lane_with_tokens, read_answer
from ..lost_answer import check_a_lost_answer_counts_once
from ..waiting import eventually

pytestmark = pytest.mark.integration


def ts(target: str, ns: str, batch: int, part: int = 0) -> TaskState:
    return TaskState(LocalContext(part, batch_id=batch), component="c", namespace=ns,
                     sidecar=target)  # fmt: skip


def data_of(r: RedisServer, ns: str, part: int = 0) -> dict[bytes, bytes]:
    return r.client().hgetall(data_key(ns, "c", part))  # type: ignore[no-any-return]


@pytest.fixture(autouse=True)
def short_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TASKSTATE_RETRY_DEADLINE", "3")
    monkeypatch.setenv("TASKSTATE_TIMEOUT", "3")


@pytest.fixture
def lane_only(redis_server: RedisServer, tmp_path: Path) -> Iterator[tuple[SidecarProcess, str]]:
    """A sidecar whose gRPC socket is moved away: at its address only the lane answers."""
    side = SidecarProcess(redis_server.url, tmp_path / "s.sock").start()
    os.rename(tmp_path / "s.sock", tmp_path / "moved.sock")
    try:
        yield side, side.target
    finally:
        side.kill()


def test_a_blocks_calls_travel_the_lane(
    lane_only: tuple[SidecarProcess, str],
    redis_server: RedisServer,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, target = lane_only
    with ts(target, namespace, 0) as s:  # Open + Commit
        s.update({"a": 1, "b": {"n": 2}})
    _cache.sessions.clear()
    with ts(target, namespace, 1) as s:  # Open + Read (one key) + Commit
        assert s["b"] == {"n": 2}
        s["a"] += 1
    assert data_of(redis_server, namespace) == {b"a": b"2", b"b": b'{"n":2}'}
    # the same block without the lane needs the gRPC socket, which is not there
    _cache.sessions.clear()
    monkeypatch.setenv("TASKSTATE_FRAME_LANE", "off")
    import taskstate.client._wires as transport

    monkeypatch.setattr(transport, "_wires", {})
    with pytest.raises(SidecarUnavailableError):
        with ts(target, namespace, 2) as s:
            s["a"] = 3
    assert data_of(redis_server, namespace) == {b"a": b"2", b"b": b'{"n":2}'}


class DroppingLane:
    """A frame proxy at `path` in front of the lane at `upstream`.

    `arm()`: the next Commit reaches the sidecar, which commits; its answer is thrown
    away and the client's connection cut, so the client cannot know whether it landed.
    """

    def __init__(self, path: Path, upstream: str) -> None:
        self.upstream = upstream
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(16)
        self.armed = False
        self.answers_lost = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self) -> None:
        self.armed = True

    def close(self) -> None:
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        up.connect(self.upstream)
        with client, up:
            while True:
                head = exactly(client, 4)
                if head is None:
                    return
                body = exactly(client, frames.LENGTH.unpack(head)[0])
                assert body is not None
                up.sendall(head + body)
                rhead = exactly(up, 4)
                assert rhead is not None
                answer = exactly(up, frames.LENGTH.unpack(rhead)[0])
                if self.armed and body[0] == frames.METHODS["Commit"]:
                    self.armed = False
                    self.answers_lost += 1
                    return  # the sidecar committed; the client hears nothing
                client.sendall(rhead + (answer or b""))


def test_a_commit_whose_answer_is_lost_on_the_lane_counts_once(
    redis_server: RedisServer, tmp_path: Path, namespace: str
) -> None:
    side = SidecarProcess(redis_server.url, tmp_path / "s.sock").start()
    proxy = DroppingLane(tmp_path / "p.frames.sock", str(tmp_path / "s.frames.sock"))
    target = f"unix://{tmp_path}/p.sock"  # only its lane exists: the proxy
    try:
        check_a_lost_answer_counts_once(redis_server, namespace, target, proxy.arm)
        assert proxy.answers_lost == 1
    finally:
        proxy.close()
        side.kill()


def test_a_sidecar_killed_mid_commit_on_the_lane_commits_once_after_restart(
    redis_server: RedisServer, tmp_path: Path, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASKSTATE_RETRY_DEADLINE", "20")
    monkeypatch.setenv("TASKSTATE_TIMEOUT", "10")
    side = SidecarProcess(redis_server.url, tmp_path / "s.sock").start()
    try:
        with ts(side.target, namespace, 1) as s:
            s["n"] = 1
        st = ts(side.target, namespace, 2)
        st.__enter__()
        st["n"] = st["n"] + 1
        # Redis holds every command for 3 s: the commit is in the sidecar's hands when it dies
        # (seconds of margin, so a late timer thread on a loaded machine still meets it there)
        redis_server.client().execute_command("CLIENT", "PAUSE", "3000", "ALL")
        killer = threading.Timer(0.3, side.kill, args=(signal.SIGKILL,))
        restarter = threading.Timer(3.5, side.start)
        killer.start()
        restarter.start()
        t0 = time.monotonic()
        st.__exit__(None, None, None)
        took = time.monotonic() - t0
        for t in (killer, restarter):
            t.join()
        assert took >= 3.4, f"the commit was done in {took:.2f} s, before the sidecar died"
        assert data_of(redis_server, namespace) == {b"n": b"2"}
        assert int(redis_server.client().hget(meta_key(namespace, "c", 0), "batch")) == 2
    finally:
        side.kill()


def test_a_sidecar_restarted_without_the_lane_removes_its_stale_socket(
    redis_server: RedisServer, tmp_path: Path, namespace: str
) -> None:
    side = SidecarProcess(redis_server.url, tmp_path / "s.sock").start()
    lane = tmp_path / "s.frames.sock"
    try:
        with ts(side.target, namespace, 1) as s:
            s["n"] = 1
        side.kill(signal.SIGKILL)
        assert lane.is_socket()  # a stale socket: nobody listens there
        side.extra = ["--no-frame-lane"]
        side.start()
        assert not lane.exists()
        with ts(side.target, namespace, 2) as s:  # over gRPC, on the same lane object
            s["n"] += 1
        assert data_of(redis_server, namespace) == {b"n": b"2"}
    finally:
        side.kill()


def test_a_socket_path_too_long_for_the_lane_serves_grpc_alone(
    redis_server: RedisServer, namespace: str
) -> None:
    base = Path(tempfile.mkdtemp(prefix="l" * 40))
    path = base / ("s" * (frames.MAX_SOCKET_PATH - len(str(base)) - 6) + ".sock")
    assert len(str(path)) <= frames.MAX_SOCKET_PATH < len(frames.lane_path(str(path)))
    side = SidecarProcess(redis_server.url, path).start()
    try:
        with ts(side.target, namespace, 0) as s:
            s["n"] = 1
        assert data_of(redis_server, namespace) == {b"n": b"1"}
        assert not Path(frames.lane_path(str(path))).exists()
        assert "no frame lane" in side.log_path.read_text()
    finally:
        side.kill()
        shutil.rmtree(base)


def test_tokens_hold_on_the_lane(
    redis_server: RedisServer, tmp_path: Path, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with lane_with_tokens(redis_server, tmp_path, namespace) as side:
        with pytest.raises(UnauthenticatedError):
            ts(side.target, namespace, 0).__enter__()
        monkeypatch.setenv("TASKSTATE_TOKEN", TOKEN)
        with pytest.raises(PermissionDeniedError, match="may not open"):
            ts(side.target, namespace + "-other", 0).__enter__()
        with ts(side.target, namespace, 0) as s:
            s["n"] = 1
        assert data_of(redis_server, namespace) == {b"n": b"1"}


def _call(sock: socket.socket, frame: bytes) -> tuple[int, bytes]:
    sock.sendall(frame)
    return read_answer(sock)


def test_bad_frames_are_refused_and_the_connection_serves_on(
    redis_server: RedisServer, tmp_path: Path, namespace: str
) -> None:
    side = SidecarProcess(
        redis_server.url, tmp_path / "s.sock", extra=["--max-message-bytes", str(1 << 20)]
    ).start()
    try:
        with ts(side.target, namespace, 0) as s:
            s["n"] = 1
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(10)
        sock.connect(str(tmp_path / "s.frames.sock"))
        status, body = _call(sock, frames.request(99, b"", b""))
        assert status == frames.UNIMPLEMENTED and b"method 99" in body
        status, body = _call(sock, frames.request(frames.METHODS["Open"], b"", b"\xff\xff\xff"))
        assert status == frames.INVALID_ARGUMENT
        assert frames.parse_error(body)[0] == codes.INVALID_ARGUMENT
        task = pb.TaskId(namespace=namespace, component="c", partition=0)
        status, body = _call(
            sock,
            frames.request(
                frames.METHODS["Describe"], b"", pb.DescribeRequest(task=task).SerializeToString()
            ),
        )
        info = pb.TaskInfo.FromString(body)
        assert status == frames.OK and info.exists and info.committed_batch == 0
        # a request over --max-message-bytes: refused, and the connection serves on
        status, body = _call(sock, frames.request(frames.METHODS["Commit"], b"", bytes(1 << 20)))
        assert status == frames.RESOURCE_EXHAUSTED
        assert frames.parse_error(body)[0] == codes.LIMIT
        assert b"max-message-bytes" in body
        status, body = _call(
            sock,
            frames.request(
                frames.METHODS["Describe"], b"", pb.DescribeRequest(task=task).SerializeToString()
            ),
        )
        assert status == frames.OK
        sock.close()
        assert data_of(redis_server, namespace) == {b"n": b"1"}
    finally:
        side.kill()


def test_a_call_the_client_gave_up_on_ends_in_the_sidecar(
    redis_server: RedisServer, tmp_path: Path, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a gRPC deadline: the sidecar stops retrying Redis for a call nobody waits for,
    so it cannot land after the client's retry (or its next change set)."""
    side = SidecarProcess(
        redis_server.url,
        tmp_path / "s.sock",
        extra=["--metrics-port", "0", "--redis-deadline", "20", "--allow-volatile-redis"],
    ).start()
    in_flight = 'taskstate_requests_in_flight{method="Commit"}'
    monkeypatch.setenv("TASKSTATE_TIMEOUT", "1")
    monkeypatch.setenv("TASKSTATE_RETRY_DEADLINE", "1.5")
    try:
        with ts(side.target, namespace, 1) as s:
            s["n"] = 1
        st = ts(side.target, namespace, 2)
        st.__enter__()
        st["n"] = 2
        redis_server.kill()  # the sidecar retries Redis for up to 20 s
        with pytest.raises(SidecarUnavailableError):
            st.__exit__(None, None, None)
        eventually(
            lambda: side.metrics().get(in_flight, 0) == 0,
            "the sidecar still serves commits given up on",
            3,
            0.1,
        )
    finally:
        side.kill()
        redis_server.start()


def _blocks(target: str, ns: str, part: int, n: int) -> None:
    for b in range(n):
        with ts(target, ns, b, part) as s:
            s["n"] = b


def test_threads_and_forked_children_each_have_their_own_connection(
    sidecar: SidecarProcess, redis_server: RedisServer, namespace: str
) -> None:
    _blocks(sidecar.target, namespace, 0, 3)  # this process's thread holds a connection
    # forked while no other thread runs (a fork beside running threads can inherit a held
    # lock; PySpark's daemon forks its workers from one thread too)
    child = multiprocessing.get_context("fork").Process(
        target=_blocks, args=(sidecar.target, namespace, 3, 40)
    )
    child.start()
    threads = [
        threading.Thread(target=_blocks, args=(sidecar.target, namespace, p, 40)) for p in (1, 2)
    ]
    for t in threads:
        t.start()
    _blocks(sidecar.target, namespace, 4, 40)
    child.join(60)
    for t in threads:
        t.join(60)
    assert child.exitcode == 0
    for p in (1, 2, 3, 4):
        assert data_of(redis_server, namespace, p) == {b"n": b"39"}, p


def test_the_lane_is_seen_in_the_metrics(
    metered_sidecar: SidecarProcess, redis_server: RedisServer, namespace: str
) -> None:
    ok = 'taskstate_requests_total{code="ok",method="Commit"}'
    lanes = "taskstate_frame_lane_connections"
    seen: dict[str, float] = {}

    def block_in_a_new_thread() -> None:  # a new thread: a new connection of its own
        seen["before"] = metered_sidecar.metrics().get(lanes, 0)
        before = metered_sidecar.metrics().get(ok, 0)
        with ts(metered_sidecar.target, namespace, 0) as s:
            s["n"] = 1
        after = metered_sidecar.metrics()
        seen["during"], seen["commits"] = after[lanes], after[ok] - before

    t = threading.Thread(target=block_in_a_new_thread)
    t.start()
    t.join(30)
    assert seen["during"] == seen["before"] + 1  # the thread's calls came over the lane
    assert seen["commits"] == 1  # and the guard counted them as gRPC's
    assert data_of(redis_server, namespace) == {b"n": b"1"}


@pytest.mark.parametrize("lane", ["on", "off"])
def test_an_answer_over_the_clients_limit_is_the_same_error_on_both_transports(
    sidecar: SidecarProcess,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
    lane: str,
) -> None:
    import taskstate.client._wires as transport

    with ts(sidecar.target, namespace, 0) as s:
        s["big"] = "x" * 200_000
    _cache.sessions.clear()  # the next block reads the key from the sidecar (a Read of one key)
    monkeypatch.setattr(transport, "_wires", {})
    monkeypatch.setenv("TASKSTATE_FRAME_LANE", lane)
    monkeypatch.setenv("TASKSTATE_MAX_MESSAGE_BYTES", str(1 << 16))
    with pytest.raises(LimitError), ts(sidecar.target, namespace, 1) as s:
        s.get("big")


def test_a_tasks_reads_travel_the_threads_connection(
    lane_only: tuple[SidecarProcess, str],
    redis_server: RedisServer,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Restores and on-demand reads are Reads on the lane, on the connection of the calls."""
    from taskstate.client._frames import FrameLane

    _, target = lane_only  # no gRPC socket: every call and read must take the lane
    with ts(target, namespace, 0) as s:
        s.update({f"k{i}": i for i in range(50)})
    _cache.sessions.clear()  # the next block holds no copy: it reads through the sidecar
    connects = []
    real = FrameLane._connect

    def counted(self: FrameLane, timeout_s: float) -> Any:
        connects.append(threading.get_ident())
        return real(self, timeout_s)

    monkeypatch.setattr(FrameLane, "_connect", counted)
    seen: dict[str, Any] = {}

    def block_in_a_new_thread() -> None:  # a new thread: a connection of its own
        with ts(target, namespace, 1) as s:
            seen["one"] = s["k7"]  # a Read of one key
            seen["all"] = dict(s)  # a Read of the rest
            s["k7"] = -7

    t = threading.Thread(target=block_in_a_new_thread)
    t.start()
    t.join(30)
    assert seen["one"] == 7 and seen["all"] == {f"k{i}": i for i in range(50)}
    assert len(connects) == 1  # Open, two Reads and Commit: one connection
    assert data_of(redis_server, namespace)[b"k7"] == b"-7"


def test_a_read_left_midway_does_not_leave_its_chunks_for_the_next_call(
    sidecar: SidecarProcess, namespace: str
) -> None:
    """The thread's connection is dropped, never read from again, when a Read stops early."""
    from taskstate.client._frames import FrameLane

    with ts(sidecar.target, namespace, 0) as s:
        s.update({f"k{i}": "x" * 1000 for i in range(3000)})  # about 3 MB: several chunks
    opened = Open(sidecar.target, namespace)
    lane = FrameLane(frames.lane_path(sidecar.target.removeprefix("unix://")), None)
    read = pb.ReadRequest(task=opened.task, epoch=opened.epoch).SerializeToString()
    chunks = lane.stream("Read", read, 5, 1 << 26, pb.ReadChunk.FromString, _last, whole=True)
    first = next(chunks)
    assert first.packed and not first.last
    chunks.close()  # type: ignore[attr-defined]  # the reader stops: the rest is still owed
    describe = pb.DescribeRequest(task=opened.task).SerializeToString()
    info = pb.TaskInfo.FromString(lane.call("Describe", describe, 5, 1 << 26))
    assert info.exists and info.size == 3000  # the answer, not a chunk left over


def _last(chunk: pb.ReadChunk) -> bool:
    return chunk.last


class Open:
    """An Open of partition 0 at batch 1 over gRPC: its task and epoch."""

    def __init__(self, target: str, namespace: str) -> None:
        import grpc

        from taskstate.proto import taskstate_pb2_grpc as pb_grpc

        self.task = pb.TaskId(namespace=namespace, component="c", partition=0)
        with grpc.insecure_channel(target) as channel:
            stub = pb_grpc.TaskStateServiceStub(channel)
            r = stub.Open(pb.OpenRequest(task=self.task, batch=1, codec="json", attempt_id="t:1"))
        self.epoch = r.epoch


def test_a_call_made_while_the_thread_reads_goes_over_grpc(
    sidecar: SidecarProcess, namespace: str
) -> None:
    """A call from inside a read at once (a callback) never shares the read's connection."""
    from taskstate.client._frames import FrameLane, LaneUnreachableError

    with ts(sidecar.target, namespace, 0) as s:
        s.update({f"k{i}": i for i in range(10)})
    opened = Open(sidecar.target, namespace)
    lane = FrameLane(frames.lane_path(sidecar.target.removeprefix("unix://")), None)
    read = pb.ReadRequest(task=opened.task, epoch=opened.epoch).SerializeToString()
    describe = pb.DescribeRequest(task=opened.task).SerializeToString()
    for chunk in lane.stream("Read", read, 5, 1 << 26, pb.ReadChunk.FromString, _last, whole=True):
        with pytest.raises(LaneUnreachableError, match="middle of a read"):
            lane.call("Describe", describe, 5, 1 << 26)  # the wire takes gRPC instead
        if chunk.last:
            break
    info = pb.TaskInfo.FromString(lane.call("Describe", describe, 5, 1 << 26))
    assert info.exists and info.size == 10  # the read ended: the connection serves on
