"""Figure 12: the cost of one group block, through the real sidecar and redis-server.

One `with TaskState` block per group, as in applyInPandasWithState without the executor
plugin (every block commits at its exit), all in one task attempt; the same loop on a
plain dict and a Redis PING are measured in the same run.
"""

from __future__ import annotations

import statistics
import time

from taskstate.client import LocalContext, TaskState
from taskstate.sidecar.storage.redis.keys import data_key

from ..common import Bench, Figure, pct

SIZES = {"full": (3000, 1), "quick": (300, 1)}


def _blocks(n: int, keys: int, sidecar: str | None, ns: str) -> list[float]:
    ctx = LocalContext(0, batch_id=0)  # one task attempt, many groups
    plain: dict[str, dict[str, int]] = {}
    out = []
    for g in range(n):
        t0 = time.perf_counter()
        if sidecar is None:
            s = plain
            for k in range(keys):
                st = s.get(f"g{g}-{k}") or {"count": 0, "total": 0}
                st["count"] += 1
                s[f"g{g}-{k}"] = st
        else:
            with TaskState(ctx, component="groups", namespace=ns, sidecar=sidecar) as ts:
                for k in range(keys):
                    st = ts.get(f"g{g}-{k}") or {"count": 0, "total": 0}
                    st["count"] += 1
                    ts[f"g{g}-{k}"] = st
        out.append(time.perf_counter() - t0)
    return out


def measure(bench: Bench, size: tuple[int, int]) -> list[Figure]:
    """Per-block latency of group blocks (p50), against a Redis PING."""
    groups, keys = size
    ns = f"bench-blocks-{time.time_ns() % 10**9}"
    _blocks(200, keys, bench.target, ns + "-warm")  # the claim, the channel, the scripts
    ours = sorted(_blocks(groups, keys, bench.target, ns)[1:])
    plain = sorted(_blocks(groups, keys, None, ns))
    c = bench.redis.client()
    pings = []
    for _ in range(groups):
        t0 = time.perf_counter()
        c.ping()
        pings.append(time.perf_counter() - t0)
    pings.sort()
    stored = c.hlen(data_key(ns, "groups", 0))
    if stored != groups * keys:
        raise AssertionError(f"blocks benchmark: {stored} keys stored, not {groups * keys}")
    ratio = pct(ours, 0.5) / pct(pings, 0.5)
    return [
        Figure(
            f"group block, {keys} key(s), commit at its exit (p50)",
            pct(ours, 0.5) * 1e3, pct(pings, 0.5) * 1e3, "ms", ratio,
            "none (informational; ratio is ours/PING, lower is better)", None,
            {"groups": groups, "keys_per_group": keys,
             "p99_ms": pct(ours, 0.99) * 1e3, "mean_ms": statistics.fmean(ours) * 1e3,
             "plain_dict_p50_ms": pct(plain, 0.5) * 1e3, "ping_p99_ms": pct(pings, 0.99) * 1e3},
        )
    ]  # fmt: skip
