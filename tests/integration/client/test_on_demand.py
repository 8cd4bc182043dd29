"""On-demand reads: a worker without a copy of the task reads only the keys it touches.

Real redis-server, real sidecar, real worker processes (`attempt_worker.Worker`, each its
own claim cache, as PySpark's pooled workers). Each test checks what the worker reads
against what Redis holds, exactly, and which round trips it took (the sidecar's metrics).
"""

from __future__ import annotations

from typing import Any

import pytest

from taskstate.client import ConfigError, FencedError, LocalContext, TaskState, _cache, _reads
from taskstate.client._reads import MISS_FRACTION, MISS_MIN
from taskstate.client._session import RECENT
from taskstate.sidecar.storage.values import LOG_MIN
from taskstate.testing import RedisServer, SidecarProcess

from ..attempt_worker import Worker
from ..conftest import stored

pytestmark = pytest.mark.integration


def ts(side: SidecarProcess, ns: str, batch: int, ctx: LocalContext | None = None) -> TaskState:
    ctx = ctx or LocalContext(0, batch_id=batch)
    return TaskState(ctx, component="c", namespace=ns, sidecar=side.target)


def counters(side: SidecarProcess) -> dict[str, float]:
    m = side.metrics()
    return {
        "found": m.get('taskstate_get_keys_total{outcome="found"}', 0.0),
        "absent": m.get('taskstate_get_keys_total{outcome="absent"}', 0.0),
        "gets": m.get('taskstate_requests_total{code="ok",method="Get"}', 0.0),
        "restores": m.get('taskstate_requests_total{code="ok",method="Restore"}', 0.0),
        "not_covered": m.get('taskstate_restores_total{kind="not_covered"}', 0.0),
    }


def moved(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in before}


def test_a_cold_worker_reads_what_it_touches_and_commits_exactly(
    redis_server: RedisServer, metered_sidecar: SidecarProcess, namespace: str
) -> None:
    state = {f"k{i:04d}": {"n": i} for i in range(5_000)}
    with ts(metered_sidecar, namespace, 0) as s:
        s.update(state)
    _cache.sessions.clear()
    before = counters(metered_sidecar)
    with ts(metered_sidecar, namespace, 1) as s:
        assert s.info.on_demand and not s.info.restored and s.info.size == 5_000
        got = s.get_many(["k0001", "k0002", "k4999", "nope", "k0001"])
        assert got == {"k0001": {"n": 1}, "k0002": {"n": 2}, "k4999": {"n": 4999}}
        s["k0001"]["n"] += 100  # changed in place after an on-demand read: committed
        s["k0003"] = "written unread"  # a write needs no read
        del s["k0004"]  # a delete reads the key first (KeyError if absent)
        with pytest.raises(KeyError):
            del s["nope"]
        assert s.get("k0005") == {"n": 5} and "k0006" in s and "nope2" not in s
        assert "k0004" not in s  # deleted here: not read again from the state
    m = moved(before, counters(metered_sidecar))
    # one batch of 4 keys, then k0004, k0005, k0006 and nope2 one by one; no restore
    assert m == {"found": 6, "absent": 2, "gets": 5, "restores": 0, "not_covered": 0}
    want: dict[str, Any] = {k: v for k, v in state.items() if k != "k0004"}
    want["k0001"] = {"n": 101}
    want["k0003"] = "written unread"
    raw = stored(redis_server, namespace)
    assert raw.keys() == want.keys() and raw["k0001"] == b'{"n":101}'
    assert raw["k0003"] == b'"written unread"'

    # the partial copy stays for the next batch on this worker: no round trip for it
    held = _cache.sessions[f"{namespace}/c/0"]
    assert not held.complete and held.absent >= {"nope", "nope2", "k0004"}
    before = counters(metered_sidecar)
    with ts(metered_sidecar, namespace, 2) as s:
        assert not s.info.on_demand and s["k0001"] == {"n": 101} and "k0004" not in s
        assert moved(before, counters(metered_sidecar))["gets"] == 0
        # iteration needs the whole state: the rest comes in one restore, merged with
        # what this block changed and has not committed
        s["k0002"] = "mine"
        del s["k0007"]
        assert len(s) == 4_998 and s.info.restored and s.info.size == 4_998
        everything = dict(s)
    want["k0002"] = "mine"
    del want["k0007"]
    assert everything == want
    assert moved(before, counters(metered_sidecar))["restores"] == 1
    assert stored(redis_server, namespace).keys() == want.keys()


