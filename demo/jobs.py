"""Running totals per key, the same logic through each Spark API, with fault injection.

Used by `taskstate example` and by the e2e tests. A deterministic, replayable Python
streaming source emits events (event_id, key, value); the stateful step keeps per key a
running `count` and `total` in `TaskState` (or in a plain dict, to show what is lost)
and emits every event with the totals after it.

APIs (`--api`):
- `mapInPandas`: `repartition(P, key).mapInPandas(...)` to a file sink;
- `applyInPandasWithState`: one `with TaskState` block per group, to a file sink;
- `transformWithStateInPandas`, `transformWithState`: a `TaskStateProcessor`;
- `foreachBatch-mapPartitions`: `foreachBatch` + `rdd.mapPartitions`, output per batch;
- `foreachBatch-foreachPartition`: `foreachBatch` + `foreachPartition`, whose tasks write
  their rows themselves (one file per partition, replaced by a retry).

Faults (faults.py) strike in partition 0 of batch k, right after that task's commit:
`worker` kills the Python worker; `pause` makes it sleep so the test can kill the whole
query or, with the executor's pid in a marker file, the executor JVM.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taskstate.proto.ids import fq_task_id
from taskstate.sidecar.storage.redis.keys import data_key
from taskstate.spark_plugin import compat
from taskstate.testing.worker import held_version, holds_deferred, task_attempt, task_identity

from .faults import (
    maybe_block_fault,
    maybe_fault,
    maybe_group_fault,
    maybe_outage,
    parse_group_faults,
    parse_outages,
)

COMPONENT = "running-totals"
SOURCE_NAME = "taskstate_example_events"
EVENT_SCHEMA = "event_id long, key string, value long"
OUT_COLUMNS = ["batch", "part", "event_id", "key", "count", "total"]
OUT_SCHEMA = "batch long, part int, event_id long, key string, count long, total long"
APIS = (
    "mapInPandas",
    "applyInPandasWithState",
    "transformWithStateInPandas",
    "transformWithState",
    "foreachBatch-mapPartitions",
    "foreachBatch-foreachPartition",
)
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


# -- the replayable source -----------------------------------------------------------


def key_of(i: int, keys: int) -> str:
    """A deterministic, skewed key for event i."""
    h = (i * 2654435761) % (1 << 32)
    return f"k{min(h % keys, (h >> 8) % keys):03d}"


def value_of(i: int) -> int:
    """A deterministic value for event i."""
    return (i * 7) % 13 + 1


def register_range_source(
    spark: Any, name: str, schema: str, make_row: Callable[[Any], Callable[[int], tuple[Any, ...]]]
) -> None:
    """Register a replayable Python streaming source whose offsets are row indexes.

    Options: `per_batch` (rows per micro-batch) and `batches` (then the source runs
    dry). `make_row(options)` returns the function that makes row i; rows depend only
    on i, so a replayed batch (same offsets) reads exactly the same rows.
    """
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    class RangePartition(InputPartition):
        def __init__(self, start: int, end: int) -> None:
            self.start, self.end = start, end

    class RangeReader(DataSourceStreamReader):
        def __init__(self, options: Any) -> None:
            self.per_batch = int(options["per_batch"])
            self.total = self.per_batch * int(options["batches"])
            self.row = make_row(options)

        def initialOffset(self) -> dict[str, int]:  # noqa: N802 - Spark's name
            return {"offset": 0}

        def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:  # noqa: N802
            return {"offset": min(start["offset"] + self.per_batch, self.total)}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[Any]:
            a, b = start["offset"], end["offset"]
            mid = (a + b) // 2
            return [RangePartition(a, mid), RangePartition(mid, b)]

        def read(self, partition: Any) -> Iterator[tuple[Any, ...]]:
            for i in range(partition.start, partition.end):
                yield self.row(i)

        def commit(self, end: dict[str, int]) -> None:
            pass

    class RangeSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return name

        def schema(self) -> str:
            return schema

        def streamReader(self, schema: Any) -> RangeReader:  # noqa: N802 - Spark's name
            return RangeReader(self.options)

    spark.dataSource.register(RangeSource)


def range_stream(
    spark: Any,
    name: str,
    schema: str,
    make_row: Callable[[Any], Callable[[int], tuple[Any, ...]]],
    options: dict[str, int],
    files: Path,
) -> Any:
    """A replayable stream of the rows `make_row(options)(i)`, `per_batch` a micro-batch.

    A Python data source where Spark tells it where a batch starts (4.2+). Before that
    (and on Spark 3.5, which has no Python data sources), the same rows, written up front
    into `files` as one JSON file a batch (each a second newer than the last), read one
    file a batch: a restarted query replays a batch from the same file. Rows must depend
    on `options` only, and not on `batches`, which a restart may raise.
    """
    texts = {k: str(v) for k, v in options.items()}
    if compat.at_least(compat.STREAM_READER_START, spark):
        register_range_source(spark, name, schema, make_row)
        return spark.readStream.format(name).options(**texts).load()
    row, per_batch = make_row(texts), options["per_batch"]
    columns = [c.split()[0] for c in schema.split(",")]
    files.mkdir(parents=True, exist_ok=True)
    # a restart may ask for more batches; any other option makes other rows
    made = {k: v for k, v in options.items() if k != "batches"}
    manifest = files / "_options.json"  # Spark's file source skips names starting with _
    if manifest.exists() and json.loads(manifest.read_text()) != made:
        raise ValueError(f"{files} holds rows made with {manifest.read_text()}, not {made}: "
                         "start the query with a new checkpoint")  # fmt: skip
    manifest.write_text(json.dumps(made))
    for b in range(options["batches"]):
        path = files / f"batch-{b:06d}.json"
        if not path.exists():
            lines = (json.dumps(dict(zip(columns, row(i), strict=True)), default=_json_time)
                     for i in range(b * per_batch, (b + 1) * per_batch))  # fmt: skip
            tmp = files / f".batch-{b:06d}.tmp"
            tmp.write_text("\n".join(lines) + "\n")
            os.utime(tmp, (1_600_000_000 + b, 1_600_000_000 + b))
            tmp.rename(path)
    return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(files))


def _json_time(value: Any) -> str:
    """A timestamp as Spark's JSON reader takes it by default (ISO 8601, milliseconds)."""
    if isinstance(value, dt.datetime):
        return value.isoformat(timespec="milliseconds")
    raise TypeError(f"not JSON: {value!r}")


