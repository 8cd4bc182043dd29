"""The core example: running totals per key in a streaming query, kept in TaskState.

A deterministic, replayable Python streaming source emits events (event_id, key, value);
the query hash-partitions them by key and, inside `mapInPandas`, keeps per key a running
`count` and `total` in `TaskState` (the batch id comes from the task's
`streaming.sql.batchId` local property). Every event is emitted with the totals after it,
to a file sink (exactly-once output). The same job can keep its state in a plain dict to
show what is lost without taskstate.

`taskstate example` runs the job four ways on a private redis-server and sidecar (or an
existing Redis with --redis-url) and compares each with the fault-free run:

- golden: no faults;
- worker: the Python worker is SIGKILLed in batch k, right after its commit;
- restart: the whole query (driver, executors, workers) is SIGKILLed in batch k after the
  commit, then started again from its checkpoint;
- plain dict: the worker fault again, with the state in a plain dict.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

COMPONENT = "running-totals"
SOURCE_NAME = "taskstate_example_events"
EVENT_SCHEMA = "event_id long, key string, value long"
OUT_SCHEMA = "batch long, part int, event_id long, key string, count long, total long"


# -- the replayable source -----------------------------------------------------------


def key_of(i: int, keys: int) -> str:
    """A deterministic, skewed key for event i."""
    h = (i * 2654435761) % (1 << 32)
    return f"k{min(h % keys, (h >> 8) % keys):03d}"


def value_of(i: int) -> int:
    """A deterministic value for event i."""
    return (i * 7) % 13 + 1


def register_source(spark: Any) -> None:
    """Register the example's Python streaming data source with a SparkSession."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    class RangePartition(InputPartition):
        def __init__(self, start: int, end: int) -> None:
            self.start, self.end = start, end

    class EventReader(DataSourceStreamReader):
        def __init__(self, options: Any) -> None:
            self.per_batch = int(options.get("events_per_batch", "200"))
            self.total = self.per_batch * int(options.get("batches", "6"))
            self.keys = int(options.get("keys", "40"))

        def initialOffset(self) -> dict[str, int]:  # noqa: N802 - Spark's name
            return {"offset": 0}

        def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:  # noqa: N802
            return {"offset": min(start["offset"] + self.per_batch, self.total)}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[Any]:
            a, b = start["offset"], end["offset"]
            mid = (a + b) // 2
            return [RangePartition(a, mid), RangePartition(mid, b)]

        def read(self, partition: Any) -> Iterator[tuple[int, str, int]]:
            for i in range(partition.start, partition.end):
                yield (i, key_of(i, self.keys), value_of(i))

        def commit(self, end: dict[str, int]) -> None:
            pass

    class EventSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return SOURCE_NAME

        def schema(self) -> str:
            return EVENT_SCHEMA

        def streamReader(self, schema: Any) -> EventReader:  # noqa: N802 - Spark's name
            return EventReader(self.options)

    spark.dataSource.register(EventSource)


# -- the stateful step -----------------------------------------------------------------

_PLAIN: dict[tuple[str, int], dict[str, Any]] = {}  # the "plain dict" state, per worker


@dataclass(frozen=True)
class JobOptions:
    """What one run of the query does (pickled to the Python workers)."""

    namespace: str
    sidecar: str
    state: str = "taskstate"  # or "dict"
    kill_worker_at: int = -1
    pause_at: int = -1
    fault_dir: str = ""


def apply_events(s: Any, pdf: Any, batch: int, part: int) -> list[tuple[Any, ...]]:
    """Update running totals in `s` (a TaskState or a dict) and return output rows."""
    rows = []
    for event_id, key, value in zip(pdf["event_id"], pdf["key"], pdf["value"], strict=True):
        st = s.get(key) or {"count": 0, "total": 0}
        st["count"] += 1
        st["total"] += int(value)
        s[key] = st
        rows.append((batch, part, int(event_id), key, st["count"], st["total"]))
    return rows


def make_update(opts: JobOptions) -> Any:
    """The mapInPandas function for these options."""

    def update(frames: Iterator[Any]) -> Iterator[Any]:
        import pandas as pd
        from pyspark import TaskContext

        from taskstate.client import TaskState

        ctx = TaskContext.get()
        assert ctx is not None, "runs inside a Spark task"  # noqa: S101
        batch = int(ctx.getLocalProperty("streaming.sql.batchId") or -1)
        part = ctx.partitionId()
        parts = [f for f in frames if len(f)]
        pdf = (
            pd.concat(parts) if parts else pd.DataFrame({"event_id": [], "key": [], "value": []})
        ).sort_values("event_id")
        if opts.state == "taskstate":
            with TaskState(
                ctx, component=COMPONENT, namespace=opts.namespace, sidecar=opts.sidecar
            ) as s:
                rows = apply_events(s, pdf, batch, part)
        else:
            plain = _PLAIN.setdefault((opts.namespace, part), {})
            rows = apply_events(plain, pdf, batch, part)
        _maybe_fault(opts, batch, part)
        yield pd.DataFrame(rows, columns=["batch", "part", "event_id", "key", "count", "total"])

    return update


