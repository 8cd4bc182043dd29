"""The packed forms inside the messages, one codec for both sides: msgpack arrays.

Every list of keys and values that travels between client and sidecar is one msgpack
array, packed and unpacked in one C call, never one protobuf object per key:

- **pairs** `[key1, value1, key2, value2, ...]`: a change set's upserts
  (CommitRequest.packed_upserts) and a chunk of state read (ReadChunk.packed);
- **keys** `[key1, key2, ...]`: a change set's deletes (CommitRequest.packed_deletes), a
  read's deleted keys (ReadChunk.packed_deletes), the keys a Read asks for
  (ReadRequest.packed_keys).

Keys are UTF-8 text. Values are the stored bytes (JSON text, or the expiry envelope of
`taskstate.proto.envelope`). Every item is a msgpack str (raw): the form Redis' Lua
cmsgpack reads and writes, so a change set goes to the commit script as it came, and a
page of Redis' HSCAN reply is packed as it came. An empty list is sent as empty bytes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgpack


def pack(items: Iterable[str | bytes]) -> bytes:
    """One array of raw msgpack strings; empty bytes for no items."""
    flat = list(items)
    return msgpack.packb(flat, use_bin_type=False) if flat else b""


def unpack(blob: bytes, text: bool) -> list[Any]:
    """The items of an array: `text`: decoded as UTF-8 (UnicodeDecodeError), else bytes.

    ValueError (or a msgpack error, a ValueError too) when `blob` is not an array.
    """
    if not blob:
        return []
    items = msgpack.unpackb(blob, raw=not text)
    if not isinstance(items, list):
        raise ValueError(f"a packed list that is a {type(items).__name__}")
    return items
