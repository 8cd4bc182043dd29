"""Writes of the data source (SeedBegin/Stage/Commit/Abort, Settle) and claim-free reads.

Against a real sidecar and redis-server, through the public AdminClient as the data source
calls them. Placement is checked against spark_hash (itself checked against Spark's own
hash in tests/e2e/sidecar/test_spark_hash.py); the Spark side is tests/e2e/spark_plugin/
test_data_source.py.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import msgpack
import pytest

from taskstate.client import (
    InvalidRequestError,
    LocalContext,
    NotFoundError,
    PartitionCountError,
    StateChangedError,
    TaskState,
    _cache,
)
from taskstate.client.admin import AdminClient
from taskstate.proto import chunks
from taskstate.proto import taskstate_pb2 as pb
from taskstate.sidecar.errors import SidecarError
from taskstate.sidecar.spark_hash import partition_of
from taskstate.sidecar.storage.redis.backend import RedisBackend
from taskstate.sidecar.storage.redis.keys import data_key, meta_key, namespace_key
from taskstate.sidecar.storage.values import SeedSpec, TaskKey
from taskstate.testing import RedisServer, SidecarProcess

from ..conftest import CLAIM_FIELDS, snapshot
from ..seeding import begin, commit, stage

pytestmark = pytest.mark.integration


def ts(
    side: SidecarProcess, ns: str, batch: int, part: int, partitions: int | None = None
) -> TaskState:
    ctx = LocalContext(part, batch_id=batch)
    return TaskState(ctx, component="c", namespace=ns, sidecar=side.target, partitions=partitions)


def placed(pairs: dict[str, Any], to: int) -> dict[int, dict[bytes, bytes]]:
    """Where Spark's repartition(to, key) sends each key, as Redis would hold it."""
    out: dict[int, dict[bytes, bytes]] = {p: {} for p in range(to)}
    for k, v in pairs.items():
        out[partition_of(k, to)][k.encode()] = json.dumps(v).encode()
    return out


def without_claim(meta: Any) -> dict[bytes, bytes]:
    return {k: v for k, v in meta.items() if k not in CLAIM_FIELDS}


def held(r: RedisServer, ns: str, to: int) -> dict[int, dict[bytes, bytes]]:
    return {p: r.client().hgetall(data_key(ns, "c", p)) for p in range(to)}


def leftovers(r: RedisServer, ns: str) -> list[bytes]:
    """Keys a write may leave behind: staging hashes, placeholders, plan fields."""
    c = r.client()
    keys = [k for k in c.keys(f"ts:*{ns}*:seed:*")]
    keys += [k for k in c.keys(f"ts:*{ns}*:meta") if c.hget(k, "seed_new")]
    record = c.hgetall(namespace_key(ns))
    return keys + [f for f in record if f.startswith((b"seed/", b"seed_alive/"))]


def test_a_write_lands_where_spark_places_each_key_and_a_query_goes_on_from_it(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str
) -> None:
    ns = namespace
    pairs = {f"k{i}": {"n": i, "s": "x" * (i % 7)} for i in range(2000)}
    half = dict(list(pairs.items())[:1000]), dict(list(pairs.items())[1000:])
    with AdminClient(sidecar.target) as admin:
        started = begin(admin, ns, 3)
        assert started.batch == -1 and not started.settled
        # nothing is visible while it is under way: Opens and reads are refused
        with pytest.raises(PartitionCountError, match="a write of the taskstate data source"):
            with ts(sidecar, ns, 0, 1, partitions=3):
                pass
        assert stage(admin, ns, started.seed_id, 0, 0, half[0]) == 1000
        assert stage(admin, ns, started.seed_id, 1, 0, half[1]) == 1000
        assert held(redis_server, ns, 3) == {0: {}, 1: {}, 2: {}}
        done = commit(admin, ns, started.seed_id, {0: 0, 1: 0})
        assert (done.tasks, done.keys, done.batch) == (3, 2000, -1)
        assert held(redis_server, ns, 3) == placed(pairs, 3)
        assert not leftovers(redis_server, ns)
        assert [t.partitions for t in admin.tasks(ns, "c")] == [3, 3, 3]
    _cache.sessions.clear()
    for p in range(3):
        with ts(sidecar, ns, 0, p, partitions=3) as s:
            assert dict(s) == {k: v for k, v in pairs.items() if partition_of(k, 3) == p}
            assert s.info.committed_batch == -1
            for k in list(s)[:5]:
                s[k] = {"n": -1}
    _cache.sessions.clear()
    with pytest.raises(PartitionCountError, match="split into 3 partitions"):
        with ts(sidecar, ns, 1, 0, partitions=4):
            pass


