"""Running totals per key through a Spark Connect client, one run of one query.

Run as a script (`python connect_job.py --remote sc://... --api API ...`): its functions
belong to `__main__`, so Spark Connect pickles them by value, and the server's Python
workers import only `taskstate` (installed in the server's environment). The settings
reach the tasks through `taskstate.spark_plugin.configure` (session confs), never
through the TaskState arguments.

APIs (`--api`):
- `mapInPandas-foreachBatch`: `repartition(P, key).mapInPandas(...)` in the query, its
  micro-batches written by a foreachBatch function (`with_batch_id`, unless `--no-wrap`);
- `applyInPandasWithState-foreachBatch`: one block per group with event-time timeouts
  (a key silent for GAP_MS is closed: its totals leave the state in a row with
  event_id -1), to a foreachBatch function;
- `transformWithStateInPandas`: a TaskStateProcessor, to a file sink;
- `foreachBatch-mapInPandas`: the TaskState blocks run inside the foreachBatch function
  (`df.repartition(P, key).mapInPandas(...)` there).

Faults strike in partition 0 of a batch, right after its commit (`Faults`):
`--kill-worker-at K` SIGKILLs the Python worker; `--hold-at K` makes it wait while the
test kills this client, and then fails that run's attempts at K.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

APIS = (
    "mapInPandas-foreachBatch",
    "applyInPandasWithState-foreachBatch",
    "transformWithStateInPandas",
    "foreachBatch-mapInPandas",
)
COMPONENT = "running-totals"  # taskstate.demo.jobs.COMPONENT: its readers work here
SOURCE = "taskstate_connect_events"
SCHEMA = "event_id long, key string, value long, ts timestamp"
T0_MS = 1_700_000_000_000
STEP_MS = 100  # event time between two events
GAP_MS = 3_000  # applyInPandasWithState: a key silent this long (event time) is closed


def event(i: int, per_batch: int, keys: int, batches: int) -> tuple[Any, ...]:
    """Event i; the last batch's events jump far ahead in event time, so the no-data batch
    after it closes every key that batch did not hear (applyInPandasWithState)."""
    import datetime as dt

    from taskstate.demo.jobs import key_of, value_of

    b, j = divmod(i, per_batch)
    ms = T0_MS + i * STEP_MS if b < batches - 1 else T0_MS + 10**9 + j
    return i, key_of(i, keys), value_of(i), dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)


def open_state(opts: Any, ctx: Any, part: int) -> Any:
    """The state for this task: a TaskState (entered; names from configure) or a dict."""
    from taskstate.demo.jobs import _PLAIN, record_open
    from taskstate.proto.ids import fq_task_id
    from taskstate.testing.worker import held_version

    if opts.state == "dict":
        return _PLAIN.setdefault((opts.namespace, part), {})
    from taskstate.client import TaskState

    held = held_version(fq_task_id(opts.namespace, COMPONENT, part))
    s = TaskState(ctx, component=COMPONENT, partitions=opts.partitions).__enter__()
    record_open(opts, s, held)
    return s


@dataclass(frozen=True)
class Faults:
    """The faults of one run (pickled to the tasks with the functions that strike them).

    `kill_worker_at` (in `opts`): taskstate.demo.faults SIGKILLs the Python worker right
    after partition 0 committed that batch. `hold_at`: partition 0 waits there, after its
    commit, for FAULT_DIR/release; the test kills this client meanwhile, then releases
    the attempt: from then on every attempt of this run's `generation` fails after its
    commit, so the old run, which outlived its client on the server, can never commit that
    batch. The test starts the next generation from the checkpoint, which replays it.
    """

    opts: Any
    hold_at: int = -1
    generation: int = 1

    def strike(self, batch: int, part: int) -> None:
        """After partition `part` committed `batch`."""
        from taskstate.demo.faults import maybe_fault, once

        fault_dir = Path(self.opts.fault_dir) if self.opts.fault_dir else None
        if fault_dir is None or part != 0:
            return
        release = fault_dir / "release"
        if batch == self.hold_at and once(str(fault_dir), "held"):
            deadline = time.monotonic() + 300
            while not release.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        if batch == self.hold_at and release.exists() and self.generation == 1:
            raise RuntimeError("released: this run was replaced by a restarted client")
        maybe_fault(self.opts, batch, part)


def map_fn(f: Faults) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """mapInPandas: one TaskState block per task."""

    def update(frames: Iterator[Any]) -> Iterator[Any]:
        import pandas as pd

        from taskstate.demo.jobs import OUT_COLUMNS, apply_events, close, task_info

        ctx, batch, part = task_info()
        events = [
            e
            for f in frames
            for e in f[["event_id", "key", "value"]].itertuples(index=False, name=None)
        ]
        s = open_state(f.opts, ctx, part)
        rows = apply_events(s, events, batch, part)
        close(s)
        f.strike(batch, part)
        yield pd.DataFrame(rows, columns=OUT_COLUMNS)

    return update


def group_fn(f: Faults) -> Callable[..., Iterator[Any]]:
    """applyInPandasWithState with event-time timeouts: one block per group."""

    def per_group(key: tuple[str], frames: Iterator[Any], gs: Any) -> Iterator[Any]:
        import pandas as pd

        from taskstate.demo.jobs import OUT_COLUMNS, apply_events, close, task_info

        ctx, batch, part = task_info()
        (k,) = key
        s = open_state(f.opts, ctx, part)
        if gs.hasTimedOut:
            st = s.pop(k, None) or {"count": 0, "total": 0}
            gs.remove()
            rows = [(batch, part, -1, k, st["count"], st["total"])]
        else:
            events, last = [], 0
            for pdf in frames:
                events += list(pdf[["event_id", "key", "value"]].itertuples(index=False, name=None))
                last = max(last, max(int(t.value // 1_000_000) for t in pdf["ts"]))
            rows = apply_events(s, events, batch, part)
            gs.update((True,))  # Spark keeps timers only for keys with a GroupState
            gs.setTimeoutTimestamp(max(last + GAP_MS, gs.getCurrentWatermarkMs() + 1))
        close(s)
        f.strike(batch, part)
        yield pd.DataFrame(rows, columns=OUT_COLUMNS)

    return per_group


def processor(f: Faults) -> Any:
    """transformWithStateInPandas: TaskStateProcessor (init restores, close commits)."""
    from taskstate.spark_plugin.processor import TaskStateProcessor

    class Totals(TaskStateProcessor):
        component = COMPONENT
        partitions = f.opts.partitions

        def init(self, handle: Any) -> None:
            from pyspark import TaskContext

            from taskstate.demo.jobs import record_open

            super().init(handle)  # also on the driver (Spark's schema pass): no task there
            if TaskContext.get() is not None:
                record_open(f.opts, self.state)

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:  # noqa: N802, N803
            import pandas as pd

            from taskstate.demo.jobs import OUT_COLUMNS, apply_events, task_info

            _, batch, part = task_info()
            events = [
                e
                for f in rows
                for e in f[["event_id", "key", "value"]].itertuples(index=False, name=None)
            ]
            yield pd.DataFrame(apply_events(self.state, events, batch, part), columns=OUT_COLUMNS)

        def close(self) -> None:
            from taskstate.demo.jobs import task_info

            was_open = self.state is not None
            super().close()
            if was_open:
                _, batch, part = task_info()
                f.strike(batch, part)

    return Totals()


def batch_writer(out: str) -> Callable[[Any, int], None]:
    """A foreachBatch function writing the batch to OUT/batch=ID (replaced by a replay)."""

    def write(df: Any, batch_id: int) -> None:
        df.write.mode("overwrite").json(f"{out}/batch={batch_id}")

    return write


def build_query(spark: Any, a: argparse.Namespace, f: Faults) -> Any:
    """The started query for `a.api`."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    from taskstate.demo.jobs import OUT_SCHEMA
    from taskstate.spark_plugin import with_batch_id

    def wrap(fn: Callable[[Any, int], None]) -> Callable[[Any, int], None]:
        return with_batch_id(fn) if a.wrap else fn

    events = (
        spark.readStream.format(SOURCE)
        .option("per_batch", str(a.per_batch))
        .option("batches", str(a.batches))
        .option("keys", str(a.keys))
        .load()
    )
    if a.api == "mapInPandas-foreachBatch":
        stream = events.repartition(a.partitions, "key").mapInPandas(map_fn(f), OUT_SCHEMA)
        writer = stream.writeStream.foreachBatch(wrap(batch_writer(a.out)))
    elif a.api == "applyInPandasWithState-foreachBatch":
        stream = (
            events.withWatermark("ts", "0 seconds")
            .groupBy("key")
            .applyInPandasWithState(
                group_fn(f), OUT_SCHEMA, "m boolean", "append", GroupStateTimeout.EventTimeTimeout
            )
        )
        writer = stream.writeStream.foreachBatch(wrap(batch_writer(a.out)))
    elif a.api == "transformWithStateInPandas":
        stream = events.groupBy("key").transformWithStateInPandas(
            statefulProcessor=processor(f),
            outputStructType=OUT_SCHEMA,
            outputMode="Append",
            timeMode="None",
        )
        writer = stream.writeStream.format("json").option("path", a.out).outputMode("append")
    elif a.api == "foreachBatch-mapInPandas":
        update, out, parts = map_fn(f), a.out, a.partitions

        def each(df: Any, batch_id: int) -> None:
            result = df.repartition(parts, "key").mapInPandas(update, OUT_SCHEMA)
            result.write.mode("overwrite").json(f"{out}/batch={batch_id}")

        writer = events.writeStream.foreachBatch(wrap(each))
    else:
        raise ValueError(a.api)
    return writer.option("checkpointLocation", a.checkpoint).start()