def event_stream(spark: Any, per_batch: int, batches: int, keys: int, files: Path) -> Any:
    """The events (event_id, key, value): `batches` batches of `per_batch` over `keys` keys."""

    def make_row(options: Any) -> Callable[[int], tuple[Any, ...]]:
        n = int(options["keys"])
        return lambda i: (i, key_of(i, n), value_of(i))

    options = {"per_batch": per_batch, "batches": batches, "keys": keys}
    return range_stream(spark, SOURCE_NAME, EVENT_SCHEMA, make_row, options, files)


# -- the stateful logic and faults ------------------------------------------------------

_PLAIN: dict[tuple[str, int], dict[str, Any]] = {}  # the "plain dict" state, per worker


@dataclass(frozen=True)
class JobOptions:
    """What one run of the query does (pickled to the Python workers)."""

    namespace: str
    sidecar: str | None
    state: str = "taskstate"  # or "dict"
    kill_worker_at: int = -1
    pause_at: int = -1
    hold_at: int = -1
    fault_dir: str = ""
    group_faults: tuple[tuple[int, str], ...] = ()  # (batch, kind): see faults.GROUP_FAULTS
    outages: tuple[tuple[int, str], ...] = ()  # (batch, moment): see faults.OUTAGE_MOMENTS
    durability: str = "applied"  # TaskState(durability=...)
    redis_url: str = ""  # for the `redis` group fault
    # TaskState(partitions=...): the repartition count, and the shuffle's (the same here)
    partitions: int | None = None

    def open(self, ctx: Any, part: int) -> Any:
        """The state for this task: a TaskState (entered) or the worker's plain dict."""
        if self.state == "dict":
            return _PLAIN.setdefault((self.namespace, part), {})
        from taskstate.client import TaskState

        held = held_version(fq_task_id(self.namespace, COMPONENT, part))
        s = TaskState(
            ctx,
            component=COMPONENT,
            namespace=self.namespace,
            sidecar=self.sidecar,
            partitions=self.partitions,
            durability=self.durability,
        ).__enter__()
        record_open(self, s, held)
        return s


