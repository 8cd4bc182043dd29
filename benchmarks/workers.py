"""Python worker processes for the figures that hand tasks between workers.

PySpark hands a task to whichever pooled worker is idle. Here real, separate worker
processes (spawned, each with its own cache and gRPC channel, as PySpark's are) take
turns on tasks through the real sidecar and redis-server (figures/handover.py and
figures/memory.py).
"""

from __future__ import annotations

import multiprocessing
import os
from multiprocessing.connection import Connection

from taskstate.sidecar.storage.redis.keys import data_key
from taskstate.testing import RedisServer

from .common import rss_kb


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
        conn.send((took, i.restored, i.delta, i.restored_keys, rss_kb(os.getpid())))


class Worker:
    """One spawned worker process; `block` runs one `with TaskState` block in it."""

    def __init__(self, target: str, env: dict[str, str] | None = None) -> None:
        mp = multiprocessing.get_context("spawn")
        self.conn, child = mp.Pipe()
        self.proc = mp.Process(target=_serve, args=(child, target, env or {}), daemon=True)
        self.proc.start()
        child.close()

    def block(
        self, ns: str, part: int, batch: int, *, seed: int = 0, touch: list[str] | None = None
    ) -> tuple[float, bool, bool, int, int]:
        """One block: (seconds, restored, delta, keys restored, the worker's RSS in KiB)."""
        self.conn.send(("block", ns, part, batch, seed, touch or []))
        if not self.conn.poll(600):
            raise AssertionError("hand-over benchmark: a worker did not answer")
        reply: tuple[float, bool, bool, int, int] = self.conn.recv()
        return reply

    def close(self) -> None:
        """Stop the process."""
        self.conn.send(("stop",))
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()


def check_sum(redis: RedisServer, ns: str, part: int, keys: int, increments: int) -> None:
    """The task's keys hold their seeded values plus every increment made to them."""
    data = redis.client().hgetall(data_key(ns, "c", part))
    got = sum(int(v) for v in data.values())
    if len(data) != keys or got != sum(range(keys)) + increments:
        raise AssertionError(f"hand-over benchmark: task {ns}/c/{part} does not hold its counts")
