"""Figures 13-15b: the data source's reads and writes against the CLI and Redis, its first.

Figure 15b is a session's first small read, against other sources' first reads.

A child process (`python -m benchmarks.datasource_job`, one SparkSession on local[2])
writes a component of 4 tasks with `df.write.format("taskstate")` and reads it back whole
with `spark.read.format("taskstate")`, at two sizes; the times include Spark's jobs, as a
user's would. The read's query, `count(*)` and `sum(octet_length(value))`, brings every row
and value into Spark and checks their number and size (`length`, which counts characters,
would add a UTF-8 scan of every value: the query's work, not the read's). Baselines, on
the same Redis in the same run:

- read: HSCAN of the same four hashes into a dict through one redis-py connection (the
  raw speed of the data in Redis; the median of three, as the read's), and `taskstate
  export` of the same component;
- write: `taskstate import` of the same state (the export's file), after a drop;
- memory: the peak RSS of one Spark Python worker during the read, at the larger size
  against the smaller (flat: a read holds a page, not the task).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from taskstate.sidecar.storage.redis.keys import data_key
from taskstate.testing import RedisServer

from ..common import Bench, Figure, say

SIZES = {"full": (100_000, 1_000_000), "quick": (5_000, 50_000)}
TASKS = 4


def measure(bench: Bench, size: tuple[int, int]) -> list[Figure]:
    """The data source figures."""
    return [
        *data_source(bench.redis, bench.target, bench.work, *size),
        first_read(bench.target, bench.work),
    ]


def _cli(target: str, *args: str) -> float:
    """Run a taskstate command; its wall time."""
    t0 = time.perf_counter()
    r = subprocess.run(  # noqa: S603 - our own module
        [sys.executable, "-m", "taskstate.cli.main", *args, "--sidecar", target],
        capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    if r.returncode != 0:
        raise RuntimeError(f"taskstate {' '.join(args)} failed: {r.stderr[-2000:]}")
    return time.perf_counter() - t0


def _hscan(redis: RedisServer, ns: str, comp: str, times: int = 1) -> tuple[float, int]:
    """HSCAN every task's hash into one dict: (seconds, the median of `times`; keys)."""
    c = redis.client()
    took, n = [], 0
    for _ in range(times):
        t0 = time.perf_counter()
        out: dict[bytes, bytes] = {}
        for p in range(TASKS):
            cursor = 0
            while True:
                cursor, page = c.hscan(data_key(ns, comp, p), cursor, count=2000)
                out.update(page)
                if cursor == 0:
                    break
        took.append(time.perf_counter() - t0)
        n = len(out)
        del out  # the next scan builds its dict afresh, as the first did
    return statistics.median(took), n


def data_source(redis: RedisServer, target: str, work: Path, small: int, big: int) -> list[Figure]:
    """Write and read at two sizes in Spark; the baselines on the larger."""
    ns = f"bench-ds-{time.time_ns() % 10**9}"
    report_file = work / "datasource.json"
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    with open(work / "datasource.log", "wb") as log:
        code = subprocess.run(  # noqa: S603 - our own module
            [sys.executable, "-m", "benchmarks.datasource_job", target, ns, str(small),
             str(big), "--out", str(report_file)],
            env=env, stdout=log, stderr=subprocess.STDOUT, timeout=3600, check=False,
        ).returncode  # fmt: skip
    if code != 0:
        tail = (work / "datasource.log").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"the data source job exited with {code}:\n{tail}")
    report = json.loads(report_file.read_text())
    ours = report[str(big)]
    floor_s = report.get("floor_s", 0.0)
    comp = f"s{big}"
    scan_s, scanned = _hscan(redis, ns, comp, times=3)  # as the read: the median of three
    if scanned != big:
        raise AssertionError(f"data source benchmark: Redis holds {scanned} keys of {big}")
    dump = work / "export.jsonl"
    export_s = _cli(target, "export", f"{ns}/{comp}", "--out", str(dump))
    _cli(target, "drop", f"{ns}/{comp}", "--yes")
    import_s = _cli(target, "import", str(dump))
    if _hscan(redis, ns, comp)[1] != big:
        raise AssertionError("data source benchmark: the import did not restore every key")
    rss_small = report[str(small)]["peak_worker_rss_kib"]
    rss_big = ours["peak_worker_rss_kib"]
    say(
        f"data source {big:,} keys: read {ours['read_s']:.2f} s (a Python data source of "
        f"12 constant rows: {floor_s:.2f} s; HSCAN {scan_s:.2f} s, export "
        f"{export_s:.2f} s), write {ours['write_s']:.2f} s (import {import_s:.2f} s), worker "
        f"RSS {rss_small / 1024:.0f} -> {rss_big / 1024:.0f} MiB"
    )
    read_ratio = scan_s / ours["read_s"]
    return [
        Figure(
            name=f"data source read of {big:,} keys in {TASKS} tasks (local[2]): keys/s vs "
            "HSCAN into a dict",
            ours=big / ours["read_s"],
            baseline=big / scan_s,
            unit="keys/s",
            ratio=read_ratio,
            target=">= 0.7",
            met=read_ratio >= 0.7,
            detail={
                "read_s": round(ours["read_s"], 3),
                "hscan_s": round(scan_s, 3),
                "export_s": round(export_s, 3),
                "vs_export": round(export_s / ours["read_s"], 2),
                # the same query on a Python data source of 12 constant rows: Spark's part
                "spark_floor_s": round(floor_s, 3),
            },  # fmt: skip
        ),
        Figure(
            name=f"data source write of {big:,} keys in {TASKS} tasks (local[2]): keys/s vs "
            "taskstate import",
            ours=big / ours["write_s"],
            baseline=big / import_s,
            unit="keys/s",
            ratio=import_s / ours["write_s"],
            target="> 1 (faster than import)",
            met=import_s > ours["write_s"],
            detail={"write_s": round(ours["write_s"], 3), "import_s": round(import_s, 3)},
        ),
        Figure(
            name=f"data source read: peak Python worker RSS, {big:,} keys against {small:,}",
            ours=rss_big / 1024,
            baseline=rss_small / 1024,
            unit="MiB",
            ratio=rss_big / rss_small,
            target="<= 1.2 (flat: a page, not the task)",
            met=rss_big / rss_small <= 1.2,
        ),
    ]


