"""The JSON codec (orjson). Errors name the key and the offending type."""

from __future__ import annotations

import math
from typing import Any

import orjson

from ._errors import CodecError

_OPTS = orjson.OPT_SERIALIZE_NUMPY


def _non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_non_finite(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_non_finite(v) for v in value)
    return False


def _bad_type(value: Any) -> str:
    """The innermost type orjson refused, for the message."""
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                return f"dict key of type {type(k).__name__}"
            inner = _bad_type(v)
            if inner:
                return inner
        return ""
    if isinstance(value, list | tuple):
        for v in value:
            inner = _bad_type(v)
            if inner:
                return inner
        return ""
    try:
        orjson.dumps(value, option=_OPTS)
    except TypeError:
        return type(value).__name__
    return ""


class JsonCodec:
    """Values are JSON: dict (str keys), list, str, int (64-bit), finite float, bool, None."""

    name = "json"

    def encode(self, task: str, key: Any, value: Any) -> bytes:
        """Encode one value; CodecError names the task, the key and the type."""
        if not isinstance(key, str):
            raise CodecError(
                f"task {task}: key {key!r} has type {type(key).__name__}; keys must be str. "
                "Nothing was sent.",
                task,
            )
        try:
            out = orjson.dumps(value, option=_OPTS)
        except TypeError as exc:
            bad = _bad_type(value) or type(value).__name__
            raise CodecError(
                f"task {task}: the value for key {key!r} cannot be encoded as JSON: it holds a "
                f"{bad} ({exc}). Nothing was sent. Store dict, list, str, int, float, bool or "
                "None (convert sets to lists, datetimes to strings).",
                task,
            ) from None
        if b"null" in out and _non_finite(value):
            raise CodecError(
                f"task {task}: the value for key {key!r} holds NaN or infinity, which JSON "
                "cannot represent (it would come back as null). Nothing was sent.",
                task,
            )
        return out

    def decode(self, task: str, key: str, data: bytes) -> Any:
        """Decode one stored value; CodecError names the task, the key and the fix."""
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise CodecError(
                f"task {task}: stored value of key {key!r} is not valid JSON ({exc}); it was "
                "not written by taskstate's json codec. Operator action: inspect it with "
                f"`taskstate show {task}` and fix or drop the key.",
                task,
            ) from None


CODECS = {"json": JsonCodec()}