def record_open(opts: JobOptions, s: Any, held: str | None = None) -> None:
    """Append what an Open found to `fault_dir/opens.jsonl`, with this worker's pid.

    The e2e tests read hand-overs from it: a task whose batch runs in another Python
    worker than its previous batch, and how that worker got the state (a delta, on-demand
    reads, or the whole state at Open only when the whole copy it `held` was a few
    commits old and yet more had changed than the log keeps). Blocks that reuse their
    attempt's claim (the later groups of applyInPandasWithState) are not Opens and are
    left out.
    """
    if not opts.fault_dir or s is None or s.info.reused_claim:
        return
    i = s.info
    line = json.dumps({
        "batch": s.batch_id, "part": s.partition, "pid": os.getpid(), "size": i.size,
        "delta": i.delta, "on_demand": i.on_demand, "restored": i.restored,
        "restored_keys": i.restored_keys, "version": i.version, "held": held,
    })  # fmt: skip
    _append_line(Path(opts.fault_dir) / "opens.jsonl", line)


def _append_line(path: Path, line: str) -> None:
    """One line, appended in one write (the workers of a run share the file)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


_DEFERRED: set[int] = set()  # task attempts this worker recorded in deferred.jsonl


def record_deferred(opts: JobOptions, s: Any) -> None:
    """Append `fault_dir/deferred.jsonl` when this worker first holds an attempt's changes.

    Held for the executor plugin's flush (the e2e tests assert that it happened).
    """
    if not opts.fault_dir or isinstance(s, dict) or not holds_deferred(s):
        return
    attempt = task_attempt(s)
    if attempt in _DEFERRED:
        return
    _DEFERRED.add(attempt)
    line = json.dumps({"batch": s.batch_id, "part": s.partition, "pid": os.getpid(),
                       "task_attempt": attempt})  # fmt: skip
    _append_line(Path(opts.fault_dir) / "deferred.jsonl", line)


def close(s: Any) -> None:
    """Commit a TaskState opened by JobOptions.open (a plain dict needs nothing)."""
    if not isinstance(s, dict):
        s.__exit__(None, None, None)


def task_info() -> tuple[Any, int, int]:
    """(TaskContext, batch id, partition id) of the running task."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    assert ctx is not None, "runs inside a Spark task"  # noqa: S101
    ident = task_identity(ctx)
    return ctx, -1 if ident.batch is None else ident.batch, ident.partition


def apply_events(
    s: Any, events: list[tuple[int, str, int]], batch: int, part: int
) -> list[tuple[Any, ...]]:
    """Update running totals in `s` (a TaskState or a dict); return output rows."""
    rows = []
    if not isinstance(s, dict):
        s.prefetch([key for _, key, _ in events])  # a worker without a copy: one round trip
    for event_id, key, value in sorted(events):
        st = s.get(key) or {"count": 0, "total": 0}
        st["count"] += 1
        st["total"] += int(value)
        s[key] = st
        rows.append((batch, part, int(event_id), key, st["count"], st["total"]))
    return rows


# -- the APIs ---------------------------------------------------------------------------


def _update_frames(opts: JobOptions, frames: Iterator[Any]) -> Any:
    """Apply pandas frames of events to the task's state; the output frame."""
    import pandas as pd

    ctx, batch, part = task_info()
    events = [
        e
        for f in frames
        for e in f[["event_id", "key", "value"]].itertuples(index=False, name=None)
    ]
    maybe_outage(opts, batch, part, "open")
    s = opts.open(ctx, part)
    maybe_outage(opts, batch, part, "mid")
    rows = apply_events(s, events, batch, part)
    maybe_block_fault(opts, batch, part, "block")
    maybe_outage(opts, batch, part, "commit")
    close(s)
    maybe_block_fault(opts, batch, part, "task")
    record_deferred(opts, s)
    maybe_group_fault(opts, s, batch, part)
    maybe_fault(opts, batch, part)
    maybe_outage(opts, batch, part, "end")
    return pd.DataFrame(rows, columns=OUT_COLUMNS)


def map_in_pandas_fn(opts: JobOptions) -> Any:
    """mapInPandas: one state block per task."""

    def update(frames: Iterator[Any]) -> Iterator[Any]:
        yield _update_frames(opts, frames)

    return update


def apply_in_pandas_with_state_fn(opts: JobOptions) -> Any:
    """applyInPandasWithState: one block (one commit) per group, sharing the task's claim."""

    def per_group(key: tuple[Any, ...], frames: Iterator[Any], _gs: Any) -> Iterator[Any]:
        yield _update_frames(opts, frames)

    return per_group