FIRST_ROWS = 300


def first_read(target: str, work: Path) -> Figure:
    """A session's first small read, against a first read of a Python data source and JSON.

    Each kind in a fresh SparkSession of its own (benchmarks/first_read_job.py).
    """
    from taskstate.client import LocalContext, TaskState

    ns = f"bench-first-{time.time_ns() % 10**9}"
    for p in range(TASKS):
        with TaskState(LocalContext(p, batch_id=None), component="small", namespace=ns,
                       sidecar=target) as s:  # fmt: skip
            for i in range(FIRST_ROWS // TASKS):
                s[f"k{p}-{i}"] = {"v": i}
    json_dir = work / "first-json"
    json_dir.mkdir(exist_ok=True)
    rows = (
        json.dumps({"partition": i % TASKS, "key": f"k{i}", "value": "1"})
        for i in range(FIRST_ROWS)
    )
    (json_dir / "rows.json").write_text("\n".join(rows) + "\n")
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    got: dict[str, dict[str, float]] = {}
    for kind in ("python", "json", "taskstate"):
        out = work / f"first-{kind}.json"
        with open(work / f"first-{kind}.log", "wb") as log:
            code = subprocess.run(  # noqa: S603 - our own module
                [sys.executable, "-m", "benchmarks.first_read_job", target, ns, "small",
                 str(json_dir), str(FIRST_ROWS), kind, "--out", str(out)],
                env=env, stdout=log, stderr=subprocess.STDOUT, timeout=600, check=False,
            ).returncode  # fmt: skip
        if code != 0:
            tail = (work / f"first-{kind}.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"the first-read job ({kind}) exited with {code}:\n{tail}")
        got[kind] = json.loads(out.read_text())
    ours, floor, js = got["taskstate"], got["python"], got["json"]
    say(
        f"first read of {FIRST_ROWS} rows in a fresh session: taskstate {ours['first_s']:.2f} s "
        f"(later {ours['later_s']:.2f} s; configure() {ours['configure_s']:.2f} s), a Python "
        f"data source {floor['first_s']:.2f} s (later {floor['later_s']:.2f} s), JSON "
        f"{js['first_s']:.2f} s (later {js['later_s']:.2f} s)"
    )
    ratio = ours["first_s"] / floor["first_s"]
    return Figure(
        name=f"a session's first data source read of {FIRST_ROWS} rows, against a first read "
        "of a Python data source of the same rows (lower is better)",
        ours=ours["first_s"],
        baseline=floor["first_s"],
        unit="s",
        ratio=ratio,
        target="<= 1.5",
        met=ratio <= 1.5,
        detail={
            "later_s": round(ours["later_s"], 3),
            "configure_s": round(ours["configure_s"], 3),
            "python_later_s": round(floor["later_s"], 3),
            "json_first_s": round(js["first_s"], 3),
            "json_later_s": round(js["later_s"], 3),
        },
    )
