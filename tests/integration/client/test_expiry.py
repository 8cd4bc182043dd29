"""Keys that expire (TaskState(ttl=..., now=...)) and values that change (version, upgrade).

Real sidecar processes and a real redis-server: keys expire in processing time and in
event time; a replayed batch rolls its expirations back and expires them again, exactly
once in the state; expired keys leave Redis (and its memory) without their task being
opened, by the sidecar's sweep or `taskstate sweep`; an upgrade chain reads old values, and
a value newer than the code is refused with nothing written.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from taskstate.client import ConfigError, LocalContext, SchemaVersionError, TaskState, _cache
from taskstate.client._schema import NO_TTL
from taskstate.proto import envelope
from taskstate.sidecar.storage.redis.keys import data_key, task_key
from taskstate.testing import RedisServer, SidecarProcess

from ..conftest import committed_snapshot, snapshot
from ..waiting import eventually

pytestmark = pytest.mark.integration


def ts(side: SidecarProcess, ns: str, batch: int | None, **kw: Any) -> TaskState:
    return TaskState(LocalContext(0, batch_id=batch), component="c", namespace=ns,
                     sidecar=side.target, **kw)  # fmt: skip


def stored(redis: RedisServer, ns: str) -> dict[str, tuple[int | None, int, Any]]:
    """Every stored key: (expiry, version, value)."""
    out = {}
    for k, v in redis.client().hgetall(data_key(ns, "c", 0)).items():
        expires, version, body = envelope.parse(v)
        out[k.decode()] = (expires, version, json.loads(body))
    return out


def index(redis: RedisServer, ns: str) -> dict[str, int]:
    """The task's expiry index: key -> its expiry, or an earlier time."""
    zset = redis.client().zrange(task_key(ns, "c", 0, "ttl"), 0, -1, withscores=True)
    return {k.decode(): int(score) for k, score in zset}


def test_keys_expire_in_processing_time_and_a_write_restarts_their_clock(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str
) -> None:
    ns = namespace
    # sleeps wait past an expiry; the margins before the next one are seconds, so a slow
    # step on a loaded machine does not expire a key early
    with ts(sidecar, ns, 0, ttl=3.0) as s:
        s["a"] = 1  # 3 s, the block's
        s.set("b", 2, ttl=None)  # never
        s.set("c", {"n": 3}, ttl=0.5)  # 0.5 s, its own
        s.set("d", [4], ttl=0.5)
        now0 = s.info.now_ms  # the batch's now: expiries are counted from it
    assert stored(redis_server, ns) == {
        "a": (now0 + 3000, 1, 1), "b": (None, 1, 2), "c": (now0 + 500, 1, {"n": 3}),
        "d": (now0 + 500, 1, [4]),
    }  # fmt: skip
    assert index(redis_server, ns) == {"a": now0 + 3000, "c": now0 + 500, "d": now0 + 500}
    time.sleep(1.5)
    with ts(sidecar, ns, 1, ttl=3.0) as s:
        assert s.info.expired == 2
        assert dict(s) == {"a": 1, "b": 2} and "c" not in s and s.get("d") is None
        s["d"] = [5]  # written again: a new clock
        now1 = s.info.now_ms
    assert set(stored(redis_server, ns)) == {"a", "b", "d"}
    time.sleep(max(0.0, (now0 + 3100) / 1000 - time.time()))  # a's 3 s have run out
    _cache.sessions.clear()  # a fresh worker: reads on demand, no copy to trust
    with ts(sidecar, ns, 2, ttl=3.0) as s:
        assert "a" not in s and s["d"] == [5] and s["b"] == 2  # d's clock restarted at batch 1
    assert index(redis_server, ns) == {"d": now1 + 3000}


