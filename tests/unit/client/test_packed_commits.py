"""The one form of a commit's change set (msgpack str arrays): applied, and malformed blobs
refused with INVALID_ARGUMENT, leaving the state untouched."""

from __future__ import annotations

from typing import Any

import grpc
import msgpack
import pytest

from taskstate.client.admin import AdminClient
from taskstate.proto import taskstate_pb2 as pb
from taskstate.proto import taskstate_pb2_grpc as pb_grpc
from taskstate.testing import FakeSidecar

TASK = pb.TaskId(namespace="n", component="c", partition=0)


@pytest.fixture
def stub():  # type: ignore[no-untyped-def]
    with (
        FakeSidecar() as fake,
        grpc.insecure_channel(fake.target.replace("unix://", "unix:")) as ch,
    ):
        with AdminClient(fake.target) as admin:
            admin.adopt("n")  # a known namespace: its first Open may be at batch 1
        yield pb_grpc.TaskStateServiceStub(ch), fake


def _data(fake: FakeSidecar) -> dict[bytes, dict[bytes, bytes]]:
    c = fake.client()
    return {k: c.hgetall(k) for k in c.scan_iter(match="*:data")}


def _open(stub: pb_grpc.TaskStateServiceStub) -> int:
    r = stub.Open(pb.OpenRequest(task=TASK, batch=1, codec="json"))
    return int(r.epoch)


def test_the_packed_change_set_is_applied(stub) -> None:  # type: ignore[no-untyped-def]
    s, fake = stub
    epoch = _open(s)
    s.Commit(
        pb.CommitRequest(
            task=TASK, epoch=epoch, batch=1,
            packed_upserts=msgpack.packb(["a", "1", "b", "2", "c", "3"]),
        )
    )  # fmt: skip
    s.Commit(pb.CommitRequest(task=TASK, epoch=epoch, batch=1, packed_deletes=msgpack.packb(["c"])))
    assert list(_data(fake).values()) == [{b"a": b"1", b"b": b"2"}]


@pytest.mark.parametrize(
    ("field", "blob", "says"),
    [
        ("packed_upserts", b"\xc1garbage", "not a msgpack array"),
        ("packed_upserts", msgpack.packb({"a": b"1"}), "not a msgpack array"),
        ("packed_upserts", msgpack.packb(["a", b"1", "b"], use_bin_type=True), "without a value"),
        ("packed_upserts", msgpack.packb([1, b"1"], use_bin_type=True), "not a UTF-8 string"),
        ("packed_upserts", msgpack.packb(["a", b""], use_bin_type=True), "not a msgpack str"),
        ("packed_upserts", msgpack.packb(["a", 5], use_bin_type=True), "not a msgpack str"),
        ("packed_upserts", msgpack.packb(["a", ""], use_bin_type=True), "not a msgpack str"),
        ("packed_upserts", b"\x92\xa2\xff\xfe\xc4\x011", "not a msgpack array"),  # bad UTF-8
        ("packed_deletes", msgpack.packb([b"bin"], use_bin_type=True), "not a UTF-8 string"),
        ("packed_upserts", msgpack.packb(["a", b"1"], use_bin_type=True), "not a msgpack str"),
    ],
)
def test_malformed_blobs_are_refused_and_change_nothing(
    stub: Any, field: str, blob: bytes, says: str
) -> None:
    s, fake = stub
    epoch = _open(s)
    before = _data(fake)
    with pytest.raises(grpc.RpcError) as info:
        req = pb.CommitRequest(task=TASK, epoch=epoch, batch=1)
        setattr(req, field, blob)
        s.Commit(req)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert says in (info.value.details() or "") and "n/c/0" in (info.value.details() or "")
    assert _data(fake) == before
