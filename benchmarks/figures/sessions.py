"""Figure 20: Spark's sessionization example, the session in TaskState against GroupState.

The pattern of Spark's own example (taskstate.demo.sessions, which the e2e job
tests/e2e/jobs/sessions.py runs under faults): events of words,
`groupBy("word").applyInPandasWithState(...)` with event-time timeouts, a session per
word that closes when the word has been silent for GAP_MS of event time. Each batch,
half the words have one event each (a word is heard in two batches, then silent in two),
and the sessions of words gone silent time out. Every group call emits one row: the
session after its update, or the closed session when its timeout fires.

Variants, each a streaming query in a child process of its own (`local[2]`, 2 shuffle
partitions, the same replayable source):

- `spark`: the session in GroupState (the baseline);
- `deferred`: the session in TaskState, with the executor plugin (its flush barrier);
  GroupState keeps only a marker and the timer, which Spark keeps only for keys with a
  GroupState;
- `sync`: the same with `spark.taskstate.flushBarrier=false` (a commit per group call, as
  without the plugin).

The figure is the time per group call: the median batch divided by the group calls of
a task in a batch (the two tasks of a batch run side by side on the two cores), taskstate
with the plugin against GroupState; the target is on the difference (issue 33: at most
+0.05 ms per group call). The output of each taskstate query must equal GroupState's, row for
row, or the figure fails.

Run by `python -m benchmarks` in a child process per query:
    python -m benchmarks.figures.sessions --variant spark|deferred|sync --words N ...
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from taskstate.demo.sessions import session_call

from ..common import Bench, Figure, say
from ..spark_query import plugin_session, progress, register_batch_source, run_child

SOURCE = "taskstate_bench_sessions"
SCHEMA = "word string, ts timestamp"
OUT = "batch long, word string, start long, last long, count long, closed boolean"
COLUMNS = ("batch", "word", "start", "last", "count", "closed")
BATCH_MS = 10_000  # event time covered by one batch
T0_MS = 1_700_000_000_000
COMPONENT = "sessions"
FIRST_TIMED = 3  # batches before this one fill the pipeline: words first go silent in 2


def active(batch: int, words: int) -> list[int]:
    """The words heard in `batch`: each is heard in two batches, then silent in two."""
    return [w for w in range(words) if (batch + w) // 2 % 2 == 0]


def rows(options: Any) -> tuple[Callable[[int], int], Callable[[int, int], tuple[Any, ...]]]:
    """Batch b: one event for each of its active words, spread over its event time."""
    words = int(options["words"])
    cache: dict[int, list[int]] = {}

    def heard(b: int) -> list[int]:
        if b not in cache:
            cache[b] = active(b, words)
        return cache[b]

    def row(b: int, i: int) -> tuple[Any, ...]:
        ws = heard(b)
        ms = T0_MS + b * BATCH_MS + i * BATCH_MS // len(ws)
        return f"w{ws[i]:06d}", dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)

    return (lambda b: len(heard(b))), row


_CALL_FILES: dict[tuple[str, int], Any] = {}  # (calls dir, pid) -> its open file


def note_call(calls_dir: str, batch: int, us: float) -> None:
    """Append one group call's state time to CALLS_DIR/calls-PID.txt.

    Line-buffered: a worker is killed at the end, and a task's last calls count too.
    """
    key = (calls_dir, os.getpid())
    f = _CALL_FILES.get(key)
    if f is None:
        f = _CALL_FILES[key] = open(  # kept open for the process
            os.path.join(calls_dir, f"calls-{os.getpid()}.txt"), "a", buffering=1
        )
    f.write(f"{batch} {us:.1f}\n")


def group_fn(variant: str, namespace: str, calls_dir: str) -> Callable[..., Iterator[Any]]:
    """The applyInPandasWithState function of `variant`.

    Each call also times its state work (GroupState's, or the whole `with TaskState`
    block) into CALLS_DIR (`note_call`), the same few microseconds of writing in both.
    """

    def per_group(key: tuple[str], frames: Iterator[Any], gs: Any) -> Iterator[Any]:
        import time

        import pandas as pd
        from pyspark import TaskContext

        from benchmarks.figures.sessions import note_call

        ctx = TaskContext.get()
        batch = int(ctx.getLocalProperty("streaming.sql.batchId") or -1) if ctx else -1
        (word,) = key
        stamps = [int(t.value // 1_000_000) for f in frames for t in f["ts"]]
        t0 = time.perf_counter()
        if variant == "spark":
            session, closed = session_call(word, stamps, gs)
        else:
            from taskstate.client import TaskState

            with TaskState(ctx, component=COMPONENT, namespace=namespace) as s:
                session, closed = session_call(word, stamps, gs, s)
        note_call(calls_dir, batch, 1e6 * (time.perf_counter() - t0))
        start, last, count = session
        yield pd.DataFrame([(batch, word, start, last, count, closed)], columns=list(COLUMNS))

    return per_group


def state_us(work: Path, batches: int) -> tuple[float, float]:
    """Median and mean microseconds of state work per group call, timed batches only."""
    us = [
        float(t)
        for f in (work / "calls").glob("calls-*.txt")
        for b, t in (line.split() for line in f.read_text().splitlines())
        if FIRST_TIMED <= int(b) < batches
    ]
    if not us:
        raise AssertionError(f"sessions benchmark: no group call timed in {work / 'calls'}")
    return statistics.median(us), statistics.fmean(us)


def job(a: argparse.Namespace) -> int:
    """Run one query until every batch is committed; write its progress reports."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    from taskstate.demo.jobs import run_until_committed

    work = Path(a.work)
    app = f"taskstate-bench-sessions-{a.variant}"
    spark = plugin_session(app, a.variant, a.plugin_jar, a.redis_url)
    register_batch_source(spark, SOURCE, SCHEMA, rows)
    events = (
        spark.readStream.format(SOURCE)
        .option("words", str(a.words))
        .option("batches", str(a.batches))
        .load()
        .withWatermark("ts", "0 seconds")
    )
    state_schema = "start long, last long, count long" if a.variant == "spark" else "m boolean"
    checkpoint = str(work / "checkpoint")
    (work / "calls").mkdir(exist_ok=True)
    query = (
        events.groupBy("word")
        .applyInPandasWithState(
            group_fn(a.variant, a.namespace, str(work / "calls")),
            OUT,
            state_schema,
            "append",
            GroupStateTimeout.EventTimeTimeout,
        )  # fmt: skip
        .writeStream.format("json")
        .option("path", str(work / "out"))
        .option("checkpointLocation", checkpoint)
        .start()
    )
    return run_until_committed(
        spark, query, checkpoint, a.batches, progress_file=str(work / "progress.json")
    )