def test_a_rewrite_keeps_an_earlier_index_entry_which_moves_when_it_comes_due(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str
) -> None:
    # The index holds, for each key, its expiry or an earlier time (prelude.lua ttl_sync:
    # a key rewritten before it expires does not move in the sorted set at every write).
    # An entry that comes due early is moved to the value's expiry and the key stays; a
    # rewrite with an earlier expiry must lower the entry, or the key would outlive it.
    ns = namespace
    with ts(sidecar, ns, 0, ttl=2.0) as s:  # batch 1 must claim before a's 2 s run out
        s["a"] = 1
        s.set("b", 2, ttl=100.0)
        now0 = s.info.now_ms
    assert index(redis_server, ns) == {"a": now0 + 2000, "b": now0 + 100_000}
    with ts(sidecar, ns, 1, ttl=100.0) as s:
        assert s.info.expired == 0
        s["a"] = 10  # a later expiry: the entry stays where it was
        s.set("b", 20, ttl=0.3)  # an earlier one: the entry moves down to it
        now1 = s.info.now_ms
    assert stored(redis_server, ns) == {"a": (now1 + 100_000, 1, 10), "b": (now1 + 300, 1, 20)}
    assert index(redis_server, ns) == {"a": now0 + 2000, "b": now1 + 300}
    time.sleep(max(0.0, (max(now0 + 2000, now1 + 300) + 100) / 1000 - time.time()))
    _cache.sessions.clear()
    with ts(sidecar, ns, 2, ttl=100.0) as s:
        assert s.info.expired == 1  # b; a's entry came due early and moved
        assert dict(s) == {"a": 10}
    assert index(redis_server, ns) == {"a": now1 + 100_000}


def test_a_plain_rewrite_takes_a_key_out_of_the_index_and_a_tilde_is_no_expiry(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str
) -> None:
    # commit.lua skips the index when there is none and no '~' is in the change set: a
    # plain value (no envelope, no '~') rewriting a key with an expiry must still take it
    # out of the index, and a '~' inside plain JSON values must not put one in
    ns = namespace
    with ts(sidecar, ns, 0) as s:  # plain values, one with '~' (no envelope: JSON)
        s["t"] = "~tilde"
        s["u"] = 1
    assert index(redis_server, ns) == {}
    assert not redis_server.client().exists(task_key(ns, "c", 0, "ttl"))
    with ts(sidecar, ns, 1) as s:
        s.set("a", 1, ttl=100.0)
        s["u"] = 2
        now1 = s.info.now_ms
    assert index(redis_server, ns) == {"a": now1 + 100_000}
    with ts(sidecar, ns, 2) as s:  # no ttl: plain values, no '~' in the change set
        s["a"] = 3
        s["u"] = 4
    assert redis_server.client().hget(data_key(ns, "c", 0), "a") == b"3"
    assert index(redis_server, ns) == {}
    with ts(sidecar, ns, 3) as s:
        assert dict(s) == {"t": "~tilde", "u": 4, "a": 3}


def test_the_index_holds_each_keys_own_expiry_when_a_block_mixes_them(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str
) -> None:
    # commit.lua reads each value's expiry keeping the last head it parsed (prelude.lua
    # expiry_of): values of other heads in between, back and forth, must not inherit it.
    # Scalars take the assignment's fast path, dicts are encoded at commit (Block.wrap,
    # with the block's head for the block's ttl); both are here, with their own ttls and
    # the block's.
    ttls = [100.0, 1000.0, None, 100.0, 10.0, 1000.0, None, 100.0, NO_TTL]
    with ts(sidecar, namespace, 0, ttl=100.0, version=2) as s:
        for i in range(400):
            v = {"i": i} if i % 3 == 0 else i
            if ttls[i % len(ttls)] is NO_TTL:
                s[f"k{i}"] = v
            else:
                s.set(f"k{i}", v, ttl=ttls[i % len(ttls)])
        now = s.info.now_ms
    ttls[-1] = 100.0  # the block's
    held = stored(redis_server, namespace)
    want = {f"k{i}": now + int(t * 1000) for i in range(400)
            if (t := ttls[i % len(ttls)]) is not None}  # fmt: skip
    assert {k: e for k, (e, _, _) in held.items() if e is not None} == want
    assert all(v == 2 for _, v, _ in held.values())  # version-only envelopes: `~:2~`
    assert {k: body for k, (_, _, body) in held.items()} == {
        f"k{i}": {"i": i} if i % 3 == 0 else i for i in range(400)
    }
    assert index(redis_server, namespace) == want


def replay(
    redis: RedisServer, side: SidecarProcess, ns: str, batch: int,
    before: tuple[dict[str, Any], dict[str, int]], **kw: Any,
) -> dict[str, Any]:  # fmt: skip
    """Run `batch` again in a fresh worker: it must roll back to `before` (values, index).

    Returns what the replay's block saw.
    """
    _cache.sessions.clear()  # the batch runs again: its first attempt's commits roll back
    with ts(side, ns, batch, **kw) as s:
        assert s.info.rolled_back
        seen = dict(s)
    assert (stored(redis, ns), index(redis, ns)) == before
    return seen


