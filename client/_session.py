"""One task attempt's claim, as this Python process holds it.

A `Session` is what a process knows of a task after Open: the attempt it belongs to, the
fencing epoch, the committed version and (mirror mode) the state as of that version. The
sessions a process holds are cached in `_cache.py`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class OpenInfo:
    """What entering the block found: for logs, metrics and tests."""

    epoch: int
    committed_batch: int
    size: int
    version: str
    rolled_back: bool
    rolled_back_keys: int
    restored: bool
    reused_claim: bool
    # the restore sent only what changed since the version this process held (delta)
    delta: bool = False
    restored_keys: int = 0  # keys the restore sent (a delta's changed and deleted keys)


@dataclass
class Session:
    """A claim held by this process for one task attempt (cached: `_cache.sessions`)."""

    attempt_id: str  # SCOPE:N (client/_context.py): the same in every serving process
    batch: int | None
    epoch: int
    version: str
    data: dict[str, Any] | None
    position: bytes | None
    info: OpenInfo
    # the sidecar reads CommitRequest.packed_* (an older one would ignore them unread)
    packed: bool = False
    active: bool = False
    # encoded bytes per key of the state, as last restored or first committed (0: not
    # known yet): what `_cache.size_of` estimates the cached data's memory from
    entry_bytes: float = 0.0
    pid: int = field(default_factory=os.getpid)
