"""What a block writes with its values, and how it reads stored ones: expiry and versions.

A value written with a time to live, or by code of a schema version above 1, is stored in
an envelope (taskstate/proto/envelope.py: `~expiry:version~JSON`). Writing, the block
wraps each encoded value: its expiry is the batch's now (OpenResponse.now_ms, fixed at
the batch's first claim) plus the key's time to live; its version the block's `version`.
Reading, every stored value is unwrapped; one of an older version goes through the
upgrade functions, step by step, to the block's version; one of a newer version, or with
a missing step, is SchemaVersionError naming the task, the key and both versions.

Expiry needs nothing on the read side: the first claim of a batch deletes every key
expired by the batch's now (lua/open.lua), so every key a block can read is alive.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from taskstate.proto import envelope

from ._codec import JsonCodec
from ._errors import CodecError, ConfigError, SchemaVersionError
from ._wire import name_bad_utf8

Upgrade = Callable[[Any], Any]
NO_TTL: Any = object()  # Changes.ttls: the key takes the block's time to live
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_MS = datetime.timedelta(milliseconds=1)


class Schema:
    """One block's time to live and schema version, over its codec."""

    __slots__ = ("codec", "fast_json", "plain", "task", "ttl_ms", "upgrade", "version")

    def __init__(
        self,
        task: str,
        codec: JsonCodec,
        *,
        ttl_s: float | None = None,
        version: int = 1,
        upgrade: Mapping[int, Upgrade] | None = None,
    ) -> None:
        self.task = task
        self.codec = codec
        self.ttl_ms = _ttl_ms(task, ttl_s)
        self.version = _version(task, version)
        self.upgrade = dict(upgrade or {})
        bad = [v for v in self.upgrade if not isinstance(v, int) or not 1 <= v < self.version]
        if bad or not all(callable(f) for f in self.upgrade.values()):
            raise ConfigError(
                f"task {task}: upgrade={upgrade!r}: give a function for each older version "
                f"v (1 <= v < {self.version}) that turns a value of version v into one of "
                "version v + 1",
                task,
            )
        # plain: this block writes bare JSON (no time to live, version 1)
        self.plain = self.ttl_ms is None and self.version == 1
        # stored bare JSON needs no upgrade (version 1 code): the codec's fast paths hold
        self.fast_json = type(codec) is JsonCodec and self.version == 1

    def ttl_for(self, ttl_s: Any) -> int | None:
        """A key's time to live in ms: `s.set(..., ttl=...)`'s, or the block's (NO_TTL)."""
        return self.ttl_ms if ttl_s is NO_TTL else _ttl_ms(self.task, ttl_s)

    def wrap(self, encoded: bytes, now_ms: int, ttl_ms: int | None) -> bytes:
        """The stored form of a value this block writes."""
        expires = None if ttl_ms is None else now_ms + ttl_ms
        return envelope.wrap(encoded, expires, self.version)

    def decode_stored(self, task: str, key: str, stored: bytes) -> Any:
        """A value a restore left as its stored bytes (`_wire.decode_chunk`), decoded now.

        Bare JSON (the common case) in one orjson call; an envelope straight to `decode`;
        bytes that are neither, the same CodecError as a read's (`_reads`): not UTF-8 text,
        or not JSON, naming the key.
        """
        if stored[:1] != envelope.MARK:
            try:
                return orjson.loads(stored)
            except orjson.JSONDecodeError:
                pass
        try:
            return self.decode(task, key, stored)
        except CodecError:
            name_bad_utf8(task, [key.encode(), stored])
            raise

    def decode(self, task: str, key: str, stored: bytes | str) -> Any:
        """A stored value as this block reads it: unwrapped, decoded, upgraded."""
        raw = stored.encode() if isinstance(stored, str) else stored
        try:
            _, version, body = envelope.parse(raw)
        except ValueError as exc:
            raise CodecError(
                f"task {task}: stored value of key {key!r}: {exc}; it was not written by "
                f"taskstate. Operator action: inspect it with `taskstate show {task}`.",
                task,
            ) from None
        value = self.codec.decode(task, key, body)
        if version == self.version:
            return value
        if version > self.version:
            raise SchemaVersionError(
                f"task {task}: key {key!r} holds a value of schema version {version}, newer "
                f"than this code's version {self.version}. Nothing was written. Run the "
                "code that wrote it (or a newer one), or give this code that version and "
                "the upgrades to it.",
                task,
            )
        for v in range(version, self.version):
            step = self.upgrade.get(v)
            if step is None:
                raise SchemaVersionError(
                    f"task {task}: key {key!r} holds a value of schema version {version}; "
                    f"this code reads version {self.version} and has no upgrade from "
                    f"version {v} to {v + 1} (upgrade={{{v}: ...}}). Nothing was written.",
                    task,
                )
            value = step(value)
        return value


def event_time_ms(task: str, now: Any) -> int | None:
    """TaskState(now=...): epoch milliseconds, or an aware datetime; None: processing time."""
    if now is None:
        return None
    if isinstance(now, datetime.datetime):
        if now.tzinfo is None:
            raise ConfigError(
                f"task {task}: now={now!r} has no time zone; pass an aware datetime "
                "(tzinfo=datetime.UTC) or epoch milliseconds",
                task,
            )
        # exact: float seconds * 1000 can land just below the millisecond (1.001 s -> 1000)
        return (now - _EPOCH) // _MS
    if isinstance(now, bool) or not isinstance(now, int):
        raise ConfigError(
            f"task {task}: now={now!r}: give the event time as epoch milliseconds (int) or "
            "an aware datetime",
            task,
        )
    return now


def _ttl_ms(task: str, ttl_s: Any) -> int | None:
    if ttl_s is None:
        return None
    if isinstance(ttl_s, bool) or not isinstance(ttl_s, int | float) or not ttl_s > 0:
        raise ConfigError(
            f"task {task}: ttl={ttl_s!r}: a time to live is a positive number of seconds "
            "(None: the key never expires)",
            task,
        )
    return max(1, round(ttl_s * 1000))


def _version(task: str, version: Any) -> int:
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ConfigError(f"task {task}: version={version!r}: a schema version is 1, 2, ...", task)
    return version