def test_an_older_attempt_never_reads_a_newer_attempts_commit(
    metered_sidecar: SidecarProcess, namespace: str
) -> None:
    with ts(metered_sidecar, namespace, 0) as s:
        s.update({"a": 1, "b": 1, "c": 1})
    _cache.sessions.clear()
    old = ts(metered_sidecar, namespace, 1)
    old.__enter__()
    assert old.info.on_demand and old["a"] == 1  # read before the newer attempt
    zombie = _cache.sessions.pop(old.task_id)
    with ts(metered_sidecar, namespace, 1) as new:  # a retry of batch 1 in another worker
        new["b"] = 2
        new["d"] = 2
    _cache.sessions[old.task_id] = zombie
    # every read the older attempt still makes is fenced, never the newer values
    for read in (lambda: old["b"], lambda: old.get_many(["b", "d"]), lambda: "d" in old):
        with pytest.raises(FencedError):
            read()
    with pytest.raises(FencedError):
        len(old)  # loading the rest: a restore, fenced too
    assert old["a"] == 1  # what it read under its own epoch stays its own
    with pytest.raises(FencedError):
        old.__exit__(None, None, None)  # and its commit is fenced, as ever


def read_one_by_one(side: SidecarProcess, namespace: str, n: int, reads: int) -> dict[str, float]:
    """Commit `n` keys, then read `reads` of them one by one on a cold worker (it must
    end with the whole state); the sidecar's counters that moved meanwhile."""
    with ts(side, namespace, 0) as s:
        s.update({f"k{i}": i for i in range(n)})
    _cache.sessions.clear()
    before = counters(side)
    with ts(side, namespace, 1) as s:
        total = sum(s[f"k{i}"] for i in range(reads))
        assert total == sum(range(reads)) and s.info.restored
    return moved(before, counters(side))


