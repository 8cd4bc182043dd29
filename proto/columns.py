"""The column form of a Read's chunk (RestoreChunk.columns): keys and values ready for Arrow.

    u32 n | n u32 key lengths | n u32 value lengths | the keys' bytes | the values' bytes

Integers are little-endian. The sidecar builds it with one join of the bytes Redis gave it
(no step per key in Python); the data source turns it into two Arrow string columns
without one either (offsets are the lengths' running sum, the bytes are used in place).
msgpack, the restore's form, costs the reader an object per key and value (about 0.1 s
per 1,000,000 keys in a Spark worker, docs/benchmarks.md figure 13).
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Sequence

COUNT = struct.Struct("<I")
_U32 = "I"
if array(_U32).itemsize != 4:  # pragma: no cover - every platform CPython runs on
    raise ImportError("taskstate.proto.columns needs a 4-byte C unsigned int")


def lengths(items: Sequence[bytes]) -> array[int]:
    """The lengths of `items` as little-endian u32s (an OverflowError past 4 GiB)."""
    out = array(_U32, map(len, items))
    if sys.byteorder == "big":  # pragma: no cover - x86 and arm64 are little-endian
        out.byteswap()
    return out


def pack(keys: Sequence[bytes], values: Sequence[bytes]) -> bytes:
    """The column form of `keys` and `values` (as many of each)."""
    if len(keys) != len(values):
        raise ValueError(f"{len(keys)} keys but {len(values)} values")
    head = [COUNT.pack(len(keys)), lengths(keys).tobytes(), lengths(values).tobytes()]
    return b"".join([*head, *keys, *values])


def pack_flat(flat: Sequence[bytes], sizes: array[int] | None = None) -> bytes:
    """`pack(flat[0::2], flat[1::2])` of a flat list [key1, value1, ...].

    Such as Redis' HSCAN reply; `sizes`: `lengths(flat)`, when the caller has it already.
    """
    if len(flat) % 2:
        raise ValueError(f"a flat list of {len(flat)} items is not key/value pairs")
    if sizes is None:
        sizes = lengths(flat)
    # every part bytes: join's fast path (an array among them makes it ask each item for
    # its buffer, three times slower)
    head = [COUNT.pack(len(flat) // 2), sizes[0::2].tobytes(), sizes[1::2].tobytes()]
    return b"".join([*head, *flat[0::2], *flat[1::2]])


def unpack(blob: bytes) -> tuple[list[bytes], list[bytes]]:
    """(keys, values) of a column blob; ValueError when it is not one."""
    if len(blob) < COUNT.size:
        raise ValueError("a column chunk shorter than its count")
    (n,) = COUNT.unpack_from(blob)
    head = COUNT.size + 8 * n
    if len(blob) < head:
        raise ValueError(f"a column chunk of {len(blob)} bytes cannot hold {n} lengths")
    sizes = array(_U32, blob[COUNT.size : head])
    if sys.byteorder == "big":  # pragma: no cover
        sizes.byteswap()
    if head + sum(sizes) != len(blob):
        raise ValueError(f"a column chunk of {len(blob)} bytes, not {head + sum(sizes)}")
    out: list[bytes] = []
    at = head
    for size in sizes:
        out.append(blob[at : at + size])
        at += size
    return out[:n], out[n:]
