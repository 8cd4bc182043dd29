"""The claim-free Read stream on the frame lane, against the real sidecar and redis-server.

The data source's reads (and `taskstate export`) take the lane where the sidecar serves
one: the same chunks as over gRPC, the same guard (tokens, metrics, errors), a stream that
its reader may stop at any point, and a connection that serves on after a stream's error.
"""

from __future__ import annotations

import json
import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

import taskstate.client._wires as transport
from taskstate.client import (
    LimitError,
    LocalContext,
    NotFoundError,
    PermissionDeniedError,
    SidecarUnavailableError,
    TaskState,
    UnauthenticatedError,
)
from taskstate.client.admin import AdminClient
from taskstate.proto import chunks, codes, frames
from taskstate.proto import taskstate_pb2 as pb
from taskstate.testing import RedisServer, SidecarProcess

from ..lanes import TOKEN, lane_with_tokens, read_answer, read_frame
from ..waiting import eventually

pytestmark = pytest.mark.integration
PAD = "x" * 1000


def _fill(target: str, ns: str, keys: int) -> dict[str, dict[str, object]]:
    state = {f"k{i}": {"n": i, "pad": PAD} for i in range(keys)}
    with TaskState(LocalContext(0, batch_id=0), component="c", namespace=ns,
                   sidecar=target) as s:  # fmt: skip
        s.update(state)
    return state


def _decode(chunk: pb.ReadChunk, into: dict[str, object]) -> None:
    """Add a chunk's keys and values to `into`."""
    flat = chunks.unpack(chunk.packed, text=True)
    into.update({k: json.loads(v) for k, v in zip(flat[0::2], flat[1::2], strict=True)})


def _read(admin: AdminClient, ns: str, comp: str = "c") -> tuple[dict[str, object], int, int]:
    """(the state read, its committed batch, the number of chunks)."""
    task = pb.TaskId(namespace=ns, component=comp, partition=0)
    got: dict[str, object] = {}
    n, batch = 0, None
    for chunk in admin.read_chunks(pb.ReadRequest(task=task)):
        n += 1
        _decode(chunk, got)
        if chunk.last:
            batch = chunk.committed_batch
    assert batch is not None, "no last chunk"
    return got, batch, n


@pytest.fixture
def lane_only(redis_server: RedisServer, tmp_path: Path) -> Iterator[SidecarProcess]:
    """A sidecar whose gRPC socket is moved away: at its address only the lane answers."""
    side = SidecarProcess(redis_server.url, tmp_path / "s.sock", extra=["--metrics-port", "0"])
    side.start()
    os.rename(tmp_path / "s.sock", tmp_path / "moved.sock")
    try:
        yield side
    finally:
        side.kill()