def test_only_the_attempts_spark_kept_count(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str
) -> None:
    """A Spark task that died after staging runs again: its first attempt's keys are dropped,
    and so are those a zombie of it stages late."""
    ns = namespace
    with AdminClient(sidecar.target) as admin:
        seed = begin(admin, ns, 2).seed_id
        stage(admin, ns, seed, 0, 0, {f"a{i}": i for i in range(50)})  # then the task died
        stage(admin, ns, seed, 0, 1, {f"a{i}": -i for i in range(20)})  # its retry
        stage(admin, ns, seed, 0, 0, {"zombie": 1})  # the first attempt, still running
        stage(admin, ns, seed, 1, 0, {"b": 1})
        commit(admin, ns, seed, {0: 1, 1: 0})
    want = placed({**{f"a{i}": -i for i in range(20)}, "b": 1}, 2)
    assert held(redis_server, ns, 2) == want  # the first attempt's other 30 keys are gone
    assert not leftovers(redis_server, ns)


@pytest.mark.parametrize("where", ["one task", "two tasks"])
def test_a_duplicate_key_writes_nothing(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str, where: str
) -> None:
    ns = namespace
    with ts(sidecar, ns, 0, 0) as s:  # a component with state, replaced by the write
        s["old"] = 1
    before = snapshot(redis_server, ns)
    with AdminClient(sidecar.target) as admin:
        seed = begin(admin, ns, 1, overwrite=True, quiet_seconds=0).seed_id
        stage(admin, ns, seed, 0, 0, {"a": 1, "dup": 2})
        if where == "one task":
            with pytest.raises(InvalidRequestError, match="'dup' appears more than once"):
                stage(admin, ns, seed, 0, 0, {"dup": 3})
            assert not admin.seed_abort(ns, "c", seed)  # undone already: it can only fail
        else:
            stage(admin, ns, seed, 1, 0, {"dup": 3})
            with pytest.raises(InvalidRequestError, match="'dup' appears more than once"):
                commit(admin, ns, seed, {0: 0, 1: 0})
            assert not admin.seed_abort(ns, "c", seed)  # undone already
    after = snapshot(redis_server, ns)
    meta = meta_key(ns, "c", 0).encode()
    # the task's state is untouched; only its claim went (held by the write: fenced)
    assert {k: v for k, v in after.items() if k != meta} == {
        k: v for k, v in before.items() if k != meta
    }
    assert without_claim(after[meta]) == without_claim(before[meta])
    assert not leftovers(redis_server, ns)
    _cache.sessions.clear()
    with ts(sidecar, ns, 1, 0) as s:
        assert dict(s) == {"old": 1}


