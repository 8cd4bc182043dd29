"""Restore streams: the sidecar's peak memory does not grow with the state's size."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from taskstate.proto import chunks
from taskstate.proto import taskstate_pb2 as pb
from taskstate.proto import taskstate_pb2_grpc as pb_grpc
from taskstate.sidecar.storage.redis.keys import data_key
from taskstate.testing import RedisServer, SidecarProcess

pytestmark = pytest.mark.integration


def _peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def _fill(r: RedisServer, stub: pb_grpc.TaskStateServiceStub, ns: str, fields: int) -> int:
    task = pb.TaskId(namespace=ns, component="big", partition=0)
    stub.Open(pb.OpenRequest(task=task, codec="json"), timeout=30)  # creates the meta
    c = r.client()
    key = data_key(ns, "big", 0)
    value = b'"' + b"v" * 98 + b'"'  # 100-byte JSON values
    pipe = c.pipeline(transaction=False)
    for start in range(0, fields, 5000):
        pipe.hset(key, mapping={f"key-{i:08d}": value for i in range(start, start + 5000)})
    pipe.execute()
    return int(stub.Open(pb.OpenRequest(task=task, codec="json"), timeout=30).epoch)


def _restore_peak(r: RedisServer, tmp_path: Path, ns: str, fields: int) -> tuple[int, int]:
    side = SidecarProcess(r.url, tmp_path / f"{fields}.sock").start()
    try:
        assert side.proc is not None
        with grpc.insecure_channel(
            f"unix:{side.socket}", options=[("grpc.max_receive_message_length", 64 << 20)]
        ) as ch:
            stub = pb_grpc.TaskStateServiceStub(ch)
            epoch = _fill(r, stub, ns, fields)
            before = _peak_rss_kib(side.proc.pid)
            task = pb.TaskId(namespace=ns, component="big", partition=0)
            n = 0
            for chunk in stub.Read(pb.ReadRequest(task=task, epoch=epoch), timeout=120):
                n += len(chunks.unpack(chunk.packed, text=False)) // 2
                assert chunk.ByteSize() < (2 << 20)  # bounded chunks
            assert n == fields
            return before, _peak_rss_kib(side.proc.pid)
    finally:
        side.kill()


def test_sidecar_peak_memory_is_flat_in_state_size(
    redis_server: RedisServer, tmp_path: Path, namespace: str
) -> None:
    small_before, small_after = _restore_peak(redis_server, tmp_path, namespace + "-s", 20_000)
    big_before, big_after = _restore_peak(redis_server, tmp_path, namespace + "-b", 400_000)
    small_growth = small_after - small_before
    big_growth = big_after - big_before
    # 400,000 x ~110 bytes is ~44 MB: holding it (even once) would show here.
    assert big_growth < 16_000, (small_growth, big_growth)
    assert big_growth < small_growth + 12_000, (small_growth, big_growth)
