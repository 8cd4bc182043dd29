"""The Lua scripts against the in-memory model: random protocol histories (opens by new,
returning, displaced and late task attempts, batches marked finished, replays, stale
epochs, group commits, deletes, batch jobs, delta restores) must give the same answers
and the same state on a real Redis and in MemoryBackend; every delta applied to the state
at its base version gives exactly the committed state."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from taskstate.proto.durability import Durability
from taskstate.proto.versions import Version, token
from taskstate.sidecar.errors import SidecarError
from taskstate.sidecar.storage.memory.backend import MemoryBackend
from taskstate.sidecar.storage.redis.backend import RedisBackend
from taskstate.sidecar.storage.redis.keys import task_keys
from taskstate.sidecar.storage.values import ChangeSet, SeedSpec, TaskKey
from taskstate.testing import RedisServer

pytestmark = pytest.mark.integration
KEYS = [f"k{i}" for i in range(8)]
ATTEMPTS = ["app:1", "app:2", "app:3", "other-app:1", ""]  # "": an older client


def pairs_of(page: Any) -> list[tuple[Any, bytes]]:
    """A read page's keys and values (Redis' whole reads come as one flat list)."""
    flat = page.flat
    return list(page.items) + list(zip(flat[0::2], flat[1::2], strict=True))


async def _restore(store: Any, task: TaskKey, epoch: int) -> dict[str, bytes] | str:
    try:
        out: dict[str, bytes] = {}
        async for flat in store.tasks.restore(task, epoch, 3):
            # flat pages [key1, value1, ...]; keys may come as str or as Redis' UTF-8
            # bytes (both are allowed)
            out.update(
                (k if isinstance(k, str) else k.decode(), v)
                for k, v in zip(flat[0::2], flat[1::2], strict=True)
            )
        return out
    except SidecarError as exc:
        return exc.code


async def _step(store: Any, task: TaskKey, op: tuple[Any, ...]) -> Any:
    try:
        if op[0] == "open":
            r = await store.tasks.open(
                task, op[1], codec="json", writer="w", durability=Durability(), attempt=op[2]
            )
            return (
                "open",
                r.reused_claim,
                r.epoch,
                r.committed_batch,
                r.position,
                r.size,
                r.rolled_back,
                r.rolled_back_keys,
            )
        if op[0] == "commit":
            _, epoch, batch, ups, dels, pos = op
            r = await store.tasks.commit(
                task,
                epoch,
                batch,
                ChangeSet.of(ups, dels),
                pos,
                writer="w",
                durability=Durability(),
            )
            return ("commit", r.size)
        if op[0] == "done":  # the executor plugin's flush marks the attempt finished
            return ("done", await store.tasks.mark_done(task, op[1], op[2]))
        if op[0] == "restore":
            return ("restore", await _restore(store, task, op[1]))
        if op[0] == "get":
            return ("get", await store.tasks.get(task, op[1], KEYS))
        if op[0] == "changes":
            _, epoch, back = op
            now = Version.parse(await store.tasks.version(task))
            assert now is not None
            since = max(0, now.counter - back)
            d = await store.tasks.changes_since(task, epoch, token(now.gen, since), 1000)
            if d is None:
                return ("changes", since, None)
            ups = sorted((k if isinstance(k, str) else k.decode(), v) for k, v in d.upserts)
            dels = sorted(k if isinstance(k, str) else k.decode() for k in d.deletes)
            got = Version.parse(d.version)
            assert got is not None
            return ("changes", since, got.counter, ups, dels)
    except SidecarError as exc:
        return ("error", exc.code)
    raise AssertionError(op)


def _history(rng: random.Random) -> list[tuple[Any, ...]]:
    ops: list[tuple[Any, ...]] = []
    batch, epoch, streaming = 0, 0, rng.random() < 0.8
    claim: tuple[str, int | None] | None = None
    displaced: set[str] = set()
    for _ in range(rng.randint(5, 40)):
        r = rng.random()
        if r < 0.25 or epoch == 0:
            if streaming:
                batch = max(0, batch + rng.choice([-2, -1, 0, 0, 1, 1, 1]))
            attempt = rng.choice(ATTEMPTS)
            b = batch if streaming else None
            # the generator's guess of the epoch (both stores are checked, not the guess)
            if attempt and (claim == (attempt, b) or attempt in displaced):
                pass  # the claim is shared, or the open is fenced
            else:
                if claim is not None and claim[0] != attempt:
                    displaced.add(claim[0])
                claim = (attempt, b) if attempt else None
                epoch += 1
            ops.append(("open", b, attempt))
        elif r < 0.8:
            ups = [
                (k, str(rng.randint(0, 99)).encode()) for k in rng.sample(KEYS, rng.randint(0, 4))
            ]
            dels = [k for k in rng.sample(KEYS, rng.randint(0, 2)) if k not in dict(ups)]
            pos = rng.choice([None, str(rng.randint(0, 9)).encode()])
            e = epoch if rng.random() < 0.85 else max(1, epoch - 1)  # sometimes a zombie
            ops.append(("commit", e, batch if streaming else None, ups, dels, pos))
        elif r < 0.86:
            holder = claim[0] if claim and claim[0] and rng.random() < 0.7 else None
            ops.append(("done", batch, holder or rng.choice(ATTEMPTS[:-1])))
        elif r < 0.88:
            ops.append(("restore", epoch if rng.random() < 0.9 else epoch + 5))
        elif r < 0.93:
            e = epoch if rng.random() < 0.9 else epoch + 5
            ops.append(("changes", e, rng.choice([0, 1, 1, 2, 3, 5, 8])))
        else:
            ops.append(("get", epoch))
    return ops


def test_redis_scripts_and_memory_model_agree(redis_server: RedisServer, namespace: str) -> None:
    deltas = changed = 0

    async def run() -> None:
        nonlocal deltas, changed
        redis_store = RedisBackend(redis_server.url)
        try:
            for seed in range(150):
                rng = random.Random(seed)
                memory = MemoryBackend()
                memory.state.records.add(namespace)  # known to both, as Redis's is (conftest)
                task = TaskKey(namespace, f"h{seed}", 0)
                states: dict[int, dict[str, bytes]] = {}  # version counter -> state
                for i, op in enumerate(_history(rng)):
                    want = await _step(memory, task, op)
                    got = await _step(redis_store, task, op)
                    assert got == want, f"seed {seed}, step {i}, op {op}"
                    # the undo bookkeeping leaves the data identical after every step
                    data = redis_server.client().hgetall(task_keys(task)[1])
                    now = memory.state.tasks[task].data
                    assert {k.decode(): v for k, v in data.items()} == now
                    states[memory.state.tasks[task].ver] = dict(now)
                    if got[0] == "changes" and got[2] is not None:
                        _, since, _, ups, dels = got
                        rebuilt = {k: v for k, v in states[since].items() if k not in dels}
                        rebuilt.update(ups)
                        assert rebuilt == now, f"seed {seed}, step {i}: delta since {since}"
                        deltas += 1
                        if ups or dels:
                            changed += 1
        finally:
            await redis_store.close()

    asyncio.run(run())
    assert deltas > 50 and changed > 25, (deltas, changed)  # the histories did exercise it


def _late_attempt(late_finishes: bool) -> list[tuple[Any, ...]]:
    """app:2 finishes batch 1; app:3 (launched later) replays it; then batch 2 begins."""
    late: list[tuple[Any, ...]] = [("commit", 3, 1, [("a", b"9")], [], None)]  # first group
    if late_finishes:
        late = [("commit", 3, 1, [("a", b"3"), ("b", b"1")], [], b"5"), ("done", 1, "app:3")]
    return [
        ("open", 0, "app:1"), ("commit", 1, 0, [("a", b"1")], [], None), ("done", 0, "app:1"),
        ("open", 1, "app:2"), ("commit", 2, 1, [("a", b"2"), ("b", b"1")], [], b"5"),
        ("done", 1, "app:2"), ("done", 1, "app:1"),  # app:1 no longer holds the claim
        ("open", 1, "app:3"), ("restore", 3), *late,
        ("open", 2, "app:4"), ("restore", 4), ("changes", 4, 1), ("get", 4),
        ("commit", 4, 2, [("c", b"1")], [], b"6"), ("done", 2, "app:4"),
        ("open", 3, "app:5"), ("restore", 5),
    ]  # fmt: skip


@pytest.mark.parametrize("late_finishes", [False, True])
def test_a_finished_batch_a_late_attempt_replayed_agrees(
    redis_server: RedisServer, namespace: str, late_finishes: bool
) -> None:
    """The stash (open.lua, done.lua): a killed late attempt's half batch is replaced by
    the finished one at the next batch; a late attempt that finishes keeps its own."""

    async def run() -> list[Any]:
        redis_store = RedisBackend(redis_server.url)
        memory = MemoryBackend()
        memory.state.records.add(namespace)
        task = TaskKey(namespace, f"late-{late_finishes}", 0)
        answers = []
        try:
            for i, op in enumerate(_late_attempt(late_finishes)):
                want = await _step(memory, task, op)
                got = await _step(redis_store, task, op)
                assert got == want, f"step {i}, op {op}"
                answers.append(got)
        finally:
            await redis_store.close()
        return answers

    ops = _late_attempt(late_finishes)
    answers = asyncio.run(run())
    assert answers[5:7] == [("done", True), ("done", False)]
    assert answers[7][6] is True  # the late attempt rolled batch 1 back
    assert answers[8] == ("restore", {"a": b"1"})
    state = {"a": b"3" if late_finishes else b"2", "b": b"1"}
    batch2 = ops.index(("open", 2, "app:4"))
    assert answers[batch2][3] == 1  # batch 1 committed, at its position
    assert answers[batch2 + 1] == ("restore", state)  # batch 2 begins on the finished batch 1
    task = TaskKey(namespace, f"late-{late_finishes}", 0)
    meta = redis_server.client().hgetall(task_keys(task)[0])
    assert int(meta.get(b"finished_restored", 0)) == (0 if late_finishes else 1)
    assert answers[-1] == ("restore", {**state, "c": b"1"})


async def _operator_story(store: Any, ns: str) -> list[Any]:
    """Import, read, replace, append, replay: what the operator commands rely on."""
    task = TaskKey(ns, "c", 0)
    out: list[Any] = []

    async def read(pattern: str | None) -> Any:
        try:
            got: dict[str, bytes] = {}
            batch = None
            async for page in store.admin.read(task, 2, pattern=pattern):
                got.update((k if isinstance(k, str) else k.decode(), v) for k, v in pairs_of(page))
                if page.last:
                    batch = page.batch
            return got, batch
        except SidecarError as exc:
            return exc.code

    async def imp(entries: list[tuple[str, bytes]], **kw: Any) -> Any:
        args = {"committed_batch": 4, "position": b"7", "codec": "json", "replace": False,
                "append_epoch": None, **kw}  # fmt: skip
        try:
            return await store.admin.import_task(task, entries, **args)
        except SidecarError as exc:
            return exc.code

    out.append(await read(None))  # NOT_FOUND
    first = await imp([("a", b"1"), ("ab", b"2"), ("b", b"3")])
    out.append(first)
    out.append(await imp([("c", b"4")], append_epoch=first[0]))
    out.append(await imp([("c", b"4")], append_epoch=first[0] + 5))  # FENCED
    out.append(await imp([("x", b"0")]))  # ALREADY_EXISTS
    out.append(await read(None))
    out.append(await read("a*"))
    out.append(ns in await store.admin.namespaces())
    meta = await store.tasks.describe(task)
    out.append((meta.committed_batch, meta.position, meta.size, meta.codec))
    for batch in (4, 3, 5):  # replay of the imported batch, older, next
        try:
            r = await store.tasks.open(
                task, batch, codec="json", writer="w", durability=Durability()
            )
            out.append(("open", r.committed_batch, r.size, r.rolled_back))
        except SidecarError as exc:
            out.append(("error", exc.code))
    out.append(await imp([("z", b"9")], replace=True))
    out.append(await read(None))
    # the partition count an import brings: recorded, then checked like an Open's
    out.append(await imp([("p", b"1")], replace=True, partitions=2))
    out.append((await store.tasks.describe(task)).partitions)
    other = TaskKey(ns, "c", 1)
    out.append(await imp([("q", b"1")], partitions=3))  # PARTITIONS: the component has 2
    args = {"committed_batch": 4, "position": None, "codec": "json", "replace": False,
            "append_epoch": None}  # fmt: skip
    for t, count in ((TaskKey(ns, "c", 2), 2), (other, None)):  # outside; the recorded count
        try:
            out.append(await store.admin.import_task(t, [("q", b"1")], **args, partitions=count))
            out.append((await store.tasks.describe(t)).partitions)
        except SidecarError as exc:
            out.append(exc.code)
    for part, count in ((0, 3), (1, None), (1, 2)):
        try:
            r = await store.tasks.open(TaskKey(ns, "c", part), 5, codec="json", writer="w",
                                 durability=Durability(), partitions=count)  # fmt: skip
            out.append(("open", r.size))
        except SidecarError as exc:
            out.append(("error", exc.code))
    return out


def test_operator_paths_agree(redis_server: RedisServer, namespace: str) -> None:
    async def run() -> None:
        redis_store = RedisBackend(redis_server.url)
        try:
            got = await _operator_story(redis_store, namespace)
            want = await _operator_story(MemoryBackend(), namespace)
            assert got == want
            assert got[0] == "NOT_FOUND" and got[3] == "FENCED" and got[4] == "ALREADY_EXISTS"
            assert got[5] == ({"a": b"1", "ab": b"2", "b": b"3", "c": b"4"}, 4)  # and its batch
            assert got[6] == ({"a": b"1", "ab": b"2"}, 4)
            assert got[9][0] == "error" and got[10] == ("error", "STATE_AHEAD")
            assert got[11] == ("open", 4, 4, False)
            assert got[14:] == [
                (got[14][0], 1),
                2,
                "PARTITIONS",
                "PARTITIONS",
                (got[18][0], 1),
                2,
                ("error", "PARTITIONS"),
                ("open", 1),
                ("open", 1),
            ], got[14:]
        finally:
            await redis_store.close()

    asyncio.run(run())


async def _seed_story(store: Any, ns: str) -> list[Any]:
    """Writes of the data source and the reads after them, as the data source makes them."""
    out: list[Any] = []

    async def attempt(fn: Any, *args: Any) -> Any:
        try:
            return await fn(*args)
        except SidecarError as exc:
            return exc.code

    async def state(to: int) -> list[Any]:
        rows: list[Any] = []
        for p in range(to):
            task = TaskKey(ns, "c", p)
            try:
                async for page in store.admin.read(task, 100):
                    items = sorted(
                        (k if isinstance(k, str) else k.decode(), v) for k, v in pairs_of(page)
                    )
                    rows.append((p, items, page.batch if page.last else None))
            except SidecarError as exc:
                rows.append((p, exc.code))
        return rows

    first = await store.seeds.begin(SeedSpec(ns, "c", 3, "string"))
    out.append(await attempt(store.seeds.begin, SeedSpec(ns, "c", 3, "string")))  # held
    out.append(await state(1))  # refused while it is under way
    pairs = [x for i in range(40) for x in (f"k{i}", str(i))]
    out.append(await store.seeds.stage(ns, "c", first.seed_id, 0, 0, pairs[:40]))
    out.append(await store.seeds.stage(ns, "c", first.seed_id, 1, 0, pairs[40:]))
    out.append(await attempt(store.seeds.stage, ns, "c", first.seed_id, 1, 0, ["k20", "9"]))
    out.append(await attempt(store.seeds.commit, ns, "c", first.seed_id, {0: 0, 1: 0}))
    first = await store.seeds.begin(SeedSpec(ns, "c", 3, "string"))  # again, without it
    await store.seeds.stage(ns, "c", first.seed_id, 0, 0, pairs[:40])
    await store.seeds.stage(ns, "c", first.seed_id, 1, 0, pairs[40:])
    done = await store.seeds.commit(ns, "c", first.seed_id, {0: 0, 1: 0})
    out.append((done.tasks, done.keys, done.batch))
    out.append(await state(3))
    second = await store.seeds.begin(SeedSpec(ns, "c", 3, "string", batch=7, quiet_s=0))
    await store.seeds.stage(ns, "c", second.seed_id, 0, 1, ["k1", "new", "extra", "1"])
    done = await store.seeds.commit(ns, "c", second.seed_id, {0: 1})
    out.append((done.tasks, done.keys, done.batch))
    out.append(await state(3))
    out.append(await attempt(store.seeds.begin, SeedSpec(ns, "c", 2, "string", quiet_s=0)))
    third = await store.seeds.begin(SeedSpec(ns, "c", 2, "string", overwrite=True, quiet_s=0))
    await store.seeds.stage(ns, "c", third.seed_id, 0, 0, ["a", "1", "b", "2"])
    await store.seeds.stage(ns, "c", third.seed_id, 1, 0, ["b", "3"])
    out.append(await attempt(store.seeds.commit, ns, "c", third.seed_id, {0: 0, 1: 0}))
    out.append(await state(3))  # the duplicate wrote nothing
    return out


def test_seed_paths_agree(redis_server: RedisServer, namespace: str) -> None:
    async def run() -> None:
        redis_store = RedisBackend(redis_server.url)
        try:
            got = await _seed_story(redis_store, namespace)
            want = await _seed_story(MemoryBackend(), namespace)
            assert got == want
            assert got[0] == "PARTITIONS" and got[1] == [(0, "PARTITIONS")]
            # a duplicate undoes the write: its commit finds it gone
            assert got[4] == "INVALID_ARGUMENT" and got[5] == "FENCED" and got[6] == (3, 40, -1)
            assert got[8][0] == 3 and got[8][2] == 7 and got[10] == "PARTITIONS"
            assert got[11] == "INVALID_ARGUMENT" and got[12] == got[9]
        finally:
            await redis_store.close()

    asyncio.run(run())
