"""The data source's rows from a chunk's flat (key, stored value) lists, as Spark gets them."""

from __future__ import annotations

import pyarrow as pa
import pytest

from taskstate.proto import envelope
from taskstate.spark_plugin.datasource.read import _rows


def test_plain_values_become_rows_with_no_expiry_and_version_1() -> None:
    rb = _rows(3, [b"a", "é".encode()], [b'{"n":1}', b"[2]"], batch=7)
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
    rb = _rows(0, [b"a", b"b", b"c"], values, batch=1)
    got = [(r["key"], r["value"], r["expires"], r["version"]) for r in rb.to_pylist()]
    assert got == [("a", '{"n":1}', 1_700_000_000_000, 3), ("b", "2", None, 1), ("c", "3", None, 2)]


def test_deleted_rows_have_no_value() -> None:
    rb = _rows(1, [b"gone", b"also"], [None, None], batch=4, deleted=True)
    assert [(r["key"], r["value"], r["deleted"]) for r in rb.to_pylist()] == [
        ("gone", None, True),
        ("also", None, True),
    ]


def test_bytes_that_are_not_utf8_are_refused() -> None:
    with pytest.raises(pa.ArrowInvalid, match="UTF8"):
        _rows(0, [b"\xff\xfe"], [b"1"], batch=0)
