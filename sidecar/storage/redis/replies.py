"""Reading Redis replies: fields come back as bytes (or str, from some clients)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def fields(reply: Sequence[Any]) -> dict[str, Any]:
    """A script's reply of field/value pairs (`{'epoch', 7, 'batch', 3, ...}`) by name.

    The one place a script's answer is taken apart: callers read `f["epoch"]`, not `r[0]`.
    """
    return {text(reply[i]): reply[i + 1] for i in range(0, len(reply), 2)}


def text(v: bytes | str | None) -> str:
    """A reply field as text ('' for none)."""
    if v is None:
        return ""
    return v.decode() if isinstance(v, bytes) else v
