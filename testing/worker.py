"""What a test (or a fault harness) may want to see of a worker's taskstate internals.

TaskState's public face is a MutableMapping; these helpers answer questions tests ask
about the worker process it runs in, so that no test has to reach into private modules:
which version of a task this worker holds, whether a block's changes are held for the
executor plugin's flush, and starting afresh as a new Python worker would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from taskstate.client import TaskState
from taskstate.client._cache import sessions
from taskstate.client._context import TaskIdentity, identity
from taskstate.client.address import ancestors as _ancestors


def forget_cached_state() -> None:
    """Drop every claim and copy this process holds: it is now a fresh Python worker."""
    sessions.clear()


def held_version(task_id: str) -> str | None:
    """The version of the whole, committed copy of a task this process holds, if any.

    None when it holds none, only part of the state (it reads on demand), or a copy
    with changes held for the plugin's flush (not a committed state).
    """
    prior = sessions.get(task_id)
    if prior is None or prior.data is None or not prior.complete or prior.deferred:
        return None
    return prior.version


def holds_deferred(state: TaskState) -> bool:
    """Whether a block's changes (its attempt's, in this process) wait for the flush."""
    session = state._session  # noqa: SLF001 - the one place tests look inside
    return session is not None and session.deferred


def task_attempt(state: TaskState) -> int:
    """Spark's task attempt id of a block (TaskContext.taskAttemptId)."""
    return state._ident.task_attempt  # noqa: SLF001 - the one place tests look inside


def task_identity(ctx: Any) -> TaskIdentity:
    """What TaskState reads of a task context: partition, batch id, attempt."""
    return identity(ctx)


def ancestors(pid: int) -> list[int]:
    """The process's parent, grandparent, ... (the executor JVM of a Python worker)."""
    return _ancestors(pid)


def before_flush(hook: Callable[[int], None]) -> None:
    """Run `hook(task attempt)` in this worker just before it flushes an attempt's changes.

    The flush the executor plugin asks for: where a fault harness strikes.
    """
    from taskstate.client._buffer import buffer

    flush = buffer.flush

    def flush_after_hook(attempt: int) -> Any:
        hook(attempt)
        return flush(attempt)

    buffer.flush = flush_after_hook  # type: ignore[method-assign]
