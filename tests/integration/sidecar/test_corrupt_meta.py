"""Stored data that taskstate did not write: a clear CorruptStateError naming the task,
what is wrong and what to do. Never a sidecar crash, never a silently empty state, and
nothing changed. (Values that are not UTF-8 or JSON: test_restore_corrupt.py.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from taskstate.client import CorruptStateError, LocalContext, TaskState, _cache
from taskstate.sidecar.storage.redis.keys import data_key, meta_key
from taskstate.testing import RedisServer, SidecarProcess

from ..conftest import snapshot

pytestmark = pytest.mark.integration


def ts(side: SidecarProcess, ns: str, batch: int) -> TaskState:
    ctx = LocalContext(0, batch_id=batch)
    return TaskState(ctx, component="c", namespace=ns, sidecar=side.target)


def keys(ns: str) -> tuple[str, str]:
    return meta_key(ns, "c", 0), data_key(ns, "c", 0)


CORRUPTIONS: list[tuple[str, Callable[[Any, str], object], str]] = [
    ("layout", lambda c, ns: c.hset(keys(ns)[0], "layout", "2"), "layout version 2 is not 1"),
    ("epoch", lambda c, ns: c.hset(keys(ns)[0], "epoch", "abc"), "is not a number"),
    ("batch", lambda c, ns: c.hset(keys(ns)[0], "batch", "x1"), "is not a number"),
    ("ver", lambda c, ns: c.hset(keys(ns)[0], "ver", "zz"), "is not a number"),
    ("meta type", lambda c, ns: (c.delete(keys(ns)[0]), c.set(keys(ns)[0], "garbage")),
     "wrong Redis type"),
    ("data type", lambda c, ns: (c.delete(keys(ns)[1]), c.rpush(keys(ns)[1], "a", "b")),
     ":data holds a list, not a hash"),
]  # fmt: skip


@pytest.mark.parametrize(("what", "corrupt", "says"), CORRUPTIONS, ids=[c[0] for c in CORRUPTIONS])
def test_open_of_corrupt_task_names_it_and_changes_nothing(
    redis_server: RedisServer,
    sidecar: SidecarProcess,
    namespace: str,
    what: str,
    corrupt: Callable[[Any, str], None],
    says: str,
) -> None:
    with ts(sidecar, namespace, 0) as s:
        s.update({"a": 1, "b": 2})
    corrupt(redis_server.client(), namespace)
    before = snapshot(redis_server, namespace)
    _cache.sessions.clear()
    with pytest.raises(CorruptStateError) as info:
        ts(sidecar, namespace, 1).__enter__()
    msg = str(info.value)
    assert f"{namespace}/c/0" in msg and says in msg and "Operator action" in msg
    assert snapshot(redis_server, namespace) == before
    assert sidecar.proc is not None and sidecar.proc.poll() is None


@pytest.mark.parametrize("field", ["epoch", "batch", "undo_batch", "ver"])
def test_commit_onto_corrupt_metadata_is_refused_not_fenced(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str, field: str
) -> None:
    """The metadata is damaged while an attempt holds the task: its commit says so."""
    with ts(sidecar, namespace, 0) as s:
        s["a"] = 1
    live = ts(sidecar, namespace, 1)
    live.__enter__()
    live["a"] = 2
    redis_server.client().hset(keys(namespace)[0], field, "not-a-number")
    before = snapshot(redis_server, namespace)
    with pytest.raises(CorruptStateError, match=f"field {field} is not a number"):
        live.__exit__(None, None, None)
    assert snapshot(redis_server, namespace) == before
