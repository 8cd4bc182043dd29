"""Figure 7: a task handed between pooled Python workers.

One task, 2,000 keys touched per batch, run by the same worker every batch and then by two
workers alternating, with a small and a large state. A batch should cost what it
touches: alternating / same-worker and large / small stay near 1.
"""

from __future__ import annotations

import os
import random
import statistics
from typing import Any

from taskstate.testing import RedisServer

from ..common import Bench, Figure, say
from ..workers import Worker, check_sum

SIZES = {"full": (50_000, 400_000, 15), "quick": (5_000, 40_000, 5)}


def measure(bench: Bench, size: tuple[int, int, int]) -> list[Figure]:
    """The two hand-over figures."""
    return handover(bench.redis, bench.target, *size)


def handover(
    redis: RedisServer, target: str, small: int, large: int, batches: int, touched: int = 2000
) -> list[Figure]:
    """Median batch time: same worker every batch, then two workers alternating."""
    rng = random.Random(7)  # noqa: S311 - which keys a batch touches
    medians: dict[tuple[int, str], float] = {}
    detail: dict[str, Any] = {}
    workers = [Worker(target), Worker(target)]
    try:
        for size in (small, large):
            ns = f"bench-handover-{size}-{os.getpid()}"
            say(f"hand-over: a {size:,}-key state")
            workers[0].block(ns, 0, 0, seed=size)
            batch, deltas = 0, 0
            for how in ("same", "alternating"):
                times = []
                for j in range(batches + 2):
                    batch += 1
                    w = workers[0] if how == "same" else workers[(j + 1) % 2]
                    touch = [f"k{i}" for i in rng.sample(range(size), touched)]
                    took, restored, delta, _, _ = w.block(ns, 0, batch, touch=touch)
                    if j >= 2:  # the first hand-over restores in full: that is recovery
                        times.append(took)
                        deltas += how == "alternating" and delta
                        if how == "alternating" and not (restored and delta):
                            raise AssertionError("hand-over benchmark: a hand-over without delta")
                medians[(size, how)] = statistics.median(times)
            check_sum(redis, ns, 0, size, batch * touched)
            detail[f"{size}_keys_ms"] = {
                how: round(medians[(size, how)] * 1e3, 2) for how in ("same", "alternating")
            }
            detail[f"{size}_delta_restores"] = deltas
    finally:
        for w in workers:
            w.close()
    growth = medians[(large, "alternating")] / medians[(small, "alternating")]
    moved = medians[(large, "alternating")] / medians[(large, "same")]
    detail.update(batches=batches, touched_per_batch=touched,
                  note="ratios here are ours/baseline (lower is better)")  # fmt: skip
    return [
        Figure(
            f"hand-over batch, {large:,} / {small:,} keys (workers alternating)",
            medians[(large, "alternating")] * 1e3, medians[(small, "alternating")] * 1e3,
            "ms", growth, "<= 1.2", growth <= 1.2, detail,
        ),
        Figure(
            f"hand-over batch, alternating / same worker ({large:,} keys)",
            medians[(large, "alternating")] * 1e3, medians[(large, "same")] * 1e3,
            "ms", moved, "<= 1.5", moved <= 1.5, detail,
        ),
    ]  # fmt: skip