@pytest.mark.parametrize("first_commit", ["whole", "small, then whole"])
def test_a_replay_of_a_batch_that_rewrote_the_state_restores_every_expiry(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str, first_commit: str
) -> None:
    # A batch that rewrites most of the state keeps its rollback record as a copy of the
    # data (commit.lua's copy mode), from its first commit or from a later large one
    # (after a small first commit in fields mode). Its replay must give back the index
    # as it was before the batch, key by key: new expiries, expiries removed (a key
    # rewritten without one, a key deleted) and keys added must all be undone.
    ns = namespace
    with ts(sidecar, ns, 0, ttl=100.0) as s:
        for i in range(400):
            s.set(f"k{i}", {"i": i}, ttl=None if i % 4 == 0 else 100.0 + i)
    data0 = stored(redis_server, ns)
    index0 = index(redis_server, ns)
    assert len(index0) == 300
    with ts(sidecar, ns, 1, ttl=1000.0) as s:
        if first_commit != "whole":
            s["k1"] = "small"
            s.commit()  # 1 key of 400: fields mode
        for i in range(400):
            if i % 5 == 0:
                del s[f"k{i}"]
            elif i % 5 == 1:
                s.set(f"k{i}", i, ttl=None)  # leaves the index
            else:
                s[f"k{i}"] = i  # the block's 1,000 s: a new expiry
        for i in range(400, 450):
            s[f"k{i}"] = i
    assert index(redis_server, ns) != index0
    seen = replay(redis_server, sidecar, ns, 1, (data0, index0), ttl=1000.0)
    assert seen["k3"] == {"i": 3} and "k400" not in seen


def test_a_replay_restores_the_index_of_keys_a_batch_deleted_before_it_rewrote_the_rest(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str
) -> None:
    # The batch first deletes the only keys with an expiry (a small commit: fields mode;
    # the index is gone), then rewrites the rest (copy mode from there). Before the batch
    # there was an index, which only the rollback record's values still show.
    ns = namespace
    with ts(sidecar, ns, 0) as s:
        s.update({f"k{i}": i for i in range(4000)})
        for i in range(10):
            s.set(f"k{i}", i, ttl=100.0)
    data0, index0 = stored(redis_server, ns), index(redis_server, ns)
    assert len(index0) == 10
    with ts(sidecar, ns, 1) as s:
        for i in range(10):
            del s[f"k{i}"]
        s.commit()
        assert index(redis_server, ns) == {}
        s.update({f"k{i}": -i for i in range(10, 4000)})
    seen = replay(redis_server, sidecar, ns, 1, (data0, index0))
    assert seen["k3"] == 3 and seen["k11"] == 11


def test_an_index_entry_the_value_does_not_agree_with_is_set_right_not_expired(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str
) -> None:
    # An index entry due before the value's own expiry (as a key written again keeps, or
    # as another writer may leave): the claim reads the value, keeps the key and puts
    # the entry at the value's expiry (prelude.lua take_expired); an entry of a value
    # without an expiry leaves the index.
    ns = namespace
    with ts(sidecar, ns, 0, ttl=100.0) as s:
        s["a"] = 1
        s.set("b", 2, ttl=None)
    want = index(redis_server, ns)
    redis_server.client().zadd(task_key(ns, "c", 0, "ttl"), {"a": 1, "b": 1})
    with ts(sidecar, ns, 1, ttl=100.0) as s:
        assert s.info.expired == 0 and dict(s) == {"a": 1, "b": 2}
    assert index(redis_server, ns) == want  # a at its value's expiry; b (none) left it


