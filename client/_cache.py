"""The per-process cache of task claims and their committed state, bounded two ways.

`sessions` maps task ids to the `Session`s this process holds, most recently used last.
PySpark hands a task to whichever pooled worker is idle, so a worker caches the tasks it
served: when one comes back, Restore is skipped (same version) or brings the copy up to
date with only what changed since (a delta restore).

Two bounds, both per Python worker process:
- `TASKSTATE_CACHE_TASKS` sessions (a session without its data is small);
- `TASKSTATE_CACHE_BYTES` of cached state, estimated (`size_of`). Past it, the least
  recently used idle sessions lose their data (their claim stays: the next block of that
  attempt needs no Open, only a Restore).
The state of a block in progress is never evicted, so a worker holds at most the bound
plus the states of its running blocks, and an executor at most (its Python workers) x
(the bound) plus what its running tasks hold.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING

from ._errors import ConfigError
from ._session import Session

if TYPE_CHECKING:
    from ._claims import Claims
    from ._config import TaskStateConfig

log = logging.getLogger("taskstate.client")

sessions: dict[str, Session] = {}
# Spark runs one task per Python worker, but a job (or a test) may run tasks in threads.
sessions_lock = threading.Lock()
_warned: set[str] = set()  # tasks named in the "over the bound" warning already

# What a cached key costs in CPython beyond its encoded bytes: the dict slot and the key's
# str object; decoded JSON values take several times their encoding (a dict of two numbers:
# ~240 bytes against ~25 encoded). docs/benchmarks.md ("executor memory") checks the
# estimate against the workers' measured RSS.
ENTRY_BYTES = 100
VALUE_FACTOR = 4


def size_of(session: Session) -> int:
    """The estimated memory of a session's cached data (0 without data)."""
    data = session.data
    if not data:
        return 0
    return int(len(data) * (ENTRY_BYTES + VALUE_FACTOR * session.entry_bytes))


def cached_bytes() -> int:
    """The estimated memory of all the state this process holds (running blocks included)."""
    with sessions_lock:
        return _total()


def _total() -> int:
    return sum(size_of(s) for s in sessions.values())


def remember(task_id: str, session: Session, limit_tasks: int, limit_bytes: int) -> None:
    """Keep `session` as the most recently used, within the two bounds.

    Past `limit_tasks`, the oldest idle sessions of other attempts go (their cached state
    would only save a Restore). Sessions of the current attempt are kept: their next block
    needs no round trip (forgetting one would cost an Open, which the sidecar answers with
    the same claim, and a Restore). Past `limit_bytes`, the oldest idle sessions keep their
    claim but lose their data, whatever their attempt.
    """
    with sessions_lock:
        # (the next block of the attempt that was last here, as in a task's group calls,
        # is in its place already)
        if sessions.get(task_id) is not session or next(reversed(sessions)) != task_id:
            sessions.pop(task_id, None)
            sessions[task_id] = session
        excess = len(sessions) - max(limit_tasks, 1)
        if excess > 0:
            for key in [
                k
                for k, s in sessions.items()
                if not s.active and s.attempt_id != session.attempt_id
            ][:excess]:
                del sessions[key]
        total = _total()
        for s in list(sessions.values()):  # least recently used first
            if total <= limit_bytes:
                break
            if s is session or s.active or s.data is None or s.deferred:
                continue  # (a deferred copy carries held writes to its attempt's next block)
            total -= size_of(s)
            s.data = None
        own = size_of(session)
        if own > limit_bytes > 0 and task_id not in _warned:
            _warned.add(task_id)
            log.warning(
                "task %s: its state (about %d MiB) is larger than TASKSTATE_CACHE_BYTES "
                "(%d MiB), so it is not kept between batches and every batch restores it. "
                "Raise TASKSTATE_CACHE_BYTES above the largest task's state.",
                task_id,
                own >> 20,
                limit_bytes >> 20,
            )


def take(task_id: str, claims: Claims, config: TaskStateConfig) -> Session:
    """The session a new block of `task_id` runs in, active and remembered.

    The block reuses what this process holds of the task (`Claims.enter`); a block of a
    task that is open in this process already is refused.
    """
    prior = sessions.get(task_id)
    if prior is not None and prior.pid != os.getpid():
        prior = None
    if prior is not None and prior.active:
        raise ConfigError(
            f"task {task_id}: already open in this process; nested `with TaskState` "
            "blocks for the same component and partition are not allowed",
            task_id,
        )
    session = claims.enter(prior)
    session.active = True
    remember(task_id, session, config.cache_tasks, config.cache_bytes)
    return session