def test_append_adds_and_replaces_keys_and_keeps_the_batch_overwrite_replaces_all(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str
) -> None:
    ns = namespace
    for p in range(3):
        with ts(sidecar, ns, 4, p, partitions=3) as s:
            s.update({f"p{p}-{i}": i for i in range(10)})
    with AdminClient(sidecar.target) as admin:
        with pytest.raises(StateChangedError, match=r"was written \d+ s ago"):
            begin(admin, ns, 3)  # the query still runs
        with pytest.raises(PartitionCountError, match="split into 3 partitions"):
            begin(admin, ns, 2, quiet_seconds=0)
        with pytest.raises(InvalidRequestError, match="at batch 4"):
            begin(admin, ns, 3, quiet_seconds=0, batch=3)
        started = begin(admin, ns, 3, quiet_seconds=0)
        assert started.batch == 4
        new = {"p0-0": "replaced", "fresh": True}
        stage(admin, ns, started.seed_id, 0, 0, new)
        commit(admin, ns, started.seed_id, {0: 0})
        whole = {f"p{p}-{i}": i for p in range(3) for i in range(10)}
        got = {}
        for t in admin.tasks(ns, "c"):
            assert t.committed_batch == 4
            data, _ = admin.read(t.task)
            got.update({k: json.loads(v) for k, v in data.items()})
        assert got == {**whole, **new}

        started = begin(admin, ns, 2, overwrite=True, quiet_seconds=0, batch=9)
        stage(admin, ns, started.seed_id, 0, 0, {"only": 1})
        commit(admin, ns, started.seed_id, {0: 0})
        assert [
            (t.task.partition, t.committed_batch, t.partitions) for t in admin.tasks(ns, "c")
        ] == [
            (0, 9, 2),
            (1, 9, 2),
        ]
    assert held(redis_server, ns, 2) == placed({"only": 1}, 2)
    assert not redis_server.client().exists(data_key(ns, "c", 2), meta_key(ns, "c", 2))
    _cache.sessions.clear()
    with ts(sidecar, ns, 10, partition_of("only", 2), partitions=2) as s:
        assert dict(s) == {"only": 1} and s.info.committed_batch == 9


def test_an_abandoned_write_is_undone_by_the_next_command_and_says_so(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str
) -> None:
    ns = namespace
    before = snapshot(redis_server, ns)
    with AdminClient(sidecar.target) as admin:
        seed = begin(admin, ns, 2, lease_seconds=3.0).seed_id
        stage(admin, ns, seed, 0, 0, {"a": 1, "b": 2})
        assert admin.settle(ns) == []  # still alive (3 s: a slow call does not end it)
        time.sleep(3.3)  # its job died: nothing more reaches the sidecar
        notes = admin.settle(ns)
        assert len(notes) == 1 and notes[0].startswith(f"undid the write {seed} of {ns}/c")
        assert "nothing of it was ever visible" in notes[0]
        with pytest.raises(Exception, match="no longer under way"):
            stage(admin, ns, seed, 1, 0, {"late": 1})
    assert snapshot(redis_server, ns) == before
    # and an Open settles it too
    with AdminClient(sidecar.target) as admin:
        seed = begin(admin, ns, 2, lease_seconds=3.0).seed_id
    time.sleep(3.3)
    _cache.sessions.clear()
    with ts(sidecar, ns, 0, 1, partitions=2) as s:
        s["x"] = 1
    assert not leftovers(redis_server, ns)


def test_a_write_interrupted_while_it_is_made_visible_is_finished_by_the_next_sidecar(
    redis_server: RedisServer, namespace: str
) -> None:
    """The driver (or its sidecar) dies between two tasks' publish: the next one finishes.

    Two RedisBackends are two sidecars; the first dies (an exception) after the first
    task became visible.
    """
    ns = namespace
    pairs = {f"k{i}": i for i in range(300)}

    async def run() -> list[str]:
        first = RedisBackend(redis_server.url)
        spec = SeedSpec(ns, "c", 3, "string", lease_s=3.0)
        started = await first.seeds.begin(spec)
        flat = [x for k, v in pairs.items() for x in (k, str(v))]
        await first.seeds.stage(ns, "c", started.seed_id, 0, 0, flat)
        real = first.seeds._script
        published: list[Any] = []

        async def crash_after_one(name: str, *args: Any, **kw: Any) -> Any:
            if name == "seed_publish" and published:
                raise ConnectionError("the sidecar died")
            r = await real(name, *args, **kw)
            if name == "seed_publish":
                published.append(r)
            return r

        first.seeds._script = crash_after_one  # type: ignore[method-assign]
        with pytest.raises(ConnectionError):
            await first.seeds.commit(ns, "c", started.seed_id, {0: 0})
        await first.close()
        second = RedisBackend(redis_server.url)
        try:
            with pytest.raises(SidecarError, match="a write of the taskstate data source"):
                await second.admin.read(TaskKey(ns, "c", 1), 10).__anext__()
            assert await second.seeds.settle(ns, None) == []  # the lease has not run out
            await asyncio.sleep(3.2)
            return await second.seeds.settle(ns, None)
        finally:
            await second.close()

    notes = asyncio.run(run())
    assert len(notes) == 1 and notes[0].startswith("finished the write")
    assert "300 keys are visible in 3 tasks at batch -1" in notes[0]
    assert held(redis_server, ns, 3) == {
        p: {k.encode(): str(v).encode() for k, v in pairs.items() if partition_of(k, 3) == p}
        for p in range(3)
    }
    assert not leftovers(redis_server, ns)


