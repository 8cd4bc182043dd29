"""Both rollback record modes restore the state before a replayed batch byte for byte."""

from __future__ import annotations

import pytest

from taskstate.client import LocalContext, TaskState, _cache
from taskstate.sidecar.storage.redis.keys import data_key, meta_key
from taskstate.testing import RedisServer, SidecarProcess

pytestmark = pytest.mark.integration


def _block(
    target: str, ns: str, batch: int | LocalContext, change: dict[str, object], drop: list[str]
) -> None:
    ctx = batch if isinstance(batch, LocalContext) else LocalContext(0, batch_id=batch)
    with TaskState(ctx, component="c", namespace=ns, sidecar=target) as s:
        s.update(change)
        for k in drop:
            del s[k]


@pytest.mark.parametrize(
    ("changed", "mode"),
    [(10, "fields"), (400, "copy")],  # of a 1,000-key state
)
def test_replay_rolls_back_exactly_in_each_mode(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str, changed: int, mode: str
) -> None:
    c = redis_server.client()
    _block(sidecar.target, namespace, 0, {f"k{i}": i for i in range(1000)}, [])
    before = c.hgetall(data_key(namespace, "c", 0))
    # batch 1: change some keys, add some, delete some; in two commits (group-scoped)
    _block(sidecar.target, namespace, 1, {f"k{i}": -i for i in range(changed)}, ["k999"])
    assert c.hget(meta_key(namespace, "c", 0), "undo_mode").decode() == mode
    with TaskState(LocalContext(0, batch_id=1), component="c", namespace=namespace,
                   sidecar=sidecar.target) as s:  # fmt: skip
        pass  # a retry of batch 1 by a new attempt: rolls back first
    assert s.info.rolled_back
    assert c.hgetall(data_key(namespace, "c", 0)) == before
    _cache.sessions.clear()
    # the retry's own commits are recorded again: two blocks of one attempt (group-scoped)
    attempt = LocalContext(0, batch_id=1)
    _block(sidecar.target, namespace, attempt, {f"k{i}": -i for i in range(changed)}, ["k999"])
    _block(sidecar.target, namespace, attempt, {"new": 1, "k0": "again"}, ["k998"])
    with TaskState(LocalContext(0, batch_id=1), component="c", namespace=namespace,
                   sidecar=sidecar.target):  # fmt: skip
        pass
    assert c.hgetall(data_key(namespace, "c", 0)) == before  # both blocks rolled back


def test_copy_mode_rollback_of_a_first_batch_leaves_no_data(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str
) -> None:
    c = redis_server.client()
    _block(sidecar.target, namespace, 0, {"a": 1, "b": 2}, [])
    assert c.hget(meta_key(namespace, "c", 0), "undo_mode") == b"copy"
    with TaskState(LocalContext(0, batch_id=0), component="c", namespace=namespace,
                   sidecar=sidecar.target) as s:  # fmt: skip
        assert dict(s) == {}
    assert c.exists(data_key(namespace, "c", 0)) == 0


def test_a_large_change_set_after_a_small_first_one_turns_the_batch_to_copy_mode(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str
) -> None:
    """The flush of held group changes after a small first group: the record becomes a
    copy of the state before the batch, and a replay still restores it byte for byte."""
    c = redis_server.client()
    _block(sidecar.target, namespace, 0, {f"k{i}": i for i in range(1000)}, [])
    before = c.hgetall(data_key(namespace, "c", 0))
    attempt = LocalContext(0, batch_id=1)
    # a small first commit: fields mode, k0 changed, k999 deleted, n1 added
    _block(sidecar.target, namespace, attempt, {"k0": "x", "n1": 1}, ["k999"])
    assert c.hget(meta_key(namespace, "c", 0), "undo_mode") == b"fields"
    # a large one in the same batch: k0 changed again, k998 deleted, n2 added, 500 changed
    _block(sidecar.target, namespace, attempt,
           {"k0": "y", "n2": 2, **{f"k{i}": -i for i in range(1, 500)}}, ["k998"])  # fmt: skip
    assert c.hget(meta_key(namespace, "c", 0), "undo_mode") == b"copy"
    # and a small one after it: nothing more to record
    _block(sidecar.target, namespace, attempt, {"n3": 3, "k1": "z"}, ["k997"])
    _cache.sessions.clear()
    with TaskState(LocalContext(0, batch_id=1), component="c", namespace=namespace,
                   sidecar=sidecar.target) as s:  # fmt: skip
        pass  # a retry of batch 1 by a new attempt: rolls back first
    assert s.info.rolled_back
    assert c.hgetall(data_key(namespace, "c", 0)) == before
