"""Hostile and broken requests against the real sidecar and a real redis-server.

Hypothesis generates requests for every RPC: random and invalid task ids, huge and
empty fields, invalid UTF-8 (hand-encoded, as no protobuf library would send it),
negative and enormous batches and epochs, unknown enum values, garbage msgpack, and
bytes that are not protobuf at all. At least 5,000 of them (`FUZZ_REQUESTS`).

Checked:
- every request gets a proper status: OK, or an error with a taskstate code. The only
  INTERNAL allowed is gRPC's own for bytes that do not parse as the request message;
- the sidecar never crashes and never logs an unexpected failure;
- the protected tasks, written before the fuzzing, are byte-for-byte unchanged.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import msgpack
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from taskstate.client import LocalContext, TaskState, _cache
from taskstate.proto import codes
from taskstate.proto import taskstate_pb2 as pb
from taskstate.sidecar.storage.redis.keys import namespace_pattern
from taskstate.testing import RedisServer, SidecarProcess

pytestmark = pytest.mark.integration

FUZZ_REQUESTS = int(os.environ.get("TASKSTATE_FUZZ_REQUESTS", "5000"))
PER_EXAMPLE = 10
PROTECTED = "protected-ns"
SERVICE = "/taskstate.v1.TaskStateService/"
UNARY = ["Open", "Commit", "Describe", "List", "Drop", "Import", "Doctor"]
STREAMS = ["Read"]
MESSAGES = {
    "Open": pb.OpenRequest, "Commit": pb.CommitRequest,
    "Describe": pb.DescribeRequest, "List": pb.ListRequest,
    "Drop": pb.DropRequest, "Import": pb.ImportRequest, "Doctor": pb.DoctorRequest,
    "Read": pb.ReadRequest,
}  # fmt: skip

# -- strategies --------------------------------------------------------------------------

INT64 = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([-1, 0, 1, 2, 2**53, 2**53 + 1, 2**63 - 1, -(2**63)]),
)
INT32 = st.one_of(st.integers(-(2**31), 2**31 - 1), st.sampled_from([-1, 0, 1, 2**31 - 1]))
NAMES = st.one_of(
    st.sampled_from(
        ["fz", "fz-b", "a", "", ".", "-x", "a/b", "a{b}", "ts:x", "*", "é", PROTECTED + "x"]
    ),
    st.text(max_size=20),
    st.text(alphabet="abc-_.{}/:* ", max_size=140),
).filter(lambda n: n != PROTECTED)


def _long(pattern: Any, low: int, high: int) -> Any:
    """Values of `low` to `high` items, a drawn pattern repeated. Drawn item by item (as
    `st.binary(min_size=100_000)` does), a blob cost hypothesis a choice per byte, ran past
    its limit of choices per example, and the example was thrown away: no request over
    100,000 bytes ever reached the sidecar, and the draws took most of the test's time."""
    return st.tuples(pattern, st.integers(low, high)).map(
        lambda t: (t[0] * (t[1] // len(t[0]) + 1))[: t[1]]
    )


TEXT = st.one_of(st.text(max_size=30), _long(st.text(alphabet="kx", min_size=1), 1000, 5000))
BLOB = st.one_of(st.binary(max_size=40), st.sampled_from([b"", b"null", b"{", b"\xff" * 3]),
                 _long(st.binary(min_size=1, max_size=64), 100_000, 300_000))  # fmt: skip


def _utf8(s: str) -> bool:
    try:
        s.encode()
    except UnicodeEncodeError:
        return False
    return True


SAFE_TEXT = TEXT.filter(_utf8)
SAFE_NAMES = NAMES.filter(_utf8)


@st.composite
def task_ids(draw: Any) -> pb.TaskId:
    return pb.TaskId(namespace=draw(SAFE_NAMES), component=draw(SAFE_NAMES), partition=draw(INT32))


@st.composite
def packed_blobs(draw: Any) -> bytes:
    ints = st.integers(-(2**63), 2**63 - 1)  # what msgpack can encode
    kind = draw(st.integers(0, 3))
    if kind == 0:
        raw: bytes = draw(st.binary(max_size=64))  # not msgpack
        return raw
    if kind == 1:  # msgpack of the wrong shape
        shape = st.one_of(ints, st.dictionaries(st.text(), ints), st.lists(ints))
        blob: bytes = msgpack.packb(draw(shape))
        return blob
    items = draw(st.lists(st.one_of(SAFE_TEXT, st.binary(max_size=20), ints, st.none()),
                          max_size=30))  # fmt: skip
    if kind == 3:
        items = items[: len(items) // 2 * 2]
    packed: bytes = msgpack.packb(items, use_bin_type=True)
    return packed


ENTRIES = st.lists(st.builds(pb.Entry, key=SAFE_TEXT, value=BLOB), max_size=20)
DURABILITY = st.integers(-3, 9)  # valid enum values and unknown ones


@st.composite
def structured(draw: Any) -> tuple[str, bytes]:
    method = draw(st.sampled_from(UNARY + STREAMS))
    m: Any = MESSAGES[method]()
    if hasattr(m, "task") and draw(st.booleans()):
        m.task.CopyFrom(draw(task_ids()))
    fields = m.DESCRIPTOR.fields_by_name
    for name, f in fields.items():
        if name == "task" or not draw(st.booleans()):
            continue
        if f.type == f.TYPE_INT64:
            setattr(m, name, draw(INT64))
        elif f.type == f.TYPE_INT32:
            setattr(m, name, draw(INT32))
        elif f.type == f.TYPE_BOOL:
            setattr(m, name, draw(st.booleans()))
        elif f.type == f.TYPE_ENUM:
            setattr(m, name, draw(DURABILITY))
        elif f.type == f.TYPE_STRING and not f.is_repeated:
            setattr(m, name, draw(SAFE_NAMES if name in ("namespace", "component") else SAFE_TEXT))
        elif f.type == f.TYPE_BYTES:
            setattr(m, name, draw(packed_blobs() if name.startswith("packed") else BLOB))
        elif name in ("upserts", "entries"):
            getattr(m, name).extend(draw(ENTRIES))
        elif f.type == f.TYPE_STRING:  # repeated keys / deletes
            getattr(m, name).extend(draw(st.lists(SAFE_TEXT, max_size=20)))
    return method, m.SerializeToString()


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(num: int, payload: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


@st.composite
def invalid_utf8(draw: Any) -> tuple[str, bytes]:
    """A task id whose namespace or component is not UTF-8 (hand-encoded protobuf)."""
    bad = draw(st.sampled_from([b"\xff", b"\xc3", b"a\xed\xa0\x80b", b"\x80" * 10]))
    ns, comp = (bad, b"c") if draw(st.booleans()) else (b"fz", bad)
    task = _field(1, ns) + _field(2, comp)
    method = draw(st.sampled_from(["Open", "Describe", "Commit", "Read", "Import"]))
    body = _field(1, task)
    if method == "Commit":  # and a deleted key that is not UTF-8
        body += _field(12, b"\x91\xa2k\xfe")
    return method, body


@st.composite
def garbage(draw: Any) -> tuple[str, bytes]:
    """Bytes that are not the request message, or a valid one with bytes flipped."""
    method = draw(st.sampled_from(UNARY + STREAMS))
    if draw(st.booleans()):
        return method, draw(st.binary(max_size=200))
    _, valid = draw(structured())
    if not valid:
        return method, b"\x0a"
    i = draw(st.integers(0, len(valid) - 1))
    return method, valid[:i] + bytes([valid[i] ^ draw(st.integers(1, 255))]) + valid[i + 1 :]


@st.composite
def plausible(draw: Any) -> tuple[str, bytes]:
    """Requests that pass validation often, so the fuzzing reaches the storage paths."""
    method = draw(st.sampled_from(["Open", "Commit", "Describe", "List", "Read", "Import",
                                   "Drop"]))  # fmt: skip
    m: Any = MESSAGES[method]()
    task = pb.TaskId(namespace=draw(st.sampled_from(["fz", "fz-b"])), component="c",
                     partition=draw(st.integers(0, 2)))  # fmt: skip
    if hasattr(m, "task"):
        m.task.CopyFrom(task)
    else:
        m.namespace = task.namespace
    if hasattr(m, "epoch"):
        m.epoch = draw(st.integers(0, 6))
    if method in ("Open", "Commit") and draw(st.booleans()):
        m.batch = draw(st.integers(0, 6))
    if method == "Commit":
        pair = st.tuples(st.sampled_from("abcdef"), st.text(min_size=1, max_size=30))
        upserts = draw(st.lists(pair, max_size=6))
        if upserts:
            m.packed_upserts = msgpack.packb([x for kv in upserts for x in kv])
        elif draw(st.booleans()):
            m.packed_upserts = draw(packed_blobs())
        deletes = draw(st.lists(st.sampled_from("ghij"), max_size=3))
        if deletes:
            m.packed_deletes = msgpack.packb(deletes)
    if method == "Read" and draw(st.booleans()):  # some keys (else the whole state)
        keys = draw(st.lists(st.sampled_from("abcdef"), min_size=1, max_size=3))
        m.packed_keys = msgpack.packb(keys)
    if method == "Import":
        m.entries.extend(draw(ENTRIES))
        m.replace = draw(st.booleans())
    return method, m.SerializeToString()


REQUESTS = st.one_of(plausible(), plausible(), structured(), invalid_utf8(), garbage())

# -- the run -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def target(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RedisServer, SidecarProcess]]:
    d = tmp_path_factory.mktemp("fuzz")
    redis = RedisServer(d / "redis").start()
    side = SidecarProcess(redis.url, d / "s.sock", extra=["--redis-deadline", "5"]).start()
    try:
        yield redis, side
    finally:
        side.kill()
        redis.stop()


def _protected_snapshot(redis: RedisServer) -> dict[bytes, Any]:
    c = redis.client()
    out: dict[bytes, Any] = {}
    for key in c.scan_iter(match=namespace_pattern(PROTECTED), count=1000):
        out[key] = c.dump(key)
    return out


def _call(channel: grpc.Channel, method: str, body: bytes) -> tuple[str, str, str]:
    """(status, taskstate code, details) of one raw call."""
    path = SERVICE + method
    try:
        if method in STREAMS:
            for _ in channel.unary_stream(path, None, None)(body, timeout=20):
                pass
        else:
            channel.unary_unary(path, None, None)(body, timeout=20)
        return "OK", "", ""
    except grpc.RpcError as exc:
        call: Any = exc
        md = dict(call.trailing_metadata() or ())
        return call.code().name, str(md.get(codes.METADATA_KEY, "")), call.details() or ""


def test_fuzzed_requests_never_crash_or_touch_other_tasks(
    target: tuple[RedisServer, SidecarProcess], tmp_path: Path
) -> None:
    redis, side = target
    _cache.sessions.clear()
    for part in range(3):  # the tasks nobody may touch, one with a rollback record
        for b in range(2):
            with TaskState(LocalContext(part, batch_id=b), component="c", namespace=PROTECTED,
                           sidecar=side.target) as s:  # fmt: skip
                s.update({f"k{i}": {"b": b, "p": part} for i in range(50)})
    before = _protected_snapshot(redis)
    assert len(before) == 3 * 4 + 1  # meta, data, undo, log per task; the namespace's index
    assert side.proc is not None
    pid = side.proc.pid

    channel = grpc.insecure_channel(
        side.target.replace("unix://", "unix:", 1),
        options=[("grpc.max_send_message_length", 64 << 20)],
    )
    seen: dict[tuple[str, str], int] = {}
    bad: list[tuple[str, str, str, str]] = []
    sent = [0]
    huge = [0]  # requests over 100,000 bytes (a value of 100,000-300,000 bytes in them)

    @seed(20261122)
    @settings(
        max_examples=FUZZ_REQUESTS // PER_EXAMPLE + 1,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.lists(REQUESTS, min_size=PER_EXAMPLE, max_size=PER_EXAMPLE))
    def run(batch: list[tuple[str, bytes]]) -> None:
        for method, body in batch:
            status, code, details = _call(channel, method, body)
            sent[0] += 1
            huge[0] += len(body) > 100_000
            seen[(method, status)] = seen.get((method, status), 0) + 1
            proper = status == "OK" or code in codes.ALL
            if status == "INTERNAL" and not code:
                proper = "deserializ" in details.lower()  # gRPC's own parse failure
            if code == codes.INTERNAL or status == "UNKNOWN" or not proper:
                bad.append((method, status, code, details[:200]))

    try:
        run()
    finally:
        channel.close()
    assert sent[0] >= FUZZ_REQUESTS, sent[0]
    assert huge[0] >= sent[0] // 100, (huge[0], sent[0])  # the size limits were reached
    assert not bad, bad[:10]
    assert side.proc.poll() is None and side.proc.pid == pid, "the sidecar died"
    log = side.log_path.read_text()
    assert "unexpected failure" not in log and "Traceback" not in log, log[-3000:]
    assert _protected_snapshot(redis) == before
    # and the protected tasks still work
    _cache.sessions.clear()
    with TaskState(LocalContext(0, batch_id=2), component="c", namespace=PROTECTED,
                   sidecar=side.target) as s:  # fmt: skip
        assert s["k0"] == {"b": 1, "p": 0} and len(s) == 50
    # the fuzzing reached every method and got past validation for some of them
    assert {m for m, _ in seen} == set(UNARY + STREAMS)
    assert sum(n for (m, status), n in seen.items() if status == "OK") > sent[0] // 10, seen
