"""Figures 7 and 8: a task handed between pooled Python workers, and the workers' memory.

PySpark hands a task to whichever pooled worker is idle. Here real, separate worker
processes (spawned, each with its own cache and gRPC channel, as PySpark's are) take
turns on tasks through the real sidecar and redis-server:

- **hand-over**: one task, 2,000 keys touched per batch, run by the same worker every
  batch and then by two workers alternating, with a small and a large state. A batch
  should cost what it touches: alternating / same-worker and large / small stay near 1.
- **executor memory**: 4 workers serve 8 tasks of 250,000 keys each in turn; their
  total RSS with a cache bound, against the same run with a bound of 0 (what the running
  blocks themselves take) and without a bound (every worker keeps every state).
"""

from __future__ import annotations

import multiprocessing
import os
import random
import statistics
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from taskstate.sidecar.storage.redis.keys import data_key
from taskstate.testing import RedisServer


def _serve(conn: Connection, target: str, env: dict[str, str]) -> None:
    os.environ.update(env)
    import time

    from taskstate.client import LocalContext, TaskState

    app = f"bench-{os.getpid()}"  # one application: attempts are named in it
    attempt = 0
    while True:
        cmd, *args = conn.recv()
        if cmd == "stop":
            conn.send(None)
            return
        ns, part, batch, seed, touch = args
        attempt += 1
        ctx = LocalContext(part, batch_id=batch, app_id=app, task_attempt_id=attempt)
        t0 = time.perf_counter()
        with TaskState(ctx, component="c", namespace=ns, sidecar=target) as s:
            if seed:
                s.update({f"k{i}": i for i in range(seed)})
            s.prefetch(touch)  # what a job does with a frame's keys; a no-op on a whole copy
            for k in touch:
                s[k] = s[k] + 1
        took = time.perf_counter() - t0
        i = s.info
        conn.send((took, i.restored, i.delta, i.restored_keys, _rss_kb(os.getpid())))


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class _Worker:
    def __init__(self, target: str, env: dict[str, str] | None = None) -> None:
        mp = multiprocessing.get_context("spawn")
        self.conn, child = mp.Pipe()
        self.proc = mp.Process(target=_serve, args=(child, target, env or {}), daemon=True)
        self.proc.start()
        child.close()

    def block(
        self, ns: str, part: int, batch: int, *, seed: int = 0, touch: list[str] | None = None
    ) -> tuple[float, bool, bool, int, int]:
        self.conn.send(("block", ns, part, batch, seed, touch or []))
        if not self.conn.poll(600):
            raise AssertionError("hand-over benchmark: a worker did not answer")
        reply: tuple[float, bool, bool, int, int] = self.conn.recv()
        return reply

    def close(self) -> None:
        self.conn.send(("stop",))
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()


def _check_sum(redis: RedisServer, ns: str, part: int, keys: int, increments: int) -> None:
    data = redis.client().hgetall(data_key(ns, "c", part))
    got = sum(int(v) for v in data.values())
    if len(data) != keys or got != sum(range(keys)) + increments:
        raise AssertionError(f"hand-over benchmark: task {ns}/c/{part} does not hold its counts")


def handover(
    redis: RedisServer, target: str, small: int, large: int, batches: int, touched: int = 2000
) -> list[Any]:
    """Median batch time: same worker every batch, then two workers alternating."""
    from .__main__ import Figure, _say

    rng = random.Random(7)  # noqa: S311 - which keys a batch touches
    medians: dict[tuple[int, str], float] = {}
    detail: dict[str, Any] = {}
    workers = [_Worker(target), _Worker(target)]
    try:
        for size in (small, large):
            ns = f"bench-handover-{size}-{os.getpid()}"
            _say(f"hand-over: a {size:,}-key state")
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
            _check_sum(redis, ns, 0, size, batch * touched)
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


def executor_memory(
    redis: RedisServer, target: str, tasks: int, keys: int, bound_mib: int, n_workers: int = 4
) -> Any:
    """Total RSS of the workers after serving every task in each, for three cache bounds."""
    from .__main__ import Figure, _say

    ns = f"bench-memory-{os.getpid()}"
    # whole copies (TASKSTATE_LOAD=eager), the most a worker can cache
    seeder = _Worker(target, {"TASKSTATE_CACHE_BYTES": "0", "TASKSTATE_LOAD": "eager"})
    try:
        _say(f"executor memory: {tasks} tasks of {keys:,} keys")
        for part in range(tasks):
            seeder.block(ns, part, 0, seed=keys)
    finally:
        seeder.close()
    rss: dict[str, int] = {}
    batch = 0
    bounds = {"bound": str(bound_mib << 20), "zero": "0", "unbounded": str(1 << 60)}
    for name, bound in bounds.items():
        _say(f"executor memory: TASKSTATE_CACHE_BYTES={bound}")
        env = {"TASKSTATE_CACHE_BYTES": bound, "TASKSTATE_LOAD": "eager"}
        ws = [_Worker(target, env) for _ in range(n_workers)]
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
            for w in ws:
                w.close()
    for part in range(tasks):
        _check_sum(redis, ns, part, keys, batch)
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
