"""Figure 8: the Python workers' memory under the cache bound.

4 workers serve 8 tasks of 250,000 keys each in turn; their total RSS with a cache bound,
against the same run with a bound of 0 (what the running blocks themselves take) and
without a bound (every worker keeps every state).
"""

from __future__ import annotations

import os

from taskstate.testing import RedisServer

from ..common import Bench, Figure, say
from ..workers import Worker, check_sum

SIZES = {"full": (8, 250_000, 64), "quick": (4, 20_000, 2)}


def measure(bench: Bench, size: tuple[int, int, int]) -> list[Figure]:
    """The executor memory figure."""
    return [executor_memory(bench.redis, bench.target, *size)]


def executor_memory(
    redis: RedisServer, target: str, tasks: int, keys: int, bound_mib: int, n_workers: int = 4
) -> Figure:
    """Total RSS of the workers after serving every task in each, for three cache bounds."""
    ns = f"bench-memory-{os.getpid()}"
    # whole copies (TASKSTATE_LOAD=eager), the most a worker can cache
    seeder = Worker(target, {"TASKSTATE_CACHE_BYTES": "0", "TASKSTATE_LOAD": "eager"})
    try:
        say(f"executor memory: {tasks} tasks of {keys:,} keys")
        for part in range(tasks):
            seeder.block(ns, part, 0, seed=keys)
    finally:
        seeder.close()
    rss: dict[str, int] = {}
    batch = 0
    bounds = {"bound": str(bound_mib << 20), "zero": "0", "unbounded": str(1 << 60)}
    for name, bound in bounds.items():
        say(f"executor memory: TASKSTATE_CACHE_BYTES={bound}")
        env = {"TASKSTATE_CACHE_BYTES": bound, "TASKSTATE_LOAD": "eager"}
        ws = [Worker(target, env) for _ in range(n_workers)]
        try:
            peak = [0] * n_workers
            for rnd in range(n_workers):  # every worker serves every task once
                batch += 1
                for part in range(tasks):
                    w = (part + rnd) % n_workers
                    *_, kb = ws[w].block(ns, part, batch, touch=[f"k{part}"])
                    peak[w] = max(peak[w], kb)
            rss[name] = sum(peak)
        finally:
            for worker in ws:
                worker.close()
    for part in range(tasks):
        check_sum(redis, ns, part, keys, batch)
    allowed = rss["zero"] / 1024 + n_workers * bound_mib  # MiB
    ratio = rss["bound"] / 1024 / allowed
    return Figure(
        f"executor memory, {n_workers} workers x {tasks} tasks of {keys:,} keys",
        rss["bound"] / 1024, rss["zero"] / 1024, "MiB", ratio,
        f"RSS <= RSS(bound 0) + {n_workers} x TASKSTATE_CACHE_BYTES ({bound_mib} MiB)",
        ratio <= 1.0,
        {"rss_mib": {k: round(v / 1024) for k, v in rss.items()},
         "bound_mib_per_worker": bound_mib,
         "note": "ratio = RSS / (RSS with bound 0 + workers x bound), lower is better; "
                 "'unbounded' is every worker keeping every task's state, as before the bound"},
    )  # fmt: skip
