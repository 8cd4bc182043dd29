"""A new client against an older sidecar: nothing is lost to fields the sidecar cannot read.

Executors are upgraded by image, sidecars by chart (issue 7), so the two can differ for a
while. An older sidecar parses a newer request and drops the fields it does not know
(protobuf keeps them as unknown fields nobody reads). `OldSidecarProxy` sits in front of
the real sidecar and does exactly that for the fields added after the first release:
`CommitRequest.packed_upserts/packed_deletes`, `RestoreRequest.packed/since_version/
delta_only`, `GetRequest.packed_keys` and `OpenResponse.packed_commits/packed_gets/
open_commit`; it serves no OpenCommit (UNIMPLEMENTED).
Without the advertisements in OpenResponse the client would send its changes (or the keys
it reads on demand) only in the packed fields, and the old sidecar would see none.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from taskstate.client import LocalContext, TaskState, _cache
from taskstate.proto import taskstate_pb2 as pb
from taskstate.sidecar.storage.redis.keys import data_key
from taskstate.testing import RedisServer, SidecarProcess

pytestmark = pytest.mark.integration

_SERVICE = "taskstate.v1.TaskStateService"

# (message, fields an older sidecar does not know)
_NEWER_FIELDS: dict[Any, tuple[str, ...]] = {
    pb.CommitRequest: ("packed_upserts", "packed_deletes"),
    pb.RestoreRequest: ("packed", "since_version", "delta_only"),
    pb.GetRequest: ("packed_keys",),
    pb.OpenResponse: ("packed_commits", "packed_gets", "text_values", "open_commit"),
}


def _as_old(msg_type: Any, raw: bytes) -> bytes:
    msg = msg_type.FromString(raw)
    for name in _NEWER_FIELDS.get(msg_type, ()):
        msg.ClearField(name)
    out: bytes = msg.SerializeToString()
    return out


class OldSidecarProxy:
    """A gRPC server forwarding every call to the real sidecar, as an older one would parse."""

    def __init__(self, upstream: str, sock: Path) -> None:
        self.seen: dict[str, int] = {}
        self._channel = grpc.insecure_channel(upstream)
        handlers = {
            "Open": self._unary("Open", pb.OpenRequest, pb.OpenResponse),
            "Commit": self._unary("Commit", pb.CommitRequest, pb.CommitResponse),
            "Restore": self._stream("Restore", pb.RestoreRequest),
            "MultiGet": self._unary("MultiGet", pb.GetRequest, pb.GetResponse),
        }
        for name in ("Get", "Describe", "List", "Drop"):
            handlers[name] = self._unary(name, None, None)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(_SERVICE, handlers),)
        )
        self.target = f"unix:{sock}"
        self._server.add_insecure_port(self.target)
        self._server.start()

    def _unary(self, name: str, req_t: type | None, resp_t: type | None) -> Any:
        call = self._channel.unary_unary(f"/{_SERVICE}/{name}", None, None)

        def handle(raw: bytes, context: grpc.ServicerContext) -> bytes:
            self.seen[name] = self.seen.get(name, 0) + 1
            if req_t is not None:
                raw = _as_old(req_t, raw)
            try:
                reply: bytes = call(raw)
            except grpc.RpcError as exc:
                failed: Any = exc  # a grpc.Call too
                context.set_trailing_metadata(failed.trailing_metadata())
                context.abort(failed.code(), failed.details() or "")
            return _as_old(resp_t, reply) if resp_t is not None else reply

        return grpc.unary_unary_rpc_method_handler(handle)

    def _stream(self, name: str, req_t: type) -> Any:
        call = self._channel.unary_stream(f"/{_SERVICE}/{name}", None, None)

        def handle(raw: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
            self.seen[name] = self.seen.get(name, 0) + 1
            yield from call(_as_old(req_t, raw))

        return grpc.unary_stream_rpc_method_handler(handle)

    def close(self) -> None:
        self._server.stop(0)
        self._channel.close()


@pytest.fixture
def old_sidecar(sidecar: SidecarProcess, tmp_path: Path) -> Iterator[OldSidecarProxy]:
    proxy = OldSidecarProxy(sidecar.target, tmp_path / "old.sock")
    yield proxy
    proxy.close()


def _task(target: str, ns: str, batch: int) -> TaskState:
    return TaskState(LocalContext(0, batch_id=batch), component="c", namespace=ns, sidecar=target)


def _stored(r: RedisServer, ns: str) -> dict[bytes, bytes]:
    return r.client().hgetall(data_key(ns, "c", 0))  # type: ignore[no-any-return]


def test_new_client_commits_and_restores_through_an_older_sidecar(
    old_sidecar: OldSidecarProxy, redis_server: RedisServer, namespace: str
) -> None:
    with _task(old_sidecar.target, namespace, 0) as s:
        assert not s._require_session().packed  # the proxy hid the advertisement
        for i in range(2_000):
            s[f"k{i}"] = {"i": i}
        s["gone"] = 1
    with _task(old_sidecar.target, namespace, 1) as s:
        del s["gone"]
        s["k0"] = "changed"
    assert old_sidecar.seen["Commit"] == 2
    stored = _stored(redis_server, namespace)
    assert len(stored) == 2_000 and b"gone" not in stored
    assert stored[b"k0"] == b'"changed"' and stored[b"k1999"] == b'{"i":1999}'

    _cache.sessions.clear()  # a new worker: it reads on demand through the old sidecar
    with _task(old_sidecar.target, namespace, 2) as s:
        assert s.info.on_demand
        assert s.get_many(["k0", "k7", "gone"]) == {"k0": "changed", "k7": {"i": 7}}
        assert old_sidecar.seen["MultiGet"] == 1 and "Restore" not in old_sidecar.seen
        assert dict(s) == {  # the rest of the state: a restore in the old form
            **{f"k{i}": {"i": i} for i in range(1, 2_000)},
            "k0": "changed",
        }
    assert old_sidecar.seen["Restore"] == 1


def test_current_sidecar_advertises_packed_commits(
    sidecar: SidecarProcess, old_sidecar: OldSidecarProxy, namespace: str
) -> None:
    """The proxy is what makes the difference: the same client packs against the real one."""
    seen: list[bool] = []
    for target, ns in ((sidecar.target, namespace), (old_sidecar.target, namespace + "-old")):
        _cache.sessions.clear()
        with _task(target, ns, 0) as s:
            seen.append(s._require_session().packed)
            s["a"] = 1
    assert seen == [True, False]


def test_operator_calls_an_older_sidecar_lacks_say_upgrade(
    old_sidecar: OldSidecarProxy, namespace: str
) -> None:
    """Read, Import and Doctor came later: the older sidecar answers UNIMPLEMENTED."""
    from taskstate.client import TaskStateError
    from taskstate.client.admin import AdminClient

    with _task(old_sidecar.target, namespace, 0) as s:
        s["a"] = 1
    admin = AdminClient(old_sidecar.target.replace("unix:", "unix://", 1), timeout_s=10)
    task = pb.TaskId(namespace=namespace, component="c", partition=0)
    with pytest.raises(TaskStateError, match="older than this client.*upgrade the sidecar"):
        admin.read(task)
    with pytest.raises(TaskStateError, match="older than this client"):
        admin.doctor()


def test_a_sidecar_replaced_by_an_older_one_gets_open_then_commit(
    sidecar: SidecarProcess,
    old_sidecar: OldSidecarProxy,
    redis_server: RedisServer,
    namespace: str,
) -> None:
    """A worker learnt from a newer sidecar that it serves OpenCommit; then an older one
    serves the socket (a rollback of the chart): the one call is refused UNIMPLEMENTED,
    and the block opens and commits as any other, once, and later blocks do so at once."""

    def block(target: str, batch: int, key: str) -> None:
        ctx = LocalContext(0, batch_id=batch)
        with TaskState(
            ctx, component="c", namespace=namespace, sidecar=target, open_at="exit"
        ) as s:
            s[key] = batch

    block(sidecar.target, 0, "a")  # the newer sidecar: it says it serves OpenCommit
    block(old_sidecar.target, 1, "b")
    assert (old_sidecar.seen.get("Open"), old_sidecar.seen.get("Commit")) == (1, 1)
    block(old_sidecar.target, 2, "c")  # its Open said nothing of OpenCommit
    assert (old_sidecar.seen.get("Open"), old_sidecar.seen.get("Commit")) == (2, 2)
    assert _stored(redis_server, namespace) == {b"a": b"0", b"b": b"1", b"c": b"2"}
