"""One check for any hop that can lose a commit's answer after the commit landed.

Between the sidecar and Redis (proxy.LossyProxy) or between the client and the sidecar
(the frame lane's dropping proxy in test_frame_lane.py): batch 4's commit is applied and
its answer lost, the client retries it, and the result must be that of one commit, with
the rollback record of batch 4 still holding the state before it.
"""

from __future__ import annotations

from collections.abc import Callable

from taskstate.client import LocalContext, TaskState, _cache
from taskstate.sidecar.storage.redis.keys import data_key, meta_key
from taskstate.testing import RedisServer


def check_a_lost_answer_counts_once(
    redis: RedisServer, namespace: str, target: str, arm: Callable[[], None]
) -> None:
    """Commit batch 3, then batch 4 with `arm()` called inside its block."""

    def ts(batch: int) -> TaskState:
        return TaskState(LocalContext(0, batch_id=batch), component="c", namespace=namespace,
                         sidecar=target)  # fmt: skip

    def data() -> dict[bytes, bytes]:
        return redis.client().hgetall(data_key(namespace, "c", 0))  # type: ignore[no-any-return]

    meta = meta_key(namespace, "c", 0)
    with ts(3) as s:
        s.update({"a": 1, "b": 2, "gone": 0})
    before = data()
    ver_before = int(redis.client().hget(meta, "ver"))
    with ts(4) as s:
        arm()
        s["a"] = 10
        s["c"] = 3
        del s["gone"]
    # applied, then retried: the script ran twice, with the effect of once
    assert int(redis.client().hget(meta, "ver")) == ver_before + 2
    assert data() == {b"a": b"10", b"b": b"2", b"c": b"3"}
    # and the rollback record still holds the state before batch 4
    _cache.sessions.clear()
    with ts(4) as s:
        assert s.info.rolled_back
    assert data() == before
