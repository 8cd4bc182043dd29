"""Cost of one group-scoped commit, through the real sidecar and a real redis-server.

One `with TaskState` block per group, as in applyInPandasWithState.

    python -m benchmarks.group_commit [--groups N] [--keys-per-group K]

Baselines measured in the same run: the same loop on a plain dict, and a Redis PING.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from taskstate.client import LocalContext, TaskState
from taskstate.testing import RedisServer, SidecarProcess


def _blocks(n: int, keys: int, sidecar: str | None) -> list[float]:
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
            with TaskState(ctx, component="groups", namespace="bench", sidecar=sidecar) as s:
                for k in range(keys):
                    st = s.get(f"g{g}-{k}") or {"count": 0, "total": 0}
                    st["count"] += 1
                    s[f"g{g}-{k}"] = st
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    """Print per-block latency of group commits against the baselines."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--groups", type=int, default=3000)
    p.add_argument("--keys-per-group", type=int, default=1)
    a = p.parse_args()
    with RedisServer(Path(tempfile.mkdtemp()) / "redis") as r:
        side = SidecarProcess(r.url, Path(tempfile.mkdtemp()) / "s.sock").start()
        try:
            _blocks(200, a.keys_per_group, side.target)  # warm up (claim, channel, scripts)
            ts = sorted(_blocks(a.groups, a.keys_per_group, side.target)[1:])
            plain = sorted(_blocks(a.groups, a.keys_per_group, None))
            c = r.client()
            pings = []
            for _ in range(a.groups):
                t0 = time.perf_counter()
                c.ping()
                pings.append(time.perf_counter() - t0)
            pings.sort()
        finally:
            side.kill()

    def pct(xs: list[float], q: float) -> float:
        return xs[min(len(xs) - 1, int(q * len(xs)))] * 1e3

    print(f"group blocks: {a.groups}, keys per group: {a.keys_per_group}")
    print(f"{'':<22}{'p50 ms':>10}{'p99 ms':>10}{'mean ms':>10}")
    for name, xs in (("taskstate block", ts), ("plain dict block", plain), ("redis PING", pings)):
        print(
            f"{name:<22}{pct(xs, 0.5):>10.3f}{pct(xs, 0.99):>10.3f}"
            f"{statistics.fmean(xs) * 1e3:>10.3f}"
        )
    print(f"taskstate block / PING (p50): {pct(ts, 0.5) / pct(pings, 0.5):.1f}x")


if __name__ == "__main__":
    main()
