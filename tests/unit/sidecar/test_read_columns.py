"""A Read's pages in the column form (ReadRequest.columns): cut like the packed form."""

from __future__ import annotations

from taskstate.proto import columns
from taskstate.sidecar.restore import CHUNK_BYTES, columns_chunks


def test_a_page_is_one_chunk_and_holds_every_pair_in_order() -> None:
    flat = [x for i in range(2000) for x in (f"k{i}".encode(), b'"v%d"' % i)]
    (chunk,) = columns_chunks(flat)
    assert columns.unpack(chunk.columns) == (flat[0::2], flat[1::2])
    assert not chunk.packed and not chunk.entries


def test_a_page_larger_than_a_chunk_is_cut_into_chunks_of_about_chunk_bytes() -> None:
    big = b'"' + b"x" * (CHUNK_BYTES // 3) + b'"'
    flat = [x for i in range(7) for x in (f"k{i}".encode(), big)]
    chunks = columns_chunks(flat)
    assert len(chunks) >= 3
    assert all(len(c.columns) <= CHUNK_BYTES + len(big) + 64 for c in chunks)
    keys, values = [], []
    for c in chunks:
        k, v = columns.unpack(c.columns)
        keys += k
        values += v
    assert (keys, values) == (flat[0::2], flat[1::2])


def test_pack_flat_is_pack_of_the_pairs() -> None:
    flat = [b"a", b"1", "é".encode(), b"", b"", b"null"]
    assert columns.pack_flat(flat) == columns.pack(flat[0::2], flat[1::2])
    assert columns.unpack(columns.pack_flat([])) == ([], [])


def test_a_flat_list_that_is_not_pairs_is_refused() -> None:
    import pytest

    with pytest.raises(ValueError, match="not key/value pairs"):
        columns.pack_flat([b"a"])
    with pytest.raises(ValueError, match="2 keys but 1 values"):
        columns.pack([b"a", b"b"], [b"1"])
