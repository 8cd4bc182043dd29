"""Figures 2 and 6: a whole restore against HSCAN into a dict, and the sidecar's memory."""

from __future__ import annotations

import os
import statistics
import threading
import time

import orjson

from taskstate.client import LocalContext, TaskState
from taskstate.sidecar.storage.redis.keys import data_key
from taskstate.testing import RedisServer, SidecarProcess
from taskstate.testing.worker import forget_cached_state

from ..common import Bench, Figure, hscan_s, rss_kb, say, value

SIZES = {"full": (1_000_000, 200_000, 3), "quick": (50_000, 5_000, 1)}


def measure(bench: Bench, size: tuple[int, int, int]) -> list[Figure]:
    """The restore throughput figure and the sidecar's RSS during restores."""
    return restore_throughput(bench.redis, bench.side, *size)


def _fill(redis: RedisServer, target: str, ns: str, fields: int) -> None:
    """A `fields`-field state: created by a block, its data written with pipelined HSET."""
    with TaskState(LocalContext(0), component="c", namespace=ns, sidecar=target) as s:
        s["seed"] = 0
    c = redis.client()
    key = data_key(ns, "c", 0)
    pipe = c.pipeline(transaction=False)
    for j in range(0, fields, 5000):
        pipe.hset(
            key,
            mapping={f"k{i}": orjson.dumps(value(i, 0)) for i in range(j, min(fields, j + 5000))},
        )
        if len(pipe) >= 20:
            pipe.execute()
    pipe.execute()
    c.hdel(key, "seed")


def _restore_once(
    target: str, ns: str, side_pid: int, *, sample: bool = False
) -> tuple[float, int, TaskState]:
    """One restore into a fresh mapping: (seconds, sidecar RSS growth in KiB, the state).

    Open, then `len()`, which brings the whole state into a worker that holds none.

    RSS is sampled only when asked, in a run that is not timed (the sampler thread
    would compete with the restore for the GIL).
    """
    forget_cached_state()  # a fresh Python worker
    peak = [0]
    stop = threading.Event()

    def sampler() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], rss_kb(side_pid))
            time.sleep(0.005)

    before = rss_kb(side_pid)
    t = threading.Thread(target=sampler)
    if sample:
        t.start()
    t0 = time.perf_counter()
    s = TaskState(LocalContext(0), component="c", namespace=ns, sidecar=target)
    s.__enter__()
    len(s)  # the whole state (a new worker reads on demand; len() loads everything)
    took = time.perf_counter() - t0
    stop.set()
    if sample:
        t.join()
    s.__exit__(None, None, None)
    return took, max(peak[0] - before, 0), s


def restore_throughput(
    redis: RedisServer, side: SidecarProcess, fields: int, small: int, repeats: int
) -> list[Figure]:
    """Restore `small` and `fields` fields into the mapping, each against HSCAN.

    The baseline is redis-py's HSCAN of the same hash into a dict (the target: 0.9 at
    200,000 and at 1,000,000 fields).
    """
    assert side.proc is not None  # noqa: S101
    pid = side.proc.pid
    out = []
    growth = {}
    for n in (small, fields):
        ns = f"bench-restore-{n}-{os.getpid()}"
        say(f"restore: writing a {n:,}-field state")
        _fill(redis, side.target, ns, n)
        key = data_key(ns, "c", 0)
        c = redis.client()
        ours, base, rss = [], [], []
        _, grew, _ = _restore_once(side.target, ns, pid, sample=True)
        rss.append(grew)
        for _ in range(repeats):
            took, _, s = _restore_once(side.target, ns, pid)
            ours.append(took)
            if s.info.size != n:
                raise AssertionError(f"restore benchmark: {s.info.size} fields, not {n}")
            took, got = hscan_s(c, key)
            base.append(took)
            if got != n:
                raise AssertionError("restore benchmark: HSCAN baseline lost fields")
        growth[n] = max(rss)
        o, bl = statistics.median(ours), statistics.median(base)
        ratio = bl / o
        out.append(Figure(
            f"restore {n:,} fields (100-byte values)", n / o, n / bl, "fields/s", ratio,
            ">= 0.9 and < 3 s", ratio >= 0.9 and o < 3.0,
            {"ours_s": o, "baseline_s": bl, "repeats": repeats,
             "baseline": "redis-py HSCAN COUNT 2000 into a dict of bytes (no decoding)"},
        ))  # fmt: skip
    flat = growth[fields] <= max(growth[small] * 2, 8 * 1024)
    out.append(Figure(
        f"sidecar RSS growth during restore ({small:,} -> {fields:,} fields)",
        growth[fields] / 1024, growth[small] / 1024, "MiB", 
        (growth[fields] + 1) / (growth[small] + 1),
        "flat in the state size (<= 2x, or under 8 MiB)", flat,
        {"peak_growth_kib": growth},
    ))  # fmt: skip
    return out
