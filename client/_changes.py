"""Write tracking: what a block changed, as the change set its commit sends.

Assignments are recorded with their encoding (a value that cannot change in place is
encoded once, at assignment); a dict or list is encoded again at commit, as it may have
been changed in place since; a dict or list that was only read is compared with its
encoding when first read, so `s["k"]["n"] += 1` is committed too. With a time to live or
a schema version (`_schema.py`), what is committed is the encoding in its envelope: the
block wraps it at assignment, or here at commit (`wrap`), with the key's own time to
live (`ttls`, from `s.set(..., ttl=...)`) or the block's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._codec import JsonCodec
from ._schema import NO_TTL

MISSING: Any = object()
REENCODE: Any = object()  # in Changes.written: a mutable value, encoded at commit
# Values of these types cannot change in place, and orjson encodes them exactly as the
# JSON codec does (an int beyond 64 bits raises and takes the codec's path for its error).
SCALARS = (str, int, bool, type(None))


def is_mutable(value: Any) -> bool:
    """Whether a value can change in place (and so must be encoded again at commit)."""
    return isinstance(value, dict | list)


class Changes:
    """The keys a block wrote or read mutable values of, since its last commit."""

    __slots__ = ("codec", "snap", "task", "ttls", "written")

    def __init__(self, task: str, codec: JsonCodec) -> None:
        self.task = task
        self.codec = codec
        # key -> encoding at write; None: deleted; REENCODE: a dict/list, encoded at commit
        self.written: dict[str, bytes | None] = {}
        self.snap: dict[str, bytes] = {}  # mutable values read: encoding when first read
        self.ttls: dict[str, Any] = {}  # key -> its time to live in ms (s.set(ttl=...))

    def collect(
        self, data: dict[str, Any], wrap: Callable[[bytes, Any], bytes] | None = None
    ) -> tuple[list[tuple[str, bytes]], list[str]]:
        """The change set against `data` (the block's view): upserts and deletes.

        `wrap(encoded, ttl)`: the stored form of a value encoded here (None: the encoding
        itself); `ttl` the key's own time to live (NO_TTL: the block's).
        """
        upserts: list[tuple[str, bytes]] = []
        deletes: list[str] = []
        enc = self.codec.encode
        task = self.task
        get = data.get
        add = upserts.append
        for key, cached in self.written.items():
            if cached.__class__ is bytes:
                add((key, cached))  # a value that cannot have changed since its assignment
            elif cached is None:
                deletes.append(key)
            else:  # REENCODE: a dict or list, maybe changed in place after the assignment
                encoded = enc(task, key, get(key))
                add((key, encoded if wrap is None else wrap(encoded, self.ttls.get(key, NO_TTL))))
        for key, before in self.snap.items():
            if key in self.written:
                continue
            value = get(key, MISSING)
            if value is MISSING:
                continue
            now = enc(task, key, value)
            if now != before:  # changed in place: written, with the block's time to live
                upserts.append((key, now if wrap is None else wrap(now, NO_TTL)))
        return upserts, deletes

    def clear(self) -> None:
        """Forget everything (after a commit, or when the block's changes are discarded)."""
        self.written.clear()
        self.snap.clear()
        self.ttls.clear()
