"""A Python process that serves `with TaskState` blocks on command, like a pooled worker.

Spark may serve one task attempt with several Python worker processes (the groups with
data in one, the timed-out groups in another). `Worker` starts a real, separate process
(spawned: nothing inherited but what is pickled) and drives it over a pipe, so a test
can run blocks of one attempt in two processes in any order, interleaved.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from typing import Any

from taskstate.client import LocalContext


def _serve(conn: Connection, sidecar: str, namespace: str) -> None:
    from taskstate.client import TaskState, TaskStateError, _cache
    from taskstate.client._buffer import buffer

    state: Any = None
    while True:
        cmd, *args = conn.recv()
        try:
            if cmd == "stop":
                conn.send(("ok", None))
                return
            if cmd == "enter":
                ctx, *whole = args
                state = TaskState(ctx, component="c", namespace=namespace, sidecar=sidecar)
                state.__enter__()
                # the whole state (a worker reading on demand loads it), unless told not to
                data = dict(state) if whole != [False] else None
                i = state.info
                reply: Any = {
                    "epoch": i.epoch,
                    "rolled_back": i.rolled_back,
                    "reused_claim": i.reused_claim,
                    "restored": i.restored,
                    "committed_batch": i.committed_batch,
                    "delta": i.delta,
                    "restored_keys": i.restored_keys,
                    "on_demand": i.on_demand,
                    "data": data,
                }
            elif cmd == "read":  # on demand, in one batch
                reply = state.get_many(args[0])
            elif cmd == "held":  # what this process holds of the task between blocks
                held = _cache.sessions[state.task_id]
                reply = {"keys": sorted(held.data or {}), "absent": sorted(held.absent),
                         "complete": held.complete}  # fmt: skip
            elif cmd == "update":
                state.update(args[0])
                reply = None
            elif cmd == "delete":
                for key in args[0]:
                    del state[key]
                reply = None
            elif cmd == "groups":  # one block per group, as applyInPandasWithState runs them
                ctx, groups = args
                for key, value in groups.items():
                    with TaskState(ctx, component="c", namespace=namespace, sidecar=sidecar) as s:
                        if value is None:
                            s.pop(key, None)
                        else:
                            s[key] = (s.get(key) or 0) + value
                reply = buffer.holds(ctx.taskAttemptId())
            elif cmd == "exit":
                state.__exit__(None, None, None)
                reply = _cache.sessions[state.task_id].version
            else:
                raise ValueError(cmd)
            conn.send(("ok", reply))
        except TaskStateError as exc:
            conn.send(("error", type(exc).__name__, str(exc)))


class Worker:
    """One Python process serving task blocks (its own claim cache, its own channel)."""

    def __init__(self, sidecar: str, namespace: str) -> None:
        mp = multiprocessing.get_context("spawn")
        self._conn, child = mp.Pipe()
        self.process = mp.Process(target=_serve, args=(child, sidecar, namespace), daemon=True)
        self.process.start()
        child.close()

    def call(self, *cmd: Any) -> Any:
        """Run a command in the process; raise AssertionError naming any error it had."""
        self._conn.send(cmd)
        if not self._conn.poll(60):
            raise AssertionError(f"worker {self.process.pid} did not answer {cmd[0]!r}")
        reply = self._conn.recv()
        if reply[0] != "ok":
            raise WorkerError(reply[1], reply[2])
        return reply[1]

    def block(
        self, ctx: LocalContext, changes: dict[str, Any], deletes: tuple[str, ...] = ()
    ) -> dict[str, Any]:
        """One whole `with TaskState(ctx)` block writing `changes` and deleting `deletes`.

        Returns what entering found.
        """
        info: dict[str, Any] = self.call("enter", ctx)
        self.call("update", changes)
        if deletes:
            self.call("delete", list(deletes))
        self.call("exit")
        return info

    def close(self) -> None:
        """Stop the process."""
        try:
            if self.process.is_alive():  # a test may have killed it
                self.call("stop")
        finally:
            self.process.join(10)
            if self.process.is_alive():
                self.process.kill()


class WorkerError(Exception):
    """A TaskStateError raised inside a worker: its class name and message."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


@contextmanager
def worker_pool(sidecar: str, namespace: str, n: int = 3) -> Iterator[list[Worker]]:
    """`n` worker processes for one namespace, stopped afterwards."""
    ws = [Worker(sidecar, namespace) for _ in range(n)]
    try:
        yield ws
    finally:
        for w in ws:
            w.close()
