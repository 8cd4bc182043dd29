"""Request limits of the real sidecar: each refusal names the limit and its setting, and
leaves the stored state untouched."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path

import grpc
import pytest

from taskstate.client import LimitError, LocalContext, TaskState
from taskstate.proto import taskstate_pb2 as pb
from taskstate.proto import taskstate_pb2_grpc as pb_grpc
from taskstate.sidecar.storage.redis.keys import data_key
from taskstate.testing import RedisServer, SidecarProcess

from ..conftest import snapshot
from ..waiting import eventually

pytestmark = pytest.mark.integration

LIMITS = ["--max-commit-keys", "100", "--max-key-bytes", "64", "--max-value-bytes", "1000"]


def ts(side: SidecarProcess, ns: str, batch: int) -> TaskState:
    ctx = LocalContext(0, batch_id=batch)
    return TaskState(ctx, component="c", namespace=ns, sidecar=side.target)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({f"k{i}": i for i in range(101)},
         "101 keys, over the limit of 100 (sidecar --max-commit-keys)"),
        ({"k" * 65: 1}, "is 65 bytes, over the limit of 64 (sidecar --max-key-bytes)"),
        # the key over the limit in UTF-8 bytes is not the longest in characters
        ({"a" * 60: 1, "é" * 40: 2},
         "is 80 bytes, over the limit of 64 (sidecar --max-key-bytes)"),
        ({"big": "x" * 1000}, "is 1002 bytes, over the limit of 1000 (sidecar --max-value-bytes)"),
    ],
)  # fmt: skip
def test_commit_limits_refuse_and_write_nothing(
    redis_server: RedisServer, tmp_path: Path, namespace: str, change: dict[str, object], says: str
) -> None:
    side = SidecarProcess(redis_server.url, tmp_path / "s.sock", extra=LIMITS).start()
    try:
        with ts(side, namespace, 0) as s:
            s["kept"] = 1
        before = snapshot(redis_server, namespace)
        with pytest.raises(LimitError) as info, ts(side, namespace, 1) as s:
            s.update(change)
        assert says in str(info.value) and f"{namespace}/c/0" in str(info.value)
        after = snapshot(redis_server, namespace)
        # the claim moved (Open ran); the data and the committed batch did not
        assert (
            after[data_key(namespace, "c", 0).encode()]
            == before[data_key(namespace, "c", 0).encode()]
        )
    finally:
        side.kill()


def test_in_flight_limit_refuses_the_request_beyond_it(tmp_path: Path, namespace: str) -> None:
    """Redis stopped (SIGSTOP): two requests hang in the sidecar, the third is refused."""
    redis = RedisServer(tmp_path / "redis").start()
    side = SidecarProcess(
        redis.url,
        tmp_path / "s.sock",
        extra=["--max-in-flight", "2", "--redis-deadline", "20", "--metrics-port", "0"],
    ).start()
    channel = grpc.insecure_channel(f"unix:{side.socket}")
    stub = pb_grpc.TaskStateServiceStub(channel)
    req = pb.DescribeRequest(task=pb.TaskId(namespace=namespace, component="c", partition=0))
    assert redis.proc is not None
    try:
        redis.proc.send_signal(signal.SIGSTOP)
        hung = [threading.Thread(target=lambda: _quietly(stub, req)) for _ in range(2)]
        for t in hung:
            t.start()
        eventually(  # both inside the sidecar, waiting for Redis (metrics have their thread)
            lambda: side.metrics().get('taskstate_requests_in_flight{method="Describe"}') == 2,
            "the two Describe calls never reached the sidecar",
            20,
        )
        with pytest.raises(grpc.RpcError) as info:
            stub.Describe(req, timeout=10)
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "--max-in-flight 2" in (info.value.details() or "")
        redis.proc.send_signal(signal.SIGCONT)
        for t in hung:
            t.join(30)
        assert stub.Describe(req, timeout=10).exists is False  # served again
    finally:
        redis.proc.send_signal(signal.SIGCONT)
        channel.close()
        side.kill()
        redis.stop()


def _quietly(stub: pb_grpc.TaskStateServiceStub, req: pb.DescribeRequest) -> None:
    try:
        stub.Describe(req, timeout=30)
    except grpc.RpcError:
        pass


def test_bad_limit_values_stop_the_sidecar(redis_server: RedisServer, tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "taskstate.sidecar", "--redis-url", redis_server.url,
         "--listen", f"unix://{tmp_path}/s.sock", "--max-commit-keys", "0"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert r.returncode == 2 and "--max-commit-keys: 0 must be at least 1" in r.stderr
