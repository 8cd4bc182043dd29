"""Reading Redis replies: fields come back as bytes (or str, from some clients)."""

from __future__ import annotations


def text(v: bytes | str | None) -> str:
    """A reply field as text ('' for none)."""
    if v is None:
        return ""
    return v.decode() if isinstance(v, bytes) else v
