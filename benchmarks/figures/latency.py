"""Figure 3: the latency of a small commit (10 keys, claim held), against a PING."""

from __future__ import annotations

import os
import time

from taskstate.client import LocalContext, TaskState
from taskstate.sidecar.storage.redis.keys import data_key
from taskstate.testing import RedisServer

from ..common import Bench, Figure

SIZES = {"full": 2000, "quick": 200}


def measure(bench: Bench, size: int) -> list[Figure]:
    """The small commit latency figure."""
    return [commit_latency(bench.redis, bench.target, size)]


def commit_latency(redis: RedisServer, target: str, iterations: int) -> Figure:
    """One commit of a 10-key change (claim held), against a Redis PING round trip."""
    ns = f"bench-latency-{os.getpid()}"
    lat = []
    with TaskState(LocalContext(0), component="c", namespace=ns, sidecar=target) as s:
        for it in range(iterations + 50):
            for k in range(10):
                s[f"k{k}"] = it
            t0 = time.perf_counter()
            s.commit()
            if it >= 50:
                lat.append(time.perf_counter() - t0)
    c = redis.client()
    pings = []
    for _ in range(iterations + 50):
        t0 = time.perf_counter()
        c.ping()
        pings.append(time.perf_counter() - t0)
    pings = pings[50:]
    got = c.hget(data_key(ns, "c", 0), "k9")
    if got != str(iterations + 49).encode():
        raise AssertionError("latency benchmark: the last commit is not in Redis")
    lat.sort()
    pings.sort()

    def pct(xs: list[float], q: float) -> float:
        return xs[min(len(xs) - 1, int(q * len(xs)))]

    p50, p99, ping50 = pct(lat, 0.5), pct(lat, 0.99), pct(pings, 0.5)
    ratio = p50 / ping50
    return Figure(
        "commit latency, 10 keys (p50)", p50 * 1e3, ping50 * 1e3, "ms", ratio,
        "p50 <= 5x PING", ratio <= 5,
        {"p99_ms": p99 * 1e3, "ping_p99_ms": pct(pings, 0.99) * 1e3,
         "iterations": iterations, "note": "ratio here is ours/PING (lower is better)"},
    )  # fmt: skip