def _read_all(
    admin: AdminClient, ns: str, p: int, **kw: Any
) -> tuple[dict[str, Any], set[str], int]:
    """One claim-free Read: (values, deleted keys, committed batch)."""
    task = pb.TaskId(namespace=ns, component="c", partition=p)
    values: dict[str, Any] = {}
    deleted: set[str] = set()
    batch = None
    if "keys" in kw:
        kw["packed_keys"] = chunks.pack(kw.pop("keys"))
    for chunk in admin.read_chunks(pb.ReadRequest(task=task, **kw)):
        if chunk.packed:
            flat = msgpack.unpackb(chunk.packed, raw=False)
            values.update({k: json.loads(v) for k, v in zip(flat[0::2], flat[1::2], strict=True)})
        if chunk.packed_deletes:
            deleted.update(msgpack.unpackb(chunk.packed_deletes, raw=False))
        if chunk.last:
            batch = chunk.committed_batch
    assert batch is not None
    return values, deleted, batch


def test_reads_of_some_keys_and_of_the_changes_since_a_batch(
    sidecar: SidecarProcess, namespace: str
) -> None:
    ns = namespace
    read_all = _read_all
    with ts(sidecar, ns, 0, 0) as s:
        s.update({f"k{i}": 0 for i in range(10)})
    with ts(sidecar, ns, 1, 0) as s:
        s["k1"] = 1
        del s["k2"]
    with ts(sidecar, ns, 2, 0) as s:
        s["k3"] = 2
        s["new"] = 2
    with AdminClient(sidecar.target) as admin:
        assert read_all(admin, ns, 0, keys=["k1", "k2", "new", "nope"]) == (
            {"k1": 1, "new": 2}, set(), 2,
        )  # fmt: skip
        assert read_all(admin, ns, 0, changes_since_batch=1) == ({"k3": 2, "new": 2}, set(), 2)
        assert read_all(admin, ns, 0, changes_since_batch=0) == (
            {"k1": 1, "k3": 2, "new": 2}, {"k2"}, 2,
        )  # fmt: skip
        assert read_all(admin, ns, 0, changes_since_batch=2) == ({}, set(), 2)
        whole, _, batch = read_all(admin, ns, 0, changes_since_batch=-1)
        assert batch == 2 and whole == read_all(admin, ns, 0)[0]
        # a replay of batch 2 rolls it back (and commits it changing nothing): "new" is gone,
        # k3 is 0 again, and both are named
        _cache.sessions.clear()
        with ts(sidecar, ns, 2, 0) as s:
            assert "new" not in s
        assert read_all(admin, ns, 0, changes_since_batch=1) == ({"k3": 0}, {"new"}, 2)
        assert read_all(admin, ns, 0, changes_since_batch=2) == ({}, set(), 2)
        # an operator's edit counts from the next batch
        admin.set(f"{ns}/c/0", "k5", 55)
        assert read_all(admin, ns, 0, changes_since_batch=2) == ({"k5": 55}, set(), 2)
        # past what the log holds (it keeps about max(4096, size / 8) keys)
        for b in range(3, 6):
            with ts(sidecar, ns, b, 0) as s:
                s.update({f"big{b}-{i}": b for i in range(3000)})
        with pytest.raises(NotFoundError, match=r"holds the changes after batch (\d+)"):
            read_all(admin, ns, 0, changes_since_batch=1)
        assert read_all(admin, ns, 0, changes_since_batch=4)[0] == {
            f"big5-{i}": 5 for i in range(3000)
        }