def _once(opts: JobOptions, name: str) -> bool:
    """True the first time `name` is asked for in this run (a marker file records it)."""
    marker = Path(opts.fault_dir) / name
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def _maybe_fault(opts: JobOptions, batch: int, part: int) -> None:
    if part != 0 or not opts.fault_dir:
        return
    if batch == opts.kill_worker_at and _once(opts, "worker-killed"):
        os.kill(os.getpid(), signal.SIGKILL)  # after the commit, before Spark has the output
    if batch == opts.pause_at and _once(opts, "paused"):
        time.sleep(3600)  # the driver of the test kills the whole query now


# -- one run of the query (a child process) ----------------------------------------------


def spark_session(master: str) -> Any:
    """A small local SparkSession for the example."""
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master(master)
        .appName("taskstate-example")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )


def run_query(args: argparse.Namespace) -> int:
    """Run the query until `batches` micro-batches are committed in its checkpoint."""
    opts = JobOptions(
        namespace=args.namespace,
        sidecar=args.sidecar,
        state=args.state,
        kill_worker_at=args.kill_worker_at,
        pause_at=args.pause_at,
        fault_dir=args.fault_dir,
    )
    spark = spark_session(args.master)
    spark.sparkContext.setLogLevel("ERROR")
    register_source(spark)
    events = (
        spark.readStream.format(SOURCE_NAME)
        .option("events_per_batch", str(args.events_per_batch))
        .option("batches", str(args.batches))
        .option("keys", str(args.keys))
        .load()
    )
    out = events.repartition(args.partitions, "key").mapInPandas(make_update(opts), OUT_SCHEMA)
    query = (
        out.writeStream.format("json")
        .option("path", args.out)
        .option("checkpointLocation", args.checkpoint)
        .outputMode("append")
        .start()
    )
    last = Path(args.checkpoint) / "commits" / str(args.batches - 1)
    try:
        while not last.exists():
            if query.exception() is not None:
                print(f"query failed: {query.exception()}", file=sys.stderr)
                return 1
            time.sleep(0.2)
    finally:
        query.stop()
        spark.stop()
    return 0


def read_output(out_dir: str | Path) -> list[tuple[Any, ...]]:
    """Rows the file sink committed (per its _spark_metadata log), sorted."""
    meta = Path(out_dir) / "_spark_metadata"
    files: set[str] = set()
    for log in sorted(meta.iterdir()) if meta.exists() else []:
        if log.name.startswith("."):
            continue
        for line in log.read_text().splitlines()[1:]:
            entry = json.loads(line)
            if entry.get("action", "add") == "add":
                files.add(entry["path"])
    rows = []
    for f in files:
        path = Path(f.removeprefix("file://"))
        for line in path.read_text().splitlines():
            r = json.loads(line)
            rows.append((r["batch"], r["part"], r["event_id"], r["key"], r["count"], r["total"]))
    return sorted(rows)


def read_state(redis_url: str, namespace: str, partitions: int) -> dict[str, Any]:
    """The committed state of every partition, read straight from Redis."""
    import orjson
    import redis

    client = redis.Redis.from_url(redis_url)
    state: dict[str, Any] = {}
    for p in range(partitions):
        data = client.hgetall(f"ts:{{{namespace}/{COMPONENT}/{p}}}:data")
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


# -- the orchestrator (`taskstate example`) ------------------------------------------------


@dataclass
class RunResult:
    """One run compared with golden."""

    name: str
    state_kind: str
    faults: str
    rows: int
    identical_output: bool
    identical_state: bool
    seconds: float

    @property
    def identical(self) -> bool:
        """Output and final state both equal golden."""
        return self.identical_output and self.identical_state


