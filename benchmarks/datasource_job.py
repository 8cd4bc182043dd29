"""The Spark side of the data source figures: one child process, one SparkSession.

    python -m benchmarks.datasource_job SIDECAR NAMESPACE KEYS... --out FILE

For each size it writes KEYS keys (100-byte JSON values) to component `s<KEYS>` of
NAMESPACE with the data source (4 tasks, overwrite), then reads them back whole, timing
each action (the read three times: the median) and sampling the peak RSS of Spark's Python
workers during the reads. It also times the same query on a Python data source that
yields three constant rows per partition (`floor_s`, the median of five): what any Python
data source of 4 partitions costs in Spark here, before a row of state is read. The
report (JSON) goes to FILE; the parent checks the state it left and times the baselines.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from pathlib import Path
from typing import Any

TASKS = 4
READS = 3  # the read is timed this many times; the report holds the median


def _python_workers() -> list[int]:
    """Pids of Spark's Python workers (and their daemon) on this machine, for this user."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"pyspark.daemon" in cmd or b"pyspark/daemon.py" in cmd or b"pyspark.worker" in cmd:
            out.append(int(entry.name))
    return out


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class PeakRss:
    """The largest RSS any one Python worker reached while the block ran (sampled)."""

    def __init__(self, every_s: float = 0.02) -> None:
        self.every_s = every_s
        self.peak_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for pid in _python_workers():
                self.peak_kib = max(self.peak_kib, _rss_kib(pid))
            time.sleep(self.every_s)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def constant_source(spark: Any, per_partition: int) -> str:
    """Register a Python data source of 4 partitions of constant rows; its format name.

    The taskstate read's schema and value sizes, so that a query on it costs what Spark's
    part of a taskstate read costs. Defined here, in a function, so that Spark's workers
    get the classes by value (this module is not on their path).
    """
    import pyarrow as pa
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class ConstantReader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(i) for i in range(TASKS)]

        def read(self, partition: InputPartition) -> Any:
            n = per_partition
            yield pa.RecordBatch.from_pydict({
                "partition": pa.array([partition.value] * n, pa.int32()),
                "key": [f"k{i}" for i in range(n)], "value": ['"1"'] * n,
                "batch": pa.array([0] * n, pa.int64()),
            })  # fmt: skip

    class Constant(DataSource):
        @classmethod
        def name(cls) -> str:
            return "taskstate_bench_constant"

        def schema(self) -> str:
            return "partition int, key string, value string, batch long"

        def reader(self, schema: Any) -> DataSourceReader:
            return ConstantReader()

    spark.dataSource.register(Constant)
    return Constant.name()


def _spark_floor(spark: Any, times: int = 5) -> float:
    """The read's query on a Python data source of 4 partitions of 3 constant rows."""
    df = spark.read.format(constant_source(spark, 3)).load()
    took = []
    for _ in range(times + 1):  # the first warms up
        t0 = time.perf_counter()
        df.selectExpr("count(*)", "sum(octet_length(value))").collect()
        took.append(time.perf_counter() - t0)
    return statistics.median(took[1:])


def main() -> None:
    """Write then read each size; the timings and peaks as JSON."""
    p = argparse.ArgumentParser()
    p.add_argument("sidecar")
    p.add_argument("namespace")
    p.add_argument("keys", type=int, nargs="+")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    from pyspark.sql import SparkSession

    from taskstate.spark_plugin import configure

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("taskstate-bench-datasource")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    configure(spark, namespace=a.namespace, sidecar=a.sidecar)
    spark.range(10).count()  # the JVM and the Python workers warm up first
    report: dict[str, Any] = {"floor_s": _spark_floor(spark)}
    for keys in a.keys:
        comp = f"s{keys}"
        df = spark.range(keys, numPartitions=TASKS).selectExpr(
            "concat('user-', cast(id as string)) AS key",
            "concat('\"', cast(id as string), '-', repeat('x', 90 - length(cast(id as string))),"
            " '\"') AS value",
        )
        df = df.cache()  # the write's input exists before it is timed, as import's file does
        df.count()
        t0 = time.perf_counter()
        df.write.format("taskstate").option("component", comp).option("partitions", TASKS).mode(
            "overwrite"
        ).save()
        write_s = time.perf_counter() - t0
        df.unpersist()
        reader = spark.read.format("taskstate").option("component", comp).load()
        reads = []
        with PeakRss() as rss:
            for _ in range(READS):
                t0 = time.perf_counter()
                # every row and value reaches Spark; octet_length is the value's size as
                # Redis holds it (length() would count characters: a UTF-8 scan of every
                # value, the query's own work and about 0.4 s of JVM CPU at 1,000,000 keys)
                (n, size) = reader.selectExpr("count(*)", "sum(octet_length(value))").collect()[0]
                reads.append(time.perf_counter() - t0)
                if n != keys:
                    raise AssertionError(f"the read gave {n} rows of {keys}")
        report[str(keys)] = {"write_s": write_s, "read_s": statistics.median(reads),
                             "reads_s": reads, "bytes": int(size),
                             "peak_worker_rss_kib": rss.peak_kib}  # fmt: skip
    Path(a.out).write_text(json.dumps(report))
    spark.stop()
    os._exit(0)  # the JVM's shutdown hooks are not ours to wait for


if __name__ == "__main__":
    main()
