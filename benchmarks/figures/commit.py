"""Figures 1 and 1b: commits of many fields, against redis-py's pipelined HSET of the same.

1: a block rewrites existing string keys; 1b: a block writes dict values into a task that
has no state yet (a job's first batch, a new partition).
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

import orjson

from taskstate.client import LocalContext, TaskState
from taskstate.sidecar.storage.redis.keys import data_key
from taskstate.testing import RedisServer

from ..common import Bench, Figure, value

SIZES = {"full": (10_000, 7), "quick": (2_000, 3)}


def measure(bench: Bench, size: tuple[int, int]) -> list[Figure]:
    """The commit throughput figures."""
    return [
        commit_throughput(bench.redis, bench.target, *size),
        first_write(bench.redis, bench.target, *size),
    ]


def _pipelined_hset(c: Any, key: str, keys: list[str], values: list[Any]) -> float:
    """The baseline: the values orjson-encoded, HSET in 1,000-field chunks, one pipeline."""
    t0 = time.perf_counter()
    pipe = c.pipeline(transaction=False)
    enc = [orjson.dumps(v) for v in values]
    for j in range(0, len(keys), 1000):
        pipe.hset(key, mapping=dict(zip(keys[j : j + 1000], enc[j : j + 1000], strict=True)))
    pipe.execute()
    return time.perf_counter() - t0


def commit_throughput(redis: RedisServer, target: str, fields: int, repeats: int) -> Figure:
    """A block that writes `fields` keys and commits, against pipelined HSET of the same."""
    keys = [f"key-{i}" for i in range(fields)]
    ours, base, calls = [], [], []
    ns = f"bench-commit-{os.getpid()}"
    c = redis.client()
    for b in range(repeats + 1):  # batch 0 creates the keys; then every batch rewrites them
        values = [value(i, b) for i in range(fields)]
        t0 = time.perf_counter()
        with TaskState(LocalContext(0, batch_id=b), component="c", namespace=ns,
                       sidecar=target) as s:  # fmt: skip
            for k, v in zip(keys, values, strict=True):
                s[k] = v
            t1 = time.perf_counter()
            s.commit()
            call = time.perf_counter() - t1
        took = time.perf_counter() - t0
        took_base = _pipelined_hset(c, "bench:baseline", keys, values)
        if b:
            ours.append(took)
            base.append(took_base)
            calls.append(call)
    data = c.hgetall(data_key(ns, "c", 0))
    want = {k.encode(): orjson.dumps(value(i, repeats)) for i, k in enumerate(keys)}
    if data != want:
        raise AssertionError("commit benchmark: Redis does not hold what was committed")
    o, bl = statistics.median(ours), statistics.median(base)
    ratio = bl / o
    return Figure(
        f"commit {fields:,} fields", fields / o, fields / bl, "fields/s", ratio,
        ">= 0.6", ratio >= 0.6,
        {"ours_ms": o * 1e3, "baseline_ms": bl * 1e3, "repeats": repeats,
         "commit_call_ms": statistics.median(calls) * 1e3,
         "baseline": "redis-py pipelined HSET in 1,000-field chunks, orjson-encoded"},
    )  # fmt: skip


def first_write(redis: RedisServer, target: str, fields: int, repeats: int) -> Figure:
    """A block that writes `fields` dict values into a new task, against HSET into a new hash."""
    keys = [f"key-{i}" for i in range(fields)]
    values = [{"v": "x" * 90} for _ in range(fields)]
    ns = f"bench-first-{os.getpid()}"
    c = redis.client()
    ours, base = [], []
    for r in range(repeats):
        t0 = time.perf_counter()
        with TaskState(LocalContext(r, batch_id=0), component="c", namespace=ns,
                       sidecar=target) as s:  # fmt: skip
            for k, v in zip(keys, values, strict=True):
                s[k] = v
        ours.append(time.perf_counter() - t0)
        base.append(_pipelined_hset(c, f"bench:first:{r}", keys, values))
    want = {k.encode(): orjson.dumps(v) for k, v in zip(keys, values, strict=True)}
    for r in range(repeats):
        if c.hgetall(data_key(ns, "c", r)) != want:
            raise AssertionError("first-write benchmark: Redis does not hold what was written")
    o, bl = statistics.median(ours), statistics.median(base)
    ratio = bl / o
    return Figure(
        f"first write of {fields:,} dict values", fields / o, fields / bl, "fields/s", ratio,
        ">= 0.18 (not below 2026-11-28's)", ratio >= 0.18,
        {"ours_ms": o * 1e3, "baseline_ms": bl * 1e3, "repeats": repeats,
         "baseline": "redis-py pipelined HSET into a new hash, 1,000-field chunks, orjson"},
    )  # fmt: skip