class Runner:
    """Starts query processes (each in its own process group) against one sidecar."""

    def __init__(self, workdir: Path, redis_url: str, sidecar: str, ns: argparse.Namespace):
        self.workdir = workdir
        self.redis_url = redis_url
        self.sidecar = sidecar
        self.args = ns
        self.children: list[subprocess.Popen[bytes]] = []

    def env(self) -> dict[str, str]:
        """Environment for a query process."""
        env = dict(os.environ)
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        return env

    def start(self, name: str, state: str, extra: Sequence[str] = ()) -> subprocess.Popen[bytes]:
        """Start one query process for run `name`."""
        run_dir = self.workdir / name
        (run_dir / "faults").mkdir(parents=True, exist_ok=True)
        a = self.args
        cmd = [
            sys.executable,
            "-m",
            "taskstate.spark_plugin.example",
            "--query",
            "--namespace",
            f"{a.namespace_prefix}-{name}",
            "--sidecar",
            self.sidecar,
            "--state",
            state,
            "--batches",
            str(a.batches),
            "--events-per-batch",
            str(a.events_per_batch),
            "--keys",
            str(a.keys),
            "--partitions",
            str(a.partitions),
            "--master",
            a.master,
            "--out",
            str(run_dir / "out"),
            "--checkpoint",
            str(run_dir / "checkpoint"),
            "--fault-dir",
            str(run_dir / "faults"),
            *extra,
        ]
        log = open(run_dir / "query.log", "ab")  # noqa: SIM115 - owned by the child
        proc = subprocess.Popen(  # noqa: S603 - our own module
            cmd, env=self.env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        self.children.append(proc)
        return proc

    def wait(self, proc: subprocess.Popen[bytes], name: str, timeout: float = 600) -> None:
        """Wait for a query process; fail with its log on error."""
        code = proc.wait(timeout=timeout)
        if code != 0:
            log = (self.workdir / name / "query.log").read_text(errors="replace")[-4000:]
            raise RuntimeError(f"run {name!r} exited with {code}; its log ends with:\n{log}")

    def kill_all(self) -> None:
        """SIGKILL every query process group still alive."""
        for p in self.children:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()

    def run(self, name: str, state: str, faults: str) -> float:
        """Run one scenario to the end; returns seconds taken."""
        t0 = time.monotonic()
        k = str(self.args.fault_batch)
        if faults == "none":
            self.wait(self.start(name, state), name)
        elif faults == "worker":
            self.wait(self.start(name, state, ["--kill-worker-at", k]), name)
        elif faults == "restart":
            proc = self.start(name, state, ["--pause-at", k])
            marker = self.workdir / name / "faults" / "paused"
            deadline = time.monotonic() + 600
            while not marker.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    self.wait(proc, name)
                    raise RuntimeError(f"run {name!r} ended before batch {k}")
                time.sleep(0.1)
            os.killpg(proc.pid, signal.SIGKILL)  # driver, executors, workers: all at once
            proc.wait()
            self.wait(self.start(name, state), name)  # same checkpoint, same state
        else:
            raise ValueError(faults)
        return time.monotonic() - t0


SCENARIOS = (
    ("golden", "taskstate", "none"),
    ("worker-killed", "taskstate", "worker"),
    ("query-restarted", "taskstate", "restart"),
    ("plain-dict-worker-killed", "dict", "worker"),
)


def orchestrate(ns: argparse.Namespace) -> int:
    """Run the scenarios, compare them with golden, print the tables."""
    from taskstate.testing import RedisServer, SidecarProcess

    workdir = Path(ns.out or tempfile.mkdtemp(prefix="taskstate-example-"))
    workdir.mkdir(parents=True, exist_ok=True)
    ns.namespace_prefix = ns.namespace_prefix or f"example-{uuid.uuid4().hex[:8]}"
    redis_server = None
    sidecar = None
    runner = None
    try:
        if ns.redis_url:
            redis_url = ns.redis_url
        else:
            print("starting a private redis-server ...", flush=True)
            redis_server = RedisServer(workdir / "redis").start()
            redis_url = redis_server.url
        sidecar = SidecarProcess(redis_url, workdir / "sidecar" / "sidecar.sock")
        (workdir / "sidecar").mkdir(exist_ok=True)
        sidecar.start()
        print(f"sidecar: {sidecar.ready_line}", flush=True)
        runner = Runner(workdir, redis_url, sidecar.target, ns)
        chosen = [s for s in SCENARIOS if ns.scenarios == "all" or s[0] in ns.scenarios.split(",")]
        if chosen[0][0] != "golden":
            chosen.insert(0, SCENARIOS[0])
        results: list[RunResult] = []
        golden_rows: list[tuple[Any, ...]] = []
        golden_state: dict[str, Any] = {}
        for i, (name, state, faults) in enumerate(chosen, 1):
            print(
                f"[{i}/{len(chosen)}] {name}: state={state} faults={faults} "
                f"({ns.batches} batches) ...",
                flush=True,
            )
            secs = runner.run(name, state, faults)
            rows = read_output(workdir / name / "out")
            if state == "taskstate":
                final = read_state(redis_url, f"{ns.namespace_prefix}-{name}", ns.partitions)
            else:
                final = _state_from_rows(rows)
            if name == "golden":
                golden_rows, golden_state = rows, final
            results.append(
                RunResult(
                    name,
                    state,
                    faults,
                    len(rows),
                    rows == golden_rows,
                    final == golden_state,
                    round(secs, 1),
                )
            )
            print(f"      done in {secs:.1f} s, {len(rows)} output rows", flush=True)
        truth = expected_state(ns.batches, ns.events_per_batch, ns.keys)
        _print_tables(results, golden_state, truth)
        summary = {
            "results": [asdict(r) | {"identical": r.identical} for r in results],
            "golden_matches_computed_truth": golden_state == truth,
            "workdir": str(workdir),
        }
        (workdir / "summary.json").write_text(json.dumps(summary, indent=2))
        print(f"summary: {workdir / 'summary.json'}")
        ok = golden_state == truth and all(
            r.identical for r in results if r.state_kind == "taskstate"
        )
        return 0 if ok else 1
    finally:
        if runner is not None:
            runner.kill_all()
        if sidecar is not None:
            sidecar.kill()
        if redis_server is not None:
            redis_server.stop()


def _state_from_rows(rows: list[tuple[Any, ...]]) -> dict[str, Any]:
    """The final totals per key as the output shows them (for the plain-dict run)."""
    state: dict[str, Any] = {}
    for _, _, _, key, count, total in sorted(rows, key=lambda r: r[2]):
        state[key] = {"count": count, "total": total}
    return state


def _print_tables(results: list[RunResult], golden: dict[str, Any], truth: dict[str, Any]) -> None:
    top = sorted(golden.items(), key=lambda kv: (-kv[1]["total"], kv[0]))[:5]
    print("\ntop keys (golden):")
    print(f"  {'key':<8}{'count':>8}{'total':>10}")
    for k, v in top:
        print(f"  {k:<8}{v['count']:>8}{v['total']:>10}")
    print(f"golden equals the totals computed without Spark: {'yes' if golden == truth else 'NO'}")
    print(f"\n{'run':<28}{'state':<11}{'faults':<9}{'rows':>6}  identical to golden")
    for r in results:
        print(
            f"{r.name:<28}{r.state_kind:<11}{r.faults:<9}{r.rows:>6}  "
            f"{'yes' if r.identical else 'NO'}"
        )


def build_parser() -> argparse.ArgumentParser:
    """The example's options (also used by the tests to build a Runner)."""
    p = argparse.ArgumentParser(prog="taskstate example", description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", type=int, default=6)
    p.add_argument("--events-per-batch", type=int, default=400)
    p.add_argument("--keys", type=int, default=40)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--fault-batch", type=int, default=3, help="the batch in which faults strike")
    p.add_argument("--master", default="local[2,4]", help="Spark master (retries enabled)")
    p.add_argument("--redis-url", help="use this Redis instead of a private redis-server")
    p.add_argument("--out", help="work directory (default: a new temp directory)")
    p.add_argument(
        "--scenarios",
        default="all",
        help="comma-separated: golden, worker-killed, query-restarted, "
        "plain-dict-worker-killed, or all",
    )
    # one run of the query (used by the orchestrator and the tests)
    p.add_argument("--query", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--namespace", help=argparse.SUPPRESS)
    p.add_argument("--sidecar", help=argparse.SUPPRESS)
    p.add_argument(
        "--state", default="taskstate", choices=["taskstate", "dict"], help=argparse.SUPPRESS
    )
    p.add_argument("--checkpoint", help=argparse.SUPPRESS)
    p.add_argument("--fault-dir", default="", help=argparse.SUPPRESS)
    p.add_argument("--kill-worker-at", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--pause-at", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--namespace-prefix", default="", help=argparse.SUPPRESS)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """`taskstate example` (orchestrator) or, with --query, one run of the query."""
    p = build_parser()
    ns = p.parse_args(argv)
    if ns.query:
        return run_query(ns)
    if ns.batches < 1 or not 0 <= ns.fault_batch < ns.batches:
        p.error("need --batches >= 1 and 0 <= --fault-batch < --batches")
    try:
        return orchestrate(ns)
    except KeyboardInterrupt:
        print("interrupted: stopped every process this example started", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