def run_one(
    variant: str, work: Path, redis_url: str, plugin_jar: str, namespace: str, words: int,
    batches: int,
) -> tuple[float, list[tuple[Any, ...]], tuple[float, float]]:  # fmt: skip
    """One query: its median batch (ms), its rows, and its state work per group call (us).

    The median batch of batches FIRST_TIMED and later; the median and mean microseconds.
    """
    from taskstate.demo.jobs import read_output_files

    args = [
        "--variant", variant, "--words", str(words), "--batches", str(batches),
        "--work", str(work), "--redis-url", redis_url, "--plugin-jar", plugin_jar,
        "--namespace", namespace,
    ]  # fmt: skip
    run_child("benchmarks.figures.sessions", args, work, f"{variant} sessions", {})
    reports = progress(work, batches, variant)
    median = statistics.median(
        float(reports[b]["batchDuration"]) for b in range(FIRST_TIMED, batches)
    )
    # the rows of the data batches: a no-data batch that fires the last timeouts may or
    # may not commit before the query is stopped
    rows = (tuple(r[c] for c in COLUMNS) for r in read_output_files(work / "out"))
    return median, sorted(r for r in rows if r[0] < batches), state_us(work, batches)


# (words, batches, variants); quick (CI's smoke test) runs two Spark applications
SIZES = {
    "full": (20_000, 8, ("spark", "deferred", "sync")),
    "quick": (400, 4, ("spark", "deferred")),
}


def measure(bench: Bench, size: tuple[int, int, tuple[str, ...]]) -> list[Figure]:
    """The sessionization figure."""
    return [sessions(bench.redis.url, bench.work, *size)]


def sessions(redis_url: str, work: Path, words: int, batches: int, variants: Any) -> Figure:
    """Median batch of the taskstate variants against GroupState's, per group call."""
    from taskstate.spark_plugin.package import build_jar

    jar = str(build_jar(work))
    got: dict[str, float] = {}
    outputs: dict[str, list[tuple[Any, ...]]] = {}
    in_call: dict[str, tuple[float, float]] = {}
    for variant in variants:
        say(f"sessions: {variant}, {words:,} words")
        ns = f"bench-sessions-{os.getpid()}-{variant}"
        got[variant], outputs[variant], in_call[variant] = run_one(
            variant, work / f"sessions-{variant}", redis_url, jar, ns, words, batches
        )
    for variant in variants:
        if outputs[variant] != outputs["spark"]:
            raise AssertionError(
                f"sessions benchmark: the {variant} query's output differs from GroupState's"
            )
    timed = [r for r in outputs["spark"] if FIRST_TIMED <= r[0] < batches]
    if not any(r[5] for r in timed):
        raise AssertionError("sessions benchmark: no session timed out in the timed batches")
    calls = len(timed) / (batches - FIRST_TIMED) / 2  # group calls per task and batch
    ours, base = got["deferred"] / calls, got["spark"] / calls
    detail: dict[str, Any] = {
        "extra_ms_per_call": ours - base,
        "deferred_batch_ms": got["deferred"], "spark_batch_ms": got["spark"],
        "calls_per_task_and_batch": calls, "batches": batches,
        "closed_sessions": sum(1 for r in timed if r[5]),
        "state_us_per_call": {v: {"p50": p50, "mean": mean} for v, (p50, mean) in in_call.items()},
        "note": "median batch duration of batches 3 and later, divided by the group calls "
        "of a task in a batch (a batch's two tasks run side by side); the outputs of the "
        "taskstate queries equal GroupState's, row for row. state_us_per_call: the state "
        "work inside each group call, timed in the Python worker (GroupState's session "
        "update, or the whole `with TaskState` block): the figure's difference without "
        "the rest of the batch, whose run-to-run noise is larger than the target",
    }  # fmt: skip
    if "sync" in got:
        detail["sync_batch_ms"] = got["sync"]
        detail["sync_extra_ms_per_call"] = (got["sync"] - got["spark"]) / calls
    return Figure(
        f"sessionization (applyInPandasWithState, event-time timeouts), {calls:,.0f} group "
        "calls per task and batch: ms per group call, taskstate with the plugin vs "
        "GroupState",
        ours, base, "ms per group call", ours / base, "at most +0.05 ms per group call",
        ours - base <= 0.05, detail,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Entry point of the child process running one query."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.figures.sessions")
    p.add_argument("--variant", choices=("deferred", "sync", "spark"), required=True)
    p.add_argument("--words", type=int, required=True)
    p.add_argument("--batches", type=int, required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--redis-url", default="")
    p.add_argument("--plugin-jar", default="")
    p.add_argument("--namespace", default="bench-sessions")
    return job(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
