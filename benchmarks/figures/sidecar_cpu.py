"""Figures 18-19: a block (Open + Commit of 10 keys) end to end, and what it costs the sidecar.

1, 2 and 4 client processes (spawned, as Spark's Python workers are) each loop
`with TaskState(...)` blocks that write 10 keys of about 100 bytes, a new task attempt
per block (as each micro-batch is); the sidecar's and Redis' CPU time over the run (their
processes' times), divided by the blocks: what one block costs each, and the blocks per
second one sidecar sustained; then the same blocks with `open_at="exit"`, whose Open goes
with the Commit in one call (OpenCommit). The latency figure is the p50 of one client's blocks
against redis-py's PING p50, the two interleaved in that client's process (a PING, then a
block, and again), so that both are measured at the same moments: PING's p50 on this
kind of machine moves between 0.03 and 0.09 ms from one minute to the next.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import time
from multiprocessing.queues import Queue
from typing import Any

from ..common import Bench, Figure, pct, say

SIZES = {"full": (600, (1, 2, 4)), "quick": (100, (1, 2))}
WARM = 20


def _cpu_s(pid: int) -> float:
    """A process's user + system CPU seconds so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _redis_cpu_s(c: Any) -> float:
    """Redis's own CPU seconds so far.

    Its getrusage, finer than /proc's clock ticks: a quick run costs Redis less than one.
    """
    cpu = c.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def _client(
    target: str,
    ns: str,
    part: int,
    blocks: int,
    out: Queue[list[float]],
    redis_url: str | None = None,
    open_at: str = "enter",
) -> None:
    """`blocks` blocks (after WARM); with `redis_url`, a PING before each, timed too."""
    import redis

    from taskstate.client import LocalContext, TaskState

    value = "x" * 90
    lat = []
    pings = []
    ping = redis.Redis.from_url(redis_url).ping if redis_url else None
    for b in range(blocks + WARM):
        if ping is not None:
            t0 = time.perf_counter()
            ping()
            if b >= WARM:
                pings.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        with TaskState(LocalContext(part, batch_id=b), component="c", namespace=ns,
                       sidecar=target, open_at=open_at) as s:  # fmt: skip
            for k in range(10):
                s[f"k{k}"] = value
        if b >= WARM:
            lat.append(time.perf_counter() - t0)
    out.put(lat)
    if ping is not None:
        out.put(pings)


def measure(bench: Bench, size: tuple[int, tuple[int, ...]]) -> list[Figure]:
    """The block latency figures and the sidecar's CPU per block (Open at enter, at exit)."""
    return [f for open_at in ("enter", "exit") for f in _measure(bench, size, open_at)]


# how each variant's figures are named
_HOW = {
    "enter": ("block writing 10 keys (Open + Commit)", "(Open + Commit, 10 keys)"),
    "exit": (
        "block writing 10 keys in one call (open_at='exit')",
        "in one call (open_at='exit', 10 keys)",
    ),
}


def _measure(bench: Bench, size: tuple[int, tuple[int, ...]], open_at: str) -> list[Figure]:
    blocks, clients = size
    assert bench.side.proc is not None  # noqa: S101 - started by the driver
    side_pid = bench.side.proc.pid
    c = bench.redis.client()
    pings = []
    for _ in range(2000):
        t0 = time.perf_counter()
        c.ping()
        pings.append(time.perf_counter() - t0)
    ping50 = statistics.median(pings)
    ctx = multiprocessing.get_context("spawn")
    figures: list[Figure] = []
    per_block: dict[int, tuple[float, float, float]] = {}
    for n in clients:
        ns = f"bench-cpu-{n}-{time.time_ns() % 10**9}"
        q: Queue[list[float]] = ctx.Queue()
        procs = [ctx.Process(target=_client, args=(bench.target, ns, p, blocks, q, None, open_at))
                 for p in range(n)]  # fmt: skip
        s0, r0, t0 = _cpu_s(side_pid), _redis_cpu_s(c), time.perf_counter()
        for p in procs:
            p.start()
        lats = [x for _ in procs for x in q.get()]
        for p in procs:
            p.join()
        wall = time.perf_counter() - t0
        done = n * (blocks + WARM)
        side_us = 1e6 * (_cpu_s(side_pid) - s0) / done
        redis_us = 1e6 * (_redis_cpu_s(c) - r0) / done
        per_block[n] = (side_us, redis_us, done / wall)
        if c.hlen(f"ts:{{{ns}/c/0}}:data") != 10:
            raise AssertionError("sidecar CPU benchmark: a task does not hold its 10 keys")
        say(f"open_at={open_at}, {n} client(s): sidecar {side_us:.0f} us/block, "
            f"redis {redis_us:.0f} us/block, {done / wall:.0f} blocks/s, "
            f"p50 {statistics.median(lats) * 1e3:.2f} ms")  # fmt: skip
    # the latency: one client, a PING and a block in turn (its CPU is not counted above)
    q = ctx.Queue()
    ns = f"bench-lat-{time.time_ns() % 10**9}"
    proc = ctx.Process(
        target=_client, args=(bench.target, ns, 0, blocks, q, bench.redis.url, open_at)
    )
    proc.start()
    lats, block_pings = sorted(q.get()), sorted(q.get())
    proc.join()
    p50, bping50 = pct(lats, 0.5), pct(block_pings, 0.5)
    figures.append(Figure(
        f"{_HOW[open_at][0]}, p50 vs redis-py PING p50 (interleaved)",
        p50 * 1e3, bping50 * 1e3, "ms", p50 / bping50, "<= 15", p50 / bping50 <= 15,
        {"p99_ms": pct(lats, 0.99) * 1e3, "ping_p50_ms_before_the_runs": ping50 * 1e3,
         "ratio_vs_ping_before_the_runs": p50 / ping50},
    ))  # fmt: skip
    for n, (side_us, redis_us, rate) in per_block.items():
        ratio = side_us / redis_us if redis_us else float("inf")
        detail: dict[str, Any] = {"blocks_per_s": round(rate), "sidecar_us_per_key": side_us / 10,
                                  "redis_us_per_block": round(redis_us)}  # fmt: skip
        figures.append(Figure(
            f"sidecar CPU per block {_HOW[open_at][1]}, {n} client(s) at once, vs Redis'",
            side_us, redis_us, "us/block", ratio, "<= 2", ratio <= 2, detail,
        ))  # fmt: skip
    return figures