def test_in_event_time_a_replay_expires_again_exactly_once(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str
) -> None:
    ns = namespace
    with ts(sidecar, ns, 0, ttl=5.0, now=1_000) as s:
        s.update({"k": 1, "m": 1})
    with ts(sidecar, ns, 1, ttl=5.0, now=5_999) as s:  # k: 1 000 + 5 000 = 6 000
        assert dict(s) == {"k": 1, "m": 1} and s.info.expired == 0
        s["m"] = 2  # m's clock restarts: expires at 10 999
    before = committed_snapshot(redis_server, ns)
    # batch 2's first attempt: k expires at its first claim, then the attempt dies
    with pytest.raises(RuntimeError), ts(sidecar, ns, 2, ttl=5.0, now=6_000) as s:
        assert s.info.expired == 1 and "k" not in s
        s["n"] = 9
        raise RuntimeError("the worker dies")
    assert "k" not in stored(redis_server, ns)  # gone, and kept in batch 2's rollback record
    undo = redis_server.client().hgetall(task_key(ns, "c", 0, "undo"))
    assert set(undo) == {b"k"}
    # the replay of batch 2 (another attempt, even with a later event time: the batch's now
    # was fixed at its first claim) rolls the expiry back and expires k again, once
    _cache.sessions.clear()
    with ts(sidecar, ns, 2, ttl=5.0, now=60_000) as s:
        assert s.info.rolled_back and s.info.rolled_back_keys == 1 and s.info.expired == 1
        assert dict(s) == {"m": 2}  # m (10 999) lives: the batch's now is 6 000, not 60 000
        s["n"] = 9
    assert {k: v[2] for k, v in stored(redis_server, ns).items()} == {"m": 2, "n": 9}
    assert before != committed_snapshot(redis_server, ns)
    # a block without an event time in a component that used one is refused
    _cache.sessions.clear()
    with pytest.raises(ConfigError, match="keys expire in event time"), ts(sidecar, ns, 3):
        pass