def last_batch(a: argparse.Namespace) -> int:
    """The last batch a run waits for: with event-time timeouts, the no-data batch after
    the data (the watermark moved far on), in which the keys silent since time out."""
    return int(a.batches if a.api.startswith("applyInPandasWithState") else a.batches - 1)


def main(argv: list[str]) -> int:
    """One run of the query, until its last batch is committed."""
    p = argparse.ArgumentParser()
    p.add_argument("--remote", required=True)
    p.add_argument("--api", choices=APIS, required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--sidecar", required=True)
    p.add_argument("--state", choices=["taskstate", "dict"], default="taskstate")
    p.add_argument("--no-wrap", dest="wrap", action="store_false")
    p.add_argument("--out", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--fault-dir", default="")
    p.add_argument("--kill-worker-at", type=int, default=-1)
    p.add_argument("--hold-at", type=int, default=-1)
    p.add_argument("--generation", type=int, default=1)
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--per-batch", type=int, default=120)
    p.add_argument("--keys", type=int, default=60)
    p.add_argument("--partitions", type=int, default=2)
    a = p.parse_args(argv)

    from pyspark.sql import SparkSession

    from taskstate.demo.jobs import JobOptions, register_range_source
    from taskstate.spark_plugin import configure

    spark: Any = SparkSession.builder.remote(a.remote).create()
    if a.fault_dir:
        with open(Path(a.fault_dir) / "sessions", "a") as f:
            f.write(spark.session_id + "\n")
    spark.conf.set("spark.sql.shuffle.partitions", str(a.partitions))
    if a.state == "taskstate":
        configure(spark, namespace=a.namespace, sidecar=a.sidecar)
    opts = JobOptions(
        namespace=a.namespace,
        sidecar=None,
        state=a.state,
        kill_worker_at=a.kill_worker_at,
        fault_dir=a.fault_dir,
        partitions=a.partitions,
    )
    faults = Faults(opts, a.hold_at, a.generation)

    def make_row(options: Any) -> Callable[[int], tuple[Any, ...]]:
        per, keys, batches = int(options["per_batch"]), int(options["keys"]), a.batches
        return lambda i: event(i, per, keys, batches)

    register_range_source(spark, SOURCE, SCHEMA, make_row)
    query = build_query(spark, a, faults)
    done = Path(a.checkpoint) / "commits" / str(last_batch(a))
    try:
        while not done.exists():
            if query.exception() is not None:
                print(f"query failed: {query.exception()}", file=sys.stderr, flush=True)
                return 1
            time.sleep(0.2)
    finally:
        query.stop()
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
