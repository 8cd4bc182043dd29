"""The data source's rows from a chunk's keys and stored values, as Spark gets them."""

from __future__ import annotations

import pyarrow as pa
import pytest

from taskstate.proto import chunks, envelope
from taskstate.spark_plugin.datasource.read import _entries, _rows, _text


def _pack(keys: list[bytes], values: list[bytes]) -> bytes:
    return chunks.pack(x for kv in zip(keys, values, strict=True) for x in kv)


def _rows_of(partition: int, keys: list[bytes], values: list[bytes], batch: int) -> pa.RecordBatch:
    entries = _entries(_pack(keys, values))
    assert entries is not None
    return _rows(partition, *entries, batch)


def test_plain_values_become_rows_with_no_expiry_and_version_1() -> None:
    rb = _rows_of(3, [b"a", "é".encode()], [b'{"n":1}', b"[2]"], batch=7)
    assert rb.to_pylist() == [
        {"partition": 3, "key": "a", "value": '{"n":1}', "batch": 7, "expires": None,
         "version": 1},
        {"partition": 3, "key": "é", "value": "[2]", "batch": 7, "expires": None,
         "version": 1},
    ]  # fmt: skip
    assert rb.schema.field("key").type == pa.string()
    assert rb.schema.field("value").type == pa.string()


def test_enveloped_values_give_their_expiry_and_version_and_the_bare_json() -> None:
    values = [envelope.wrap(b'{"n":1}', 1_700_000_000_000, 3), b"2", envelope.wrap(b"3", None, 2)]
    rb = _rows_of(0, [b"a", b"b", b"c"], values, batch=1)
    got = [(r["key"], r["value"], r["expires"], r["version"]) for r in rb.to_pylist()]
    assert got == [("a", '{"n":1}', 1_700_000_000_000, 3), ("b", "2", None, 1), ("c", "3", None, 2)]


def test_deleted_rows_have_no_value() -> None:
    keys = _text([b"gone", b"also"])
    rb = _rows(1, keys, pa.nulls(2, pa.string()), batch=4, deleted=True)
    assert [(r["key"], r["value"], r["deleted"]) for r in rb.to_pylist()] == [
        ("gone", None, True),
        ("also", None, True),
    ]


@pytest.mark.parametrize("where", ["key", "value"])
def test_bytes_that_are_not_utf8_are_refused(where: str) -> None:
    bad, good = [b"\xff\xfe"], [b"1"]
    blob = _pack(bad, good) if where == "key" else _pack(good, bad)
    with pytest.raises(pa.ArrowInvalid, match="UTF8|UTF-8"):
        _entries(blob)


def test_a_chunk_round_trips_into_arrow_columns() -> None:
    keys = [f"k{i}".encode() for i in range(1000)] + [b"", "ü".encode()]
    values = [b'"' + b"x" * i + b'"' for i in range(1000)] + [b"0", b"null"]
    got = _entries(_pack(keys, values))
    assert got is not None
    assert got[0].to_pylist() == [x.decode() for x in keys]
    assert got[1].to_pylist() == [x.decode() for x in values]
    assert _entries(b"") is None


@pytest.mark.parametrize("blob", [b"\xc1", b"\x91", chunks.pack([b"a"]) + b"x", b"\xa1a"])
def test_a_blob_that_is_not_a_packed_list_is_refused(blob: bytes) -> None:
    with pytest.raises(ValueError):
        _entries(blob)


def test_spilled_chunks_read_back_as_they_came() -> None:
    from taskstate.proto import taskstate_pb2 as pb
    from taskstate.spark_plugin.datasource.read import _Spill

    spill = _Spill()
    spill.add(pb.ReadChunk(packed=_pack([b"a"], [b"1"])))  # held in memory
    spill.add(pb.ReadChunk(packed=_pack([b"b"], [b"2"])))  # the rest: spilled
    spill.add(pb.ReadChunk(packed=_pack([b"c"], [b"3"]), packed_deletes=b"\x91\xa1d"))
    spill.add(pb.ReadChunk(packed_deletes=b"\x91\xa1e"))  # deletes only
    spill.rewind()
    got = [(None if e is None else (e[0].to_pylist(), e[1].to_pylist()), d) for e, d in spill]
    assert got == [
        ((["a"], ["1"]), b""),
        ((["b"], ["2"]), b""),
        ((["c"], ["3"]), b"\x91\xa1d"),
        (None, b"\x91\xa1e"),
    ]