def processor_class(opts: JobOptions, pandas: bool) -> Any:
    """A TaskStateProcessor (or, for the plain-dict run, a dict-backed twin)."""
    from pyspark.sql import Row

    from taskstate.spark_plugin.processor import TaskStateProcessor

    class Totals(TaskStateProcessor):
        component = COMPONENT
        namespace = opts.namespace
        sidecar = opts.sidecar
        partitions = opts.partitions
        durability = opts.durability

        def init(self, handle: Any) -> None:
            if opts.state == "dict":
                self.state = None
                _, _, part = task_info() if _in_task() else (None, -1, -1)
                self.plain = _PLAIN.setdefault((opts.namespace, part), {})
            else:
                # init() also runs once on the driver (Spark's pre-init, no task).
                held = None
                if _in_task():
                    _, batch, part = task_info()
                    held = held_version(fq_task_id(opts.namespace, COMPONENT, part))
                    maybe_outage(opts, batch, part, "open")
                super().init(handle)
                record_open(opts, self.state, held)

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:  # noqa: N802, N803
            _, batch, part = task_info()
            s = self.plain if opts.state == "dict" else self.state
            if pandas:
                events = [
                    e
                    for f in rows
                    for e in f[["event_id", "key", "value"]].itertuples(index=False, name=None)
                ]
            else:
                events = [(r.event_id, r.key, r.value) for r in rows]
            maybe_outage(opts, batch, part, "mid")
            out = apply_events(s, events, batch, part)
            if pandas:
                import pandas as pd

                yield pd.DataFrame(out, columns=OUT_COLUMNS)
            else:
                for r in out:
                    yield Row(**dict(zip(OUT_COLUMNS, r, strict=True)))

        def close(self) -> None:
            was_open = self.state is not None
            if was_open and _in_task():
                _, batch, part = task_info()
                maybe_outage(opts, batch, part, "commit")
            super().close()
            if (was_open or opts.state == "dict") and _in_task():
                _, batch, part = task_info()
                maybe_fault(opts, batch, part)
                maybe_outage(opts, batch, part, "end")

    return Totals


def _in_task() -> bool:
    from pyspark import TaskContext

    return TaskContext.get() is not None


def rows_fn(opts: JobOptions) -> Any:
    """rdd.mapPartitions / foreachPartition inside foreachBatch (Row iterators)."""

    def update(rows: Iterator[Any]) -> Iterator[tuple[Any, ...]]:
        ctx, batch, part = task_info()
        events = [(r.event_id, r.key, r.value) for r in rows]
        maybe_outage(opts, batch, part, "open")
        s = opts.open(ctx, part)
        maybe_outage(opts, batch, part, "mid")
        out = apply_events(s, events, batch, part)
        maybe_outage(opts, batch, part, "commit")
        close(s)
        maybe_fault(opts, batch, part)
        maybe_outage(opts, batch, part, "end")
        yield from out

    return update


def _write_side_output(target: Path, rows: Iterator[tuple[Any, ...]]) -> None:
    """Write a foreachPartition task's rows itself (it has no output).

    One file per partition, replaced by a retry, so the write is idempotent.
    """
    from pyspark import TaskContext

    ctx = TaskContext.get()
    part = ctx.partitionId() if ctx is not None else 0
    lines = [json.dumps(dict(zip(OUT_COLUMNS, r, strict=True))) for r in rows]
    tmp = target / f".part-{part:05d}.json.tmp"
    tmp.write_text("".join(line + "\n" for line in lines))
    tmp.replace(target / f"part-{part:05d}.json")


