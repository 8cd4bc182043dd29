"""Sessionization with applyInPandasWithState and event-time timeouts (Spark's example).

Sessions per word: a session starts with a word's first event and closes when the word
has been silent for GAP_MS of event time (an event-time timeout): one group call is
taskstate.demo.sessions.session_call, which the benchmark of this pattern shares.
`--state groupstate` keeps the session in Spark's GroupState (the reference); `--state
taskstate` keeps it in TaskState and gives GroupState only what Spark needs to keep and
fire the timer: a one-field marker and the timeout. Every group call emits a row: the
session after an update, or the closed session when its timeout fires.

Spark runs a task's groups with new data and its timed-out groups in two Python runners,
each on whichever pooled worker is idle: one task attempt is often served by two worker
processes (always with `--reuse false`). Every group call appends
"task_attempt_id batch timed_out" to PIDS_DIR/<pid>, so a test can see that.

Faults strike once, in the first timed-out group of a batch >= `--fault-batch`, right
after its commit: `worker` SIGKILLs the Python worker; `pause` sleeps (the test kills the
whole query); `hold` waits for FAULT_DIR/release (the test kills and restarts the
sidecar meanwhile).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from taskstate.demo.sessions import session_call

BATCH_MS = 10_000  # event time covered by one micro-batch
T0_MS = 1_700_000_000_000
SOURCE = "taskstate_session_events"
OUT_SCHEMA = "batch long, word string, start long, last long, count long, closed boolean"
COMPONENT = "sessions"


def event(i: int, per_batch: int, words: int, batches: int) -> tuple[int, str, dt.datetime]:
    """Event i: each word is heard in two batches, then silent in two (its session times
    out); the last batch only moves event time far on, closing every session."""
    b, j = divmod(i, per_batch)
    if b == batches - 1:
        word, ms = "~end", T0_MS + 10**9 + j  # closes every session still open
    else:
        active = [w for w in range(words) if (b + w) // 2 % 2 == 0]
        word = f"w{active[j % len(active)]:02d}"
        ms = T0_MS + b * BATCH_MS + j * (BATCH_MS // per_batch)
    return i, word, dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)


def fault(a: argparse.Namespace, batch: int) -> None:
    """Strike the configured fault (after a timed-out group's commit), once per run."""
    from taskstate.demo.faults import once

    if a.fault == "none" or batch < a.fault_batch or not once(a.fault_dir, "struck"):
        return
    if a.fault == "worker":
        os.kill(os.getpid(), signal.SIGKILL)
    elif a.fault == "pause":
        time.sleep(3600)  # the test kills the whole query now
    elif a.fault == "hold":
        release = Path(a.fault_dir) / "release"
        deadline = time.monotonic() + 300
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.05)


def group_fn(a: argparse.Namespace) -> Callable[..., Iterator[Any]]:
    """The applyInPandasWithState function for `--state`."""

    def per_group(key: tuple[str], frames: Iterator[Any], gs: Any) -> Iterator[Any]:
        import pandas as pd
        from pyspark import TaskContext

        ctx = TaskContext.get()
        assert ctx is not None
        batch = int(ctx.getLocalProperty("streaming.sql.batchId") or -1)
        with open(Path(a.pids_dir) / str(os.getpid()), "a") as log:
            log.write(f"{ctx.taskAttemptId()} {batch} {int(gs.hasTimedOut)}\n")
        (word,) = key
        stamps = [int(t.value // 1_000_000) for f in frames for t in f["ts"]]
        if a.state == "groupstate":
            session, closed = session_call(word, stamps, gs)
        else:
            from taskstate.client import TaskState

            with TaskState(ctx, component=COMPONENT, namespace=a.namespace, sidecar=a.sidecar) as s:
                session, closed = session_call(word, stamps, gs, s)
        start, last, count = session
        yield pd.DataFrame([(batch, word, start, last, count, closed)], columns=list(_COLUMNS))
        if closed:
            fault(a, batch)

    return per_group


_COLUMNS = ("batch", "word", "start", "last", "count", "closed")


def main(argv: list[str]) -> int:
    """One run of the query, until the no-data batch after the last data batch commits."""
    p = argparse.ArgumentParser()
    p.add_argument("--state", choices=["taskstate", "groupstate"], required=True)
    p.add_argument("--namespace", default="")
    p.add_argument("--sidecar", default="")
    p.add_argument("--out", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--pids-dir", required=True)
    p.add_argument("--fault-dir", required=True)
    p.add_argument("--fault", choices=["none", "worker", "pause", "hold"], default="none")
    p.add_argument("--fault-batch", type=int, default=3)
    p.add_argument("--batches", type=int, default=8)
    p.add_argument("--per-batch", type=int, default=120)
    p.add_argument("--words", type=int, default=30)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--master", default="local[2,4]")
    p.add_argument("--reuse", choices=["true", "false"], default="true")
    a = p.parse_args(argv)

    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.state import GroupStateTimeout

    from taskstate.demo.jobs import range_stream, run_until_committed

    spark = (
        SparkSession.builder.master(a.master)
        .appName(f"sessions-{a.state}")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(a.partitions))
        .config("spark.python.worker.reuse", a.reuse)
        .config("spark.speculation", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    if a.state == "taskstate":
        from taskstate.spark_plugin import configure

        configure(spark, namespace=a.namespace, sidecar=a.sidecar)

    def make_row(options: Any) -> Callable[[int], tuple[Any, ...]]:
        per, words, end = int(options["per_batch"]), int(options["words"]), int(options["end"])
        return lambda i: event(i, per, words, end)

    # `end`: the batch count the rows are made for (its last batch closes every session)
    options = {"per_batch": a.per_batch, "batches": a.batches, "words": a.words, "end": a.batches}
    schema = "event_id long, word string, ts timestamp"
    files = Path(f"{a.checkpoint}.events")  # where Spark reads them from files (before 4.2)
    events = range_stream(spark, SOURCE, schema, make_row, options, files)
    events = events.withWatermark("ts", "0 seconds")
    state_schema = "start long, last long, count long" if a.state == "groupstate" else "m boolean"
    query = (
        events.groupBy("word")
        .applyInPandasWithState(
            group_fn(a), OUT_SCHEMA, state_schema, "append", GroupStateTimeout.EventTimeTimeout
        )
        .writeStream.format("json")
        .option("path", a.out)
        .option("checkpointLocation", a.checkpoint)
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    # batches 0..N-1 carry data; batch N is the no-data batch in which the last sessions
    # time out (the last data batch moved the watermark far on)
    return run_until_committed(spark, query, a.checkpoint, a.batches + 1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
