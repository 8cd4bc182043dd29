"""One task attempt's claim, as this Python process holds it, and the per-process cache.

A `Session` is what a process knows of a task after Open: the attempt it belongs to, the
fencing epoch, the committed version and (mirror mode) the state as of that version.
`sessions` maps task ids to the sessions this process holds, most recently used last.
"""

from __future__ import annotations

import os
import threading
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
    """A claim held by this process for one task attempt (module-level cache)."""

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
    pid: int = field(default_factory=os.getpid)


sessions: dict[str, Session] = {}
# Spark runs one task per Python worker, but a job (or a test) may run tasks in threads.
sessions_lock = threading.Lock()


def remember(task_id: str, session: Session, limit: int) -> None:
    """Keep `session` as the most recently used, within `limit` cached tasks.

    The oldest idle sessions of other attempts go first (their cached state would only
    save a Restore). Sessions of the current attempt are kept: their next block needs no
    round trip (forgetting one would cost an Open, which the sidecar answers with the same
    claim, and a Restore).
    """
    with sessions_lock:
        sessions.pop(task_id, None)
        sessions[task_id] = session
        excess = len(sessions) - max(limit, 1)
        for key in [
            k for k, s in sessions.items() if not s.active and s.attempt_id != session.attempt_id
        ][: max(excess, 0)]:
            del sessions[key]