def build_query(spark: Any, events: Any, opts: JobOptions, args: argparse.Namespace) -> Any:
    """A started streaming query for `args.api`."""
    api = args.api
    out, checkpoint, parts = args.out, args.checkpoint, args.partitions

    def to_files(df: Any) -> Any:
        return (
            df.writeStream.format("json")
            .option("path", out)
            .option("checkpointLocation", checkpoint)
            .outputMode("append")
            .start()
        )

    if api == "mapInPandas":
        return to_files(
            events.repartition(parts, "key").mapInPandas(map_in_pandas_fn(opts), OUT_SCHEMA)
        )
    if api == "applyInPandasWithState":
        from pyspark.sql.streaming.state import GroupStateTimeout

        return to_files(
            events.groupBy("key").applyInPandasWithState(
                apply_in_pandas_with_state_fn(opts),
                OUT_SCHEMA,
                "unused int",
                "append",
                GroupStateTimeout.NoTimeout,
            )
        )
    if api in ("transformWithStateInPandas", "transformWithState"):
        pandas = api == "transformWithStateInPandas"
        grouped = events.groupBy("key")
        method = grouped.transformWithStateInPandas if pandas else grouped.transformWithState
        return to_files(
            method(
                statefulProcessor=processor_class(opts, pandas)(),
                outputStructType=OUT_SCHEMA,
                outputMode="Append",
                timeMode="None",
            )
        )
    if api.startswith("foreachBatch-"):
        from taskstate.spark_plugin import with_batch_id

        update = rows_fn(opts)

        @with_batch_id
        def each(df: Any, batch_id: int) -> None:
            rdd = df.repartition(parts, "key").rdd
            target = Path(out) / f"batch={batch_id}"
            if api == "foreachBatch-foreachPartition":
                target.mkdir(parents=True, exist_ok=True)
                rdd.foreachPartition(lambda rows: _write_side_output(target, update(rows)))
                (target / "_SUCCESS").write_text("")
                return
            result = rdd.mapPartitions(update)
            df.sparkSession.createDataFrame(result, OUT_SCHEMA).write.mode("overwrite").json(
                str(target)
            )

        return (
            events.writeStream.foreachBatch(each).option("checkpointLocation", checkpoint).start()
        )
    raise ValueError(f"unknown api {api!r}; choose one of {', '.join(APIS)}")


# -- one run of the query (a child process) ----------------------------------------------


def spark_session(args: argparse.Namespace) -> Any:
    """The SparkSession for one run (local[N,F], or local-cluster with the plugin)."""
    from pyspark.sql import SparkSession

    b = (
        SparkSession.builder.master(args.master)
        .appName(f"taskstate-{args.api}")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(args.partitions))
        .config("spark.default.parallelism", "2")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
        .config("spark.task.maxFailures", "4")
    )
    if args.plugin_jar:
        b = (
            b.config("spark.jars", args.plugin_jar)
            .config("spark.plugins", "io.taskstate.spark.TaskStatePlugin")
            .config("spark.taskstate.redisUrl", args.redis_url)
            .config("spark.taskstate.python", sys.executable)
            .config("spark.executor.memory", "768m")
        )
    for setting in args.conf or ():
        key, _, value = setting.partition("=")
        b = b.config(key, value)
    return b.getOrCreate()


def run_query(args: argparse.Namespace) -> int:
    """Run the query until `batches` micro-batches are committed in its checkpoint."""
    opts = JobOptions(
        namespace=args.namespace,
        sidecar=args.sidecar,
        state=args.state,
        kill_worker_at=args.kill_worker_at,
        pause_at=args.pause_at,
        hold_at=args.hold_at,
        fault_dir=args.fault_dir,
        group_faults=parse_group_faults(args.group_faults or ""),
        outages=parse_outages(args.outages or ""),
        durability=args.durability,
        redis_url=args.redis_url or "",
        # repartition(P) and spark.sql.shuffle.partitions=P: every API's count is P
        partitions=args.partitions,
    )
    spark = spark_session(args)
    spark.sparkContext.setLogLevel("ERROR")
    if args.fault_dir:  # where a test finds the executors' logs (local-cluster)
        with open(Path(args.fault_dir) / "app-ids", "a") as ids:
            ids.write(spark.sparkContext.applicationId + "\n")
    events = event_stream(
        spark, args.events_per_batch, args.batches, args.keys, Path(f"{args.checkpoint}.events")
    )
    query = build_query(spark, events, opts, args)
    executors = str(Path(args.fault_dir) / "executors") if args.fault_dir else None
    return run_until_committed(
        spark, query, args.checkpoint, args.batches, executors_file=executors
    )


def run_until_committed(
    spark: Any,
    query: Any,
    checkpoint: str,
    batches: int,
    progress_file: str | None = None,
    executors_file: str | None = None,
) -> int:
    """Wait until batch `batches - 1` is in the checkpoint's commit log, then stop.

    With `progress_file`, the query's progress reports (batch id, durations) are written
    there as JSON first; with `executors_file`, the id of every executor the application
    had, lost ones included, one a line.
    """
    last = Path(checkpoint) / "commits" / str(batches - 1)
    try:
        while not last.exists():
            if query.exception() is not None:
                print(f"query failed: {query.exception()}", file=sys.stderr)
                return 1
            time.sleep(0.2)
        if progress_file:
            # the last batch's progress report follows its commit, by a moment
            deadline = time.monotonic() + 30
            reports = [json.loads(r.json) for r in query.recentProgress]
            while not any(r["batchId"] >= batches - 1 for r in reports):
                if time.monotonic() > deadline:
                    break  # written as it is: the reader names the missing batch
                time.sleep(0.1)
                reports = [json.loads(r.json) for r in query.recentProgress]
            Path(progress_file).write_text(json.dumps(reports))
        if executors_file:
            Path(executors_file).write_text("".join(i + "\n" for i in executor_ids(spark)))
    finally:
        query.stop()
        spark.stop()
    return 0