def test_a_read_travels_the_lane_and_gives_what_grpc_gives(
    lane_only: SidecarProcess, sidecar: SidecarProcess, namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    want = _fill(sidecar.target, namespace, 3000)  # about 3 MB: several chunks
    with AdminClient(lane_only.target) as admin:
        got, batch, chunks = _read(admin, namespace)
    assert (got, batch) == (want, 0) and chunks > 2
    assert lane_only.metrics()['taskstate_requests_total{code="ok",method="Read"}'] == 1
    # without the lane the read needs the gRPC socket, which is not there
    monkeypatch.setenv("TASKSTATE_FRAME_LANE", "off")
    monkeypatch.setattr(transport, "_wires", {})
    with (
        AdminClient(lane_only.target, timeout_s=2) as admin,
        pytest.raises(SidecarUnavailableError),
    ):
        _read(admin, namespace)
    with AdminClient(sidecar.target) as admin:  # the same read over gRPC
        assert _read(admin, namespace)[:2] == (want, 0)


def test_tokens_and_errors_hold_on_the_lanes_reads(
    redis_server: RedisServer, tmp_path: Path, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with lane_with_tokens(redis_server, tmp_path, namespace) as side:
        monkeypatch.setenv("TASKSTATE_TOKEN", TOKEN)
        want = _fill(side.target, namespace, 10)
        with AdminClient(side.target) as admin:
            assert _read(admin, namespace)[0] == want
            with pytest.raises(NotFoundError):
                _read(admin, namespace, "none")  # no such task: refused, and the ...
            with pytest.raises(PermissionDeniedError, match="may not read"):
                _read(admin, namespace + "-other")
            assert _read(admin, namespace)[0] == want  # ... lane serves on
        monkeypatch.delenv("TASKSTATE_TOKEN")
        with AdminClient(side.target) as admin, pytest.raises(UnauthenticatedError):
            _read(admin, namespace)


def test_a_streams_frames_end_with_its_last_chunk_or_an_error_and_the_connection_serves_on(
    sidecar: SidecarProcess, namespace: str
) -> None:
    want = _fill(sidecar.target, namespace, 3000)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(frames.lane_path(sidecar.target.removeprefix("unix://")))
    task = pb.TaskId(namespace=namespace, component="c", partition=0)
    read = pb.ReadRequest(task=task).SerializeToString()
    for _ in range(2):  # twice on one connection: the first left nothing behind
        sock.sendall(frames.request(frames.STREAMS["Read"], b"", read, 0))
        got: dict[str, object] = {}
        while True:
            status, body = read_answer(sock)
            assert status == frames.OK
            chunk = pb.ReadChunk.FromString(body)
            _decode(chunk, got)
            if chunk.last:
                break
        assert got == want
    sock.close()
    # an error ends a stream, and the connection serves the next call
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(frames.lane_path(sidecar.target.removeprefix("unix://")))
    missing = pb.ReadRequest(task=pb.TaskId(namespace=namespace, component="none"))
    sock.sendall(frames.request(frames.STREAMS["Read"], b"", missing.SerializeToString(), 0))
    status, body = read_answer(sock)
    assert status != frames.OK and frames.parse_error(body)[0] == codes.NOT_FOUND
    describe = pb.DescribeRequest(task=task).SerializeToString()
    sock.sendall(frames.request(frames.METHODS["Describe"], b"", describe))
    status, body = read_answer(sock)
    assert status == frames.OK and pb.TaskInfo.FromString(body).committed_batch == 0
    sock.close()


def test_a_reader_that_stops_midway_ends_the_stream_in_the_sidecar(
    lane_only: SidecarProcess, namespace: str
) -> None:
    want = _fill(lane_only.target, namespace, 6000)  # many chunks
    in_flight = 'taskstate_requests_in_flight{method="Read"}'
    cancelled = 'taskstate_requests_total{code="CANCELLED",method="Read"}'
    task = pb.TaskId(namespace=namespace, component="c", partition=0)
    with AdminClient(lane_only.target) as admin:
        chunks = admin.read_chunks(pb.ReadRequest(task=task))
        next(chunks)
        assert lane_only.metrics().get(in_flight) == 1
        chunks.close()  # the reader stops: its connection closes
        eventually(lambda: lane_only.metrics().get(in_flight) == 0, "the stream still runs", 5)
        # the reader left: not a failure of the sidecar's
        assert lane_only.metrics().get(cancelled) == 1
        assert 'taskstate_requests_total{code="INTERNAL",method="Read"}' not in lane_only.metrics()
        assert _read(admin, namespace)[0] == want  # and the next read is whole


def test_a_chunk_over_the_sidecars_message_limit_is_refused_as_a_limit(
    sidecar: SidecarProcess, redis_server: RedisServer, tmp_path: Path, namespace: str
) -> None:
    with TaskState(LocalContext(0, batch_id=0), component="c", namespace=namespace,
                   sidecar=sidecar.target) as s:  # fmt: skip
        s.update({f"k{i}": "x" * 700_000 for i in range(3)})  # two to a chunk: 1.4 MB
    small = SidecarProcess(
        redis_server.url, tmp_path / "s.sock",
        extra=["--max-message-bytes", str(1 << 20), "--metrics-port", "0"],
    ).start()  # fmt: skip
    os.rename(tmp_path / "s.sock", tmp_path / "moved.sock")  # the lane alone answers
    try:
        with AdminClient(small.target) as admin, pytest.raises(LimitError, match="1048576"):
            _read(admin, namespace)
        # the stream ended (its error frame sent), then the call left the guard: no leak.
        # The client can hear the error before the sidecar's handler has left; so wait
        in_flight = 'taskstate_requests_in_flight{method="Read"}'
        eventually(
            lambda: small.metrics()[in_flight] == 0, "the Read's handler never left its guard", 10
        )
    finally:
        small.kill()


def test_a_read_under_way_when_the_sidecar_is_told_to_stop_finishes(
    redis_server: RedisServer, tmp_path: Path, namespace: str
) -> None:
    """SIGTERM: the sidecar takes no new call, and lets a stream under way end (within
    --drain-seconds), as gRPC does."""
    side = SidecarProcess(redis_server.url, tmp_path / "s.sock").start()
    try:
        want = _fill(side.target, namespace, 6000)
        task = pb.TaskId(namespace=namespace, component="c", partition=0)
        got: dict[str, object] = {}
        with AdminClient(side.target) as admin:
            for n, chunk in enumerate(admin.read_chunks(pb.ReadRequest(task=task))):
                if n == 0:
                    assert not chunk.last and side.proc is not None
                    side.proc.send_signal(signal.SIGTERM)  # draining from here on
                _decode(chunk, got)
        assert got == want
        assert side.proc is not None and side.proc.wait(30) == 0
    finally:
        side.kill()


def test_a_sidecar_killed_mid_read_is_an_error_not_a_hang_or_a_part(
    redis_server: RedisServer, tmp_path: Path, namespace: str
) -> None:
    side = SidecarProcess(redis_server.url, tmp_path / "s.sock").start()
    try:
        _fill(side.target, namespace, 6000)
        task = pb.TaskId(namespace=namespace, component="c", partition=0)
        with AdminClient(side.target, timeout_s=5) as admin:
            chunks = admin.read_chunks(pb.ReadRequest(task=task))
            first = next(chunks)
            assert not first.last
            side.kill(signal.SIGKILL)
            with pytest.raises(SidecarUnavailableError, match="broke off"):
                for _ in chunks:
                    pass
    finally:
        side.kill()


def _request(conn: socket.socket) -> tuple[int, int, bytes]:
    """(method, deadline ms, the rest) of one request frame."""
    body = read_frame(conn)
    method, deadline, _ = frames.CALL_HEAD.unpack_from(body)
    return method, deadline, body[frames.CALL_HEAD.size :]
