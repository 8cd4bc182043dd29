"""Faults the example job strikes in itself, once per run, in partition 0 of a batch.

A marker file in the run's fault directory records each fault as it strikes, so a
replayed batch does not strike it again and the tests can see that it happened.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskstate.testing.worker import ancestors, before_flush, holds_deferred, task_attempt

if TYPE_CHECKING:
    from .jobs import JobOptions


def once(fault_dir: str, name: str) -> bool:
    """True the first time `name` is asked for in this run (a marker file records it)."""
    try:
        fd = os.open(Path(fault_dir) / name, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def publish_pid(path: Path) -> None:
    """Write this worker's executor pid to `path` whole or not at all.

    A test polls for the file and reads it at once: written in place, it could be read
    between its creation and its text (an empty pid, seen on a loaded CI machine).
    """
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(str(executor_pid() or ""))
    os.replace(tmp, path)


def executor_pid() -> int | None:
    """The executor JVM this worker descends from."""
    for pid in ancestors(os.getpid()):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "java":
                return pid
        except OSError:
            continue
    return None


def maybe_fault(opts: JobOptions, batch: int, part: int) -> None:
    """Strike the configured fault in partition 0 of the chosen batch (once per run)."""
    if part != 0 or not opts.fault_dir:
        return
    if batch == opts.kill_worker_at and once(opts.fault_dir, "worker-killed"):
        os.kill(os.getpid(), signal.SIGKILL)  # after the commit, before Spark has the output
    if batch == opts.pause_at and once(opts.fault_dir, "paused"):
        publish_pid(Path(opts.fault_dir) / "executor-pid")
        time.sleep(3600)  # the test kills the query or the executor now
    if batch == opts.hold_at and once(opts.fault_dir, "held"):
        # the test breaks something outside Spark (e.g. fails Redis over), then releases us
        release = Path(opts.fault_dir) / "release"
        deadline = time.monotonic() + 300
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.05)


# -- Redis outages at a chosen moment of a task ------------------------------------------

OUTAGE_MOMENTS = ("open", "mid", "commit", "end", "held", "flush")
"""Where `--outages BATCH:MOMENT,...` lets the test break Redis, in partition 0's task:
before its Open (`open`), after it and before its reads (`mid`), before its commit
(`commit`), after its commit, as the task ends (`end`: the plugin's flush and batch
mark), and, in applyInPandasWithState with the plugin, after a group whose changes are
held for the flush (`held`) and when the flush asks the worker for them (`flush`). The
task writes `outage-B-MOMENT` in the fault directory (holding its executor's pid, for a
test that kills that executor's sidecar instead) and waits for `outage-B-MOMENT.go`,
which the test writes once Redis is down; how long it stays down is the test's to say."""


def parse_outages(text: str) -> tuple[tuple[int, str], ...]:
    """`"1:open,2:end"` -> ((1, "open"), (2, "end"))."""
    return _plan(text, "outage", "MOMENT", OUTAGE_MOMENTS)


def _plan(text: str, what: str, word: str, kinds: tuple[str, ...]) -> tuple[tuple[int, str], ...]:
    """`BATCH:KIND,...` as pairs, each KIND one of `kinds` (ValueError naming the bad one)."""
    plan = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        batch, _, kind = item.partition(":")
        if not batch.isdigit() or kind not in kinds:
            raise ValueError(
                f"bad {what} {item!r}: expected BATCH:{word}, {word} one of {', '.join(kinds)}"
            )
        plan.append((int(batch), kind))
    return tuple(plan)


def maybe_outage(opts: JobOptions, batch: int, part: int, moment: str) -> None:
    """At `moment` of partition 0's task in a batch with an outage: wait for the test."""
    if part != 0 or not opts.fault_dir or (batch, moment) not in opts.outages:
        return
    name = f"outage-{batch}-{moment}"
    if not once(opts.fault_dir, f"{name}.struck"):
        return
    publish_pid(Path(opts.fault_dir) / name)
    go = Path(opts.fault_dir) / f"{name}.go"
    deadline = time.monotonic() + 600
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


# -- faults around the executor plugin's flush of held group changes -------------------

GROUP_FAULTS = (
    "worker", "sidecar", "redis", "executor", "restart", "block-sidecar", "task-sidecar",
)  # fmt: skip
"""What `--group-faults` can strike in partition 0 of a batch.

Of any API's block (the executor plugin's sidecar, restarted by its supervisor):

- `block-sidecar`: the worker SIGKILLs its executor's sidecar inside its block and sleeps
  1.5 s before the block commits;
- `task-sidecar`: the same right after its block committed, so the task's end meets a
  sidecar that is restarting.

Of applyInPandasWithState, whose later groups are held for the plugin's flush:

- `worker`: the Python worker SIGKILLs itself when the flush asks for its held changes
  (after its last group, before its task is reported done);
- `sidecar`: the worker SIGKILLs its executor's sidecar right after the sidecar recorded
  that the worker holds changes of the attempt (accepted, not yet applied);
- `redis`: Redis stalls (DEBUG SLEEP) for longer than the sidecar's deadline as the flush
  begins;
- `executor`, `restart`: the worker sleeps in the flush, with its executor's pid in
  `flush-<kind>.pid`, while the test kills the executor JVM or the whole query.
"""

REDIS_STALL_S = 6  # longer than the --redis-deadline the tests give the plugin's sidecars


def parse_group_faults(text: str) -> tuple[tuple[int, str], ...]:
    """`"1:worker,2:sidecar"` -> ((1, "worker"), (2, "sidecar"))."""
    return _plan(text, "group fault", "KIND", GROUP_FAULTS)


_ARMED: dict[int, Callable[[], None]] = {}  # task attempt -> the fault at its flush
_HOOKED: list[bool] = []  # this worker's flush hook is in place


def maybe_block_fault(opts: JobOptions, batch: int, part: int, where: str) -> None:
    """Inside (`where="block"`) or right after (`"task"`) a block: kill the sidecar."""
    kind = dict(opts.group_faults).get(batch) if part == 0 and opts.fault_dir else None
    if kind != f"{where}-sidecar" or not once(opts.fault_dir, kind):
        return
    for pid in sidecars_of(executor_pid() or -1):
        os.kill(pid, signal.SIGKILL)
    if where == "block":
        time.sleep(1.5)


def maybe_group_fault(opts: JobOptions, s: Any, batch: int, part: int) -> None:
    """After a group block of partition 0 in a faulted batch: strike or arm the fault.

    Only once the block's changes are held for the flush (the attempt's later groups).
    """
    if part == 0 and opts.outages and not isinstance(s, dict) and holds_deferred(s):
        maybe_outage(opts, batch, part, "held")
        if (batch, "flush") in opts.outages:
            _arm(task_attempt(s), lambda: maybe_outage(opts, batch, part, "flush"))
    kind = dict(opts.group_faults).get(batch) if part == 0 and opts.fault_dir else None
    if kind in (None, "block-sidecar", "task-sidecar") or isinstance(s, dict):
        return
    if not holds_deferred(s):
        return
    if kind == "sidecar":
        if once(opts.fault_dir, "group-sidecar"):
            for pid in sidecars_of(executor_pid() or -1):
                os.kill(pid, signal.SIGKILL)
        return
    _arm(task_attempt(s), lambda: _strike_at_flush(kind, opts))


def _arm(attempt: int, strike: Callable[[], None]) -> None:
    """Strike when the flush asks this worker for `attempt`'s held changes."""
    if not _HOOKED:  # once per worker
        _HOOKED.append(True)
        before_flush(_strike_if_armed)
    _ARMED[attempt] = strike


def _strike_if_armed(attempt: int) -> None:
    strike = _ARMED.pop(attempt, None)
    if strike is not None:
        strike()


def _strike_at_flush(kind: str, opts: JobOptions) -> None:
    marker = f"flush-{kind}"
    if not once(opts.fault_dir, marker):
        return
    if kind == "worker":
        os.kill(os.getpid(), signal.SIGKILL)
    elif kind == "redis":
        import threading

        import redis

        client = redis.Redis.from_url(opts.redis_url)
        threading.Thread(
            target=lambda: client.execute_command("DEBUG", "SLEEP", REDIS_STALL_S),  # type: ignore[no-untyped-call]
            daemon=True,
        ).start()
        time.sleep(0.3)  # Redis is asleep before the flush's commit reaches it
    else:  # executor, restart: the test kills it now
        publish_pid(Path(opts.fault_dir) / f"{marker}.pid")
        time.sleep(3600)


def sidecars_of(executor: int) -> list[int]:
    """Pids of the sidecars the executor plugin started for JVM `executor`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        # the plugin starts them with --parent-pid <executor>
        if b"taskstate.sidecar" in args and str(executor).encode() in args:
            found.append(int(entry.name))
    return found