def executor_ids(spark: Any) -> list[str]:
    """Every executor the application had (Spark's status store: active and lost ones)."""
    store = spark.sparkContext._jsc.sc().statusStore()  # noqa: SLF001 - no Python API for it
    listed = store.executorList(False)  # activeOnly=false
    ids = [listed.apply(i).id() for i in range(listed.size())]
    return sorted(i for i in ids if i != "driver")


def kill_process_groups(children: list[Any]) -> None:
    """SIGKILL the process group of every child still alive (driver, JVM, workers)."""
    for p in children:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


# -- reading the results -------------------------------------------------------------------


def read_output_files(out_dir: str | Path) -> list[dict[str, Any]]:
    """JSON rows a run committed: per the file sink's log, or foreachBatch's batch dirs."""
    out = Path(out_dir)
    files: set[Path] = set()
    meta = out / "_spark_metadata"
    if meta.exists():
        for log in sorted(meta.iterdir()):
            if log.name.startswith("."):
                continue
            for line in log.read_text().splitlines()[1:]:
                entry = json.loads(line)
                if entry.get("action", "add") == "add":
                    files.add(Path(entry["path"].removeprefix("file://")))
    elif out.exists():
        for batch_dir in out.glob("batch=*"):
            if (batch_dir / "_SUCCESS").exists():
                files.update(batch_dir.glob("part-*.json"))
    return [json.loads(line) for path in files for line in path.read_text().splitlines()]


def read_output(out_dir: str | Path) -> list[tuple[Any, ...]]:
    """The job's committed rows as sorted tuples."""
    return sorted(tuple(r[c] for c in OUT_COLUMNS) for r in read_output_files(out_dir))


def read_state(redis_url: str, namespace: str, partitions: int) -> dict[str, Any]:
    """The committed state of every partition, read straight from Redis."""
    import orjson
    import redis

    client = redis.Redis.from_url(redis_url)
    state: dict[str, Any] = {}
    for p in range(partitions):
        data = client.hgetall(data_key(namespace, COMPONENT, p))
        state.update({_text(k): orjson.loads(v) for k, v in data.items()})
    client.close()
    return state


def _text(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v


def expected_state(batches: int, events_per_batch: int, keys: int) -> dict[str, Any]:
    """What the state must be after all batches, computed without Spark."""
    state: dict[str, dict[str, int]] = {}
    for i in range(batches * events_per_batch):
        st = state.setdefault(key_of(i, keys), {"count": 0, "total": 0})
        st["count"] += 1
        st["total"] += value_of(i)
    return state


def expected_rows(batches: int, events_per_batch: int, keys: int) -> list[tuple[Any, ...]]:
    """The output rows computed without Spark, without their partition id.

    (batch, event_id, key, count, total): each event counted once, in event order.
    """
    state: dict[str, list[int]] = {}
    rows = []
    for i in range(batches * events_per_batch):
        st = state.setdefault(key_of(i, keys), [0, 0])
        st[0] += 1
        st[1] += value_of(i)
        rows.append((i // events_per_batch, i, key_of(i, keys), st[0], st[1]))
    return rows


def without_partition(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """A run's output rows as `expected_rows` gives them: sorted, without the partition."""
    return sorted((b, e, k, c, t) for b, _, e, k, c, t in rows)


def keys_in_several_partitions(rows: list[tuple[Any, ...]]) -> dict[str, set[int]]:
    """The keys a run's output shows in more than one partition (none, when right)."""
    parts: dict[str, set[int]] = {}
    for _, part, _, key, _, _ in rows:
        parts.setdefault(key, set()).add(part)
    return {k: p for k, p in parts.items() if len(p) > 1}


def state_from_rows(rows: list[tuple[Any, ...]]) -> dict[str, Any]:
    """The final totals per key as the output shows them (for the plain-dict run)."""
    state: dict[str, Any] = {}
    for _, _, _, key, count, total in sorted(rows, key=lambda r: r[2]):
        state[key] = {"count": count, "total": total}
    return state
