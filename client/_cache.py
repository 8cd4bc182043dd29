"""The per-process cache of task claims and their committed state.

`sessions` maps task ids to the `Session`s this process holds, most recently used last.
PySpark hands a task to whichever pooled worker is idle, so a worker caches the tasks it
served: when one comes back, Restore is skipped (same version) or brings the copy up to
date with only what changed since (a delta restore).
"""

from __future__ import annotations

import threading

from ._session import Session

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