def test_single_reads_past_a_share_of_the_state_load_the_rest(
    metered_sidecar: SidecarProcess, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # restores timed as very slow: the count decides, max(MISS_MIN, n / MISS_FRACTION) = 156
    monkeypatch.setattr(_reads, "_restore_rate", [1.0])
    n = 20_000
    m = read_one_by_one(metered_sidecar, namespace, n, 1_000)
    assert m["gets"] == max(MISS_MIN, n // MISS_FRACTION) and m["restores"] == 1


def test_single_reads_that_took_as_long_as_a_restore_load_the_rest(
    metered_sidecar: SidecarProcess, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Misses are timed: on a busy executor (1.4 ms each, figure 10) 156 of them cost
    several restores of 20,000 keys, so once they took as long as one would, the rest is
    loaded (here restores are timed as instant: right after MISS_MIN)."""
    monkeypatch.setattr(_reads, "_restore_rate", [1e-12])
    n = 20_000
    m = read_one_by_one(metered_sidecar, namespace, n, 1_000)
    assert m["gets"] == MISS_MIN and m["restores"] == 1
    # and a whole restore of this process is timed for the next decision
    assert _reads._restore_rate[0] > 1e-9


def test_a_partial_copy_handed_over_gets_a_delta_and_reads_exactly(
    redis_server: RedisServer,
    metered_sidecar: SidecarProcess,
    workers: list[Worker],
    namespace: str,
) -> None:
    w1, w2, _ = workers
    w1.block(LocalContext(0, batch_id=0), {f"k{i}": i for i in range(1_000)})
    # w2 is cold: it reads three keys on demand, one of them absent
    w2.call("enter", LocalContext(0, batch_id=1), False)
    assert w2.call("read", ["k1", "k2", "x"]) == {"k1": 1, "k2": 2}
    w2.call("update", {"k1": -1})
    w2.call("exit")
    assert w2.call("held") == {"keys": ["k1", "k2"], "absent": ["x"], "complete": False}
    # w1 (whole copy) changes what w2 holds, knows absent, and never read
    w1.block(LocalContext(0, batch_id=2), {"k2": 22, "x": 7, "k3": 33}, deletes=("k1",))
    before = counters(metered_sidecar)
    info = w2.call("enter", LocalContext(0, batch_id=3), False)
    assert info["delta"] and info["restored_keys"] == 4 and not info["on_demand"]
    assert w2.call("read", ["k1", "k2", "x", "k3", "k4"]) == {"k2": 22, "x": 7, "k3": 33, "k4": 4}
    w2.call("exit")
    m = moved(before, counters(metered_sidecar))
    assert m["gets"] == 1 and m["found"] == 1  # only k4 was read: the rest came as the delta
    held = w2.call("held")
    assert held["keys"] == ["k2", "k3", "k4", "x"] and held["absent"] == ["k1"]
    want = {f"k{i}": str(i).encode() for i in range(1_000) if i != 1}
    assert stored(redis_server, namespace) == {**want, "k2": b"22", "k3": b"33", "x": b"7"}


def test_a_log_that_no_longer_covers_a_partial_copy_sends_nothing(
    redis_server: RedisServer,
    metered_sidecar: SidecarProcess,
    workers: list[Worker],
    namespace: str,
) -> None:
    w1, w2, _ = workers
    w1.block(LocalContext(0, batch_id=0), {"a": 1})
    w2.call("enter", LocalContext(0, batch_id=1), False)
    assert w2.call("read", ["a"]) == {"a": 1}
    w2.call("exit")
    many = {f"n{i}": i for i in range(LOG_MIN + 500)}  # more than the log keeps
    w1.block(LocalContext(0, batch_id=2), {**many, "a": 2})
    before = counters(metered_sidecar)
    info = w2.call("enter", LocalContext(0, batch_id=3), False)
    assert info["on_demand"] and not info["restored"]  # the copy was dropped, not patched
    assert w2.call("read", ["a", "n7"]) == {"a": 2, "n7": 7}
    w2.call("exit")
    m = moved(before, counters(metered_sidecar))
    assert m["not_covered"] == 1 and m["restores"] == 1 and m["found"] == 2


def test_a_recent_whole_copy_the_log_no_longer_covers_is_restored_in_full(
    redis_server: RedisServer,
    metered_sidecar: SidecarProcess,
    workers: list[Worker],
    namespace: str,
) -> None:
    """A hand-over after a batch that changed more than the log keeps (figure 10: every
    key, each batch): the worker's whole copy is one commit old, so its task touches much
    of its state; it restores at Open rather than missing key by key first."""
    w1, w2, _ = workers
    many = {f"n{i}": i for i in range(LOG_MIN + 500)}
    w1.block(LocalContext(0, batch_id=0), many)
    w2.block(LocalContext(0, batch_id=1), {k: v + 1 for k, v in many.items()})
    before = counters(metered_sidecar)
    info = w1.call("enter", LocalContext(0, batch_id=2), False)
    assert info["restored"] and not info["on_demand"] and not info["delta"]
    assert info["restored_keys"] == len(many)
    assert w1.call("read", ["n7", "x"]) == {"n7": 8}
    w1.call("exit")
    m = moved(before, counters(metered_sidecar))
    assert m["not_covered"] == 1 and m["restores"] == 2 and m["gets"] == 0
    # a copy more than RECENT commits old reads on demand, whatever changed
    for b in range(3, 3 + RECENT + 1):
        w2.block(LocalContext(0, batch_id=b), {"n1": b})
    w2.block(LocalContext(0, batch_id=9), {k: -v for k, v in many.items()})
    info = w1.call("enter", LocalContext(0, batch_id=10), False)
    assert info["on_demand"] and not info["restored"]
    assert w1.call("read", ["n7"]) == {"n7": -7}
    w1.call("exit")


def test_a_failed_block_forgets_what_it_read_and_changed(
    redis_server: RedisServer, metered_sidecar: SidecarProcess, namespace: str
) -> None:
    with ts(metered_sidecar, namespace, 0) as s:
        s.update({"a": {"n": 1}, "b": 1})
    _cache.sessions.clear()
    ctx = LocalContext(0, batch_id=1)
    with pytest.raises(RuntimeError), ts(metered_sidecar, namespace, 1, ctx) as s:
        s["a"]["n"] = 99  # in place, in the cached copy
        del s["b"]
        raise RuntimeError("the block fails")
    with ts(metered_sidecar, namespace, 1, ctx) as s:  # the next block of the same attempt
        assert s.info.reused_claim and s.info.on_demand
        assert s.get_many(["a", "b"]) == {"a": {"n": 1}, "b": 1}
    assert stored(redis_server, namespace) == {"a": b'{"n":1}', "b": b"1"}


def test_eager_loading_is_one_setting_away(
    metered_sidecar: SidecarProcess, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ts(metered_sidecar, namespace, 0) as s:
        s.update({f"k{i}": i for i in range(100)})
    _cache.sessions.clear()
    monkeypatch.setenv("TASKSTATE_LOAD", "eager")
    with ts(metered_sidecar, namespace, 1) as s:
        assert s.info.restored and not s.info.on_demand and s.info.restored_keys == 100
    monkeypatch.setenv("TASKSTATE_LOAD", "lazy")
    with pytest.raises(ConfigError, match="TASKSTATE_LOAD='lazy' is not one of on-demand, eager"):
        ts(metered_sidecar, namespace, 2)
