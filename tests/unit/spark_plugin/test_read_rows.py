"""The data source's rows from a chunk's keys and stored values, as Spark gets them."""

from __future__ import annotations

import pyarrow as pa
import pytest

from taskstate.proto import columns, envelope
from taskstate.spark_plugin.datasource.read import _columns, _rows, _text


def _rows_of(partition: int, keys: list[bytes], values: list[bytes], batch: int) -> pa.RecordBatch:
    return _rows(partition, *_columns(columns.pack(keys, values)), batch)


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
    blob = columns.pack(bad, good) if where == "key" else columns.pack(good, bad)
    with pytest.raises(pa.ArrowInvalid, match="UTF8|UTF-8"):
        _columns(blob)
    with pytest.raises(pa.ArrowInvalid, match="UTF8|UTF-8"):
        _text(bad)  # the msgpack form's path (a sidecar older than the column form)


def test_the_column_form_round_trips_and_its_arrow_columns_use_the_chunks_bytes() -> None:
    keys = [f"k{i}".encode() for i in range(1000)] + [b"", "ü".encode()]
    values = [b'"' + b"x" * i + b'"' for i in range(1000)] + [b"0", b"null"]
    blob = columns.pack(keys, values)
    assert columns.unpack(blob) == (keys, values)
    k, v = _columns(blob)
    assert k.to_pylist() == [x.decode() for x in keys]
    assert v.to_pylist() == [x.decode() for x in values]
    assert _columns(columns.pack([], [])) == (_text([]), _text([]))


@pytest.mark.parametrize(
    "blob",
    [
        b"\x01\x00",  # shorter than its count
        columns.pack([b"a"], [b"1"])[:-1],  # a byte short
        columns.pack([b"a"], [b"1"]) + b"x",  # a byte over
        columns.COUNT.pack(5) + b"\0" * 8,  # fewer lengths than the count
        columns.COUNT.pack(1) + (2**32 - 1).to_bytes(4, "little") + b"\0\0\0\0a",  # a huge length
    ],
)
def test_a_blob_that_is_not_a_column_chunk_is_refused(blob: bytes) -> None:
    with pytest.raises(ValueError, match="column chunk"):
        _columns(blob)
    with pytest.raises(ValueError, match="column chunk"):
        columns.unpack(blob)


def test_spilled_chunks_read_back_in_either_form() -> None:
    import msgpack

    from taskstate.proto import taskstate_pb2 as pb
    from taskstate.spark_plugin.datasource.read import _Spill

    spill = _Spill()
    spill.add(pb.RestoreChunk(columns=columns.pack([b"a"], [b"1"])))  # held in memory
    spill.add(pb.RestoreChunk(columns=columns.pack([b"b"], [b"2"])))  # the rest: spilled
    # an older sidecar's msgpack chunk, with deleted keys
    spill.add(pb.RestoreChunk(packed=msgpack.packb([b"c", b"3"]), packed_deletes=b"\x91\xa1d"))
    spill.add(pb.RestoreChunk(packed_deletes=b"\x91\xa1e"))  # deletes only
    spill.rewind()
    got = [(None if e is None else (e[0].to_pylist(), e[1].to_pylist()), d) for e, d in spill]
    assert got == [
        ((["a"], ["1"]), b""),
        ((["b"], ["2"]), b""),
        ((["c"], ["3"]), b"\x91\xa1d"),
        (None, b"\x91\xa1e"),
    ]