def test_expired_keys_leave_redis_without_their_task_being_opened(
    redis_server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    """A sidecar sweeps the idle tasks it served; `taskstate sweep` those of a gone one."""
    c = redis_server.client()

    def fill(side: SidecarProcess, ns: str) -> None:
        with ts(side, ns, 0, ttl=1.0) as s:
            s.update({f"k{i}": "x" * 1000 for i in range(4000)})
            s.set("stays", 1, ttl=None)

    sweeping = ["--sweep-every", "0.5", "--sweep-idle", "1"]
    with SidecarProcess(redis_server.url, tmp_path / "a.sock", extra=sweeping) as side:
        fill(side, namespace)
        full = int(c.info("memory")["used_memory"])
        eventually(
            lambda: c.hlen(data_key(namespace, "c", 0)) <= 1,
            "the sidecar did not sweep the idle task",
            15,
            0.2,
        )
    swept = int(c.info("memory")["used_memory"])
    assert full - swept > 3_000_000, (full, swept)  # the 4 MB of values are gone
    assert stored(redis_server, namespace) == {"stays": (None, 1, 1)}
    assert index(redis_server, namespace) == {}

    other = namespace + "-2"
    with SidecarProcess(
        redis_server.url, tmp_path / "b.sock", extra=["--sweep-every", "0"]
    ) as side:
        fill(side, other)
        time.sleep(1.2)
        assert c.hlen(data_key(other, "c", 0)) == 4001  # nobody swept it
        cmd = [sys.executable, "-m", "taskstate.cli.main", "sweep", other, "--idle-seconds", "0",
               "--sidecar", side.target]  # fmt: skip
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        assert r.returncode == 0 and "4000 expired key(s) deleted in 1 task(s)" in r.stdout, r
        assert c.hlen(data_key(other, "c", 0)) == 1


def upgrades() -> Iterator[Any]:
    yield {1: lambda v: {"count": v}, 2: lambda v: {**v, "total": v["count"] * 10}}


def test_an_upgrade_chain_reads_old_values_and_a_newer_one_is_refused(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str
) -> None:
    ns = namespace
    with ts(sidecar, ns, 0) as s:  # version 1 code: a bare count
        s["a"] = 3
    with ts(sidecar, ns, 1, version=2, upgrade={1: lambda v: {"count": v}}) as s:
        assert s["a"] == {"count": 3}  # upgraded when read
        s["b"] = {"count": 4}  # stored at version 2
    step = next(upgrades())
    _cache.sessions.clear()
    with ts(sidecar, ns, 2, version=3, upgrade=step) as s:
        assert dict(s) == {"a": {"count": 3, "total": 30}, "b": {"count": 4, "total": 40}}
        s["a"] = s["a"]  # written back: stored at version 3
    assert {k: v[:2] for k, v in stored(redis_server, ns).items()} == {
        "a": (None, 3),
        "b": (None, 2),
    }
    # a value of version 4 under version 3 code: refused, naming the task, key and versions
    with ts(sidecar, ns, 3, version=4) as s:
        s["c"] = {"count": 1, "total": 1, "new": True}
    before = committed_snapshot(redis_server, ns)
    _cache.sessions.clear()
    with pytest.raises(SchemaVersionError) as err, ts(sidecar, ns, 4, version=3, upgrade=step) as s:
        s["x"] = 1
        _ = dict(s)
    text = str(err.value)
    assert f"task {ns}/c/0" in text and "key 'c'" in text and "version 4" in text
    assert "version 3" in text and "Nothing was written" in text
    assert committed_snapshot(redis_server, ns) == before
    # a missing step is refused too
    _cache.sessions.clear()
    with pytest.raises(SchemaVersionError, match="no upgrade from version 2 to 3"):
        with ts(sidecar, ns, 4, version=3, upgrade={1: step[1]}) as s:
            _ = s["b"]
    with pytest.raises(ConfigError, match="upgrade="):
        ts(sidecar, ns, 4, version=2, upgrade={2: step[2]})


def test_show_and_export_carry_expiry_and_version_and_import_restores_them(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str, tmp_path: Path
) -> None:
    ns = namespace
    with ts(sidecar, ns, 0, ttl=3600, now=1_000, version=2) as s:
        s["a"] = {"n": 1}
        s.set("b", 2, ttl=None)
    cli = [sys.executable, "-m", "taskstate.cli.main"]
    show = subprocess.run([*cli, "show", f"{ns}/c/0", "--sidecar", sidecar.target],
                          capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    assert 'a = {"n": 1}  (expires 1970-01-01' in show.stdout and "version 2)" in show.stdout
    dump = tmp_path / "e.jsonl"
    subprocess.run([*cli, "export", ns, "--out", str(dump), "--sidecar", sidecar.target],
                   capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    entries = {e["key"]: e for e in map(json.loads, dump.read_text().splitlines())
               if e["type"] == "entry"}  # fmt: skip
    assert entries["a"]["expires"] == 3_601_000 and entries["a"]["version"] == 2
    assert entries["b"]["version"] == 2 and "expires" not in entries["b"]
    before = stored(redis_server, ns)
    subprocess.run([*cli, "import", str(dump), "--replace", "--sidecar", sidecar.target],
                   capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    assert stored(redis_server, ns) == before
    assert index(redis_server, ns) == {"a": 3_601_000}
    assert snapshot(redis_server, ns)  # and the task is there to open


def test_a_rescale_carries_each_keys_expiry_and_version(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str
) -> None:
    from taskstate.client.admin import AdminClient
    from taskstate.sidecar.spark_hash import partition_of

    ns = namespace
    keys = [f"u{i}" for i in range(40)]
    for p in range(2):
        with TaskState(LocalContext(p, batch_id=0), component="c", namespace=ns,
                       sidecar=sidecar.target, partitions=2, ttl=10.0, now=1_000,
                       version=2) as s:  # fmt: skip
            for k in keys:
                if partition_of(k, 2) == p:
                    s[k] = {"k": k}
    with AdminClient(sidecar.target) as admin:
        steps = list(admin.rescale(ns, "c", 3, quiet_seconds=0))
    assert steps[-1].phase == "done" and steps[-1].keys == 40
    c = redis_server.client()
    for p in range(3):
        data = c.hgetall(data_key(ns, "c", p))
        zset = dict(c.zrange(task_key(ns, "c", p, "ttl"), 0, -1, withscores=True))
        assert {k.decode() for k in data} == {k for k in keys if partition_of(k, 3) == p}
        assert all(envelope.parse(v)[:2] == (11_000, 2) for v in data.values())
        assert zset == {k: 11_000.0 for k in data}  # the index made anew from the values
    _cache.sessions.clear()
    with TaskState(LocalContext(0, batch_id=1), component="c", namespace=ns,
                   sidecar=sidecar.target, partitions=3, now=11_000, version=2) as s:  # fmt: skip
        assert len(s) == 0 and s.info.expired == sum(partition_of(k, 3) == 0 for k in keys)
