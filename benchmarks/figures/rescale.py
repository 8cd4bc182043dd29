"""`taskstate rescale` against moving the same keys by hand, in the same run.

Ours: the Rescale RPC through the sidecar process (plan, lock, copy into staging hashes,
one atomic swap per target, retire), moving a component of 4 tasks to 8 whose last batch
changed 1% of its keys. Baseline: what
an operator's script would do without any of the guarantees: HSCAN every source hash and
HSET each page into the target hashes of a second copy of the component, routed by the
same hash, through one redis-py connection. Both read and write every key once; the
figure says what atomicity, resumability and the moved rollback records cost.
"""

from __future__ import annotations

import time
from collections import defaultdict

from taskstate.client import LocalContext, TaskState
from taskstate.client.admin import AdminClient
from taskstate.sidecar.spark_hash import partition_of
from taskstate.sidecar.storage.redis.keys import data_key
from taskstate.testing import RedisServer

from ..common import Bench, Figure, say

SOURCES, TARGETS = 4, 8


def _fill(target: str, ns: str, keys: int) -> None:
    """Batch 0 writes every key; batch 1, the last, changes 1 in 100.

    A steady state: the last batch's rollback record, which the rescale moves too, is small.
    """
    for batch, every in ((0, 1), (1, 100)):
        for p in range(SOURCES):
            with TaskState(LocalContext(p, batch_id=batch), component="c", namespace=ns,
                           sidecar=target, partitions=SOURCES) as s:  # fmt: skip
                for i in range(0, keys, every):
                    k = f"user-{i}"
                    if partition_of(k, SOURCES) == p:
                        s[k] = {"n": i, "total": i * 3 + batch}


def _by_hand(redis: RedisServer, ns: str, out_ns: str) -> int:
    c = redis.client()
    moved = 0
    for p in range(SOURCES):
        cursor = 0
        while True:
            cursor, page = c.hscan(data_key(ns, "c", p), cursor, count=2000)
            routed: dict[int, dict[bytes, bytes]] = defaultdict(dict)
            for k, v in page.items():
                routed[partition_of(k.decode(), TARGETS)][k] = v
            pipe = c.pipeline(transaction=False)
            for t, items in routed.items():
                pipe.hset(data_key(out_ns, "c", t), mapping=items)
            pipe.execute()
            moved += len(page)
            if cursor == 0:
                break
    return moved


SIZES = {"full": 400_000, "quick": 20_000}


def measure(bench: Bench, size: int) -> list[Figure]:
    """The rescale figure."""
    return rescale_figure(bench.redis, bench.target, size)


def rescale_figure(redis: RedisServer, target: str, keys: int) -> list[Figure]:
    """One figure: keys moved per second, ours against the hand-rolled copy."""
    ns = f"bench-rescale-{time.time_ns() % 10**9}"
    _fill(target, ns, keys)
    t0 = time.perf_counter()
    moved = _by_hand(redis, ns, ns + "-copy")
    base_s = time.perf_counter() - t0
    if moved != keys:
        raise AssertionError(f"rescale benchmark: the baseline moved {moved} of {keys} keys")
    admin = AdminClient(target, timeout_s=600.0)
    t0 = time.perf_counter()
    steps = list(admin.rescale(ns, "c", TARGETS, quiet_seconds=0))
    ours_s = time.perf_counter() - t0
    done = steps[-1]
    if done.phase != "done" or done.keys != keys:
        raise AssertionError(f"rescale benchmark: the rescale ended with {done}")
    c = redis.client()
    for t in range(TARGETS):  # every key where Spark sends it, as in the hand-made copy
        if c.hgetall(data_key(ns, "c", t)) != c.hgetall(data_key(ns + "-copy", "c", t)):
            raise AssertionError(f"rescale benchmark: task {t} differs from the copy by hand")
    say(f"rescale {keys:,} keys 4 -> 8: {ours_s:.2f} s, by hand {base_s:.2f} s")
    return [
        Figure(
            name=f"rescale {keys:,} keys, 4 -> 8 tasks: keys/s, taskstate vs HSCAN+HSET by hand",
            ours=keys / ours_s,
            baseline=keys / base_s,
            unit="keys/s",
            ratio=(keys / ours_s) / (keys / base_s),
            target="none (informational: the price of atomic, resumable and exact)",
            met=None,
            detail={"ours_s": round(ours_s, 3), "by_hand_s": round(base_s, 3)},
        )
    ]
