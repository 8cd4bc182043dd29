"""Figure 4: the demo job in Spark, taskstate against a plain dict and Spark's state."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from ..common import Bench, Figure, say

SIZES = {"full": (14, 2000), "quick": (4, 300)}


def measure(bench: Bench, size: tuple[int, int]) -> list[Figure]:
    """The demo batch figures."""
    return spark_demo(bench.target, bench.work, *size)


WARMUP_BATCHES = 4


def _demo_run(
    work: Path, name: str, state: str, sidecar: str, batches: int, tweets: int
) -> list[float]:
    """One demo query; the durations (ms) of its batches after the warm-up."""
    run = work / name
    run.mkdir(parents=True, exist_ok=True)
    progress = run / "progress.json"
    cmd = [
        sys.executable, "-m", "taskstate.demo.trending", "--query",
        "--namespace", f"bench-demo-{name}-{os.getpid()}", "--sidecar", sidecar,
        "--state", state, "--batches", str(batches), "--tweets-per-batch", str(tweets),
        "--buckets-per-batch", "6", "--partitions", "4", "--master", "local[2]",
        "--out-dir", str(run / "out"), "--checkpoint", str(run / "checkpoint"),
        "--progress-file", str(progress),
    ]  # fmt: skip
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    with open(run / "query.log", "wb") as log:
        code = subprocess.run(  # noqa: S603 - our own module
            cmd, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=600, check=False
        ).returncode
    if code != 0:
        tail = (run / "query.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"the {name} demo query exited with {code}:\n{tail}")
    reports = json.loads(progress.read_text())
    durations = {int(r["batchId"]): float(r["batchDuration"]) for r in reports}
    if sorted(durations) != list(range(batches)):
        raise AssertionError(f"{name}: progress for batches {sorted(durations)}")
    rows = sum(1 for f in (run / "out").glob("part-*.json") for _ in f.open())
    if rows == 0:
        raise AssertionError(f"{name}: the query wrote no rows")
    # the first batches are slower while the JVM and the Python workers warm up
    return [durations[b] for b in range(min(WARMUP_BATCHES, batches - 1), batches)]


def spark_demo(sidecar: str, work: Path, batches: int, tweets: int) -> list[Figure]:
    """Median batch duration: taskstate against a plain dict and Spark's RocksDB state."""
    med = {}
    for state in ("taskstate", "dict", "spark"):
        say(f"spark: the demo job with {state} state ({batches} batches of {tweets} tweets)")
        med[state] = statistics.median(_demo_run(work, state, state, sidecar, batches, tweets))
    ts, plain, own = med["taskstate"], med["dict"], med["spark"]
    note = {
        "batches": batches,
        "tweets_per_batch": tweets,
        "median_ms": med,
        "note": "ratio is ours/baseline (lower is better); the first "
        f"{WARMUP_BATCHES} batches are warm-up",
    }
    return [
        Figure("demo batch: taskstate vs plain dict (median)", ts, plain, "ms", ts / plain,
               "<= 1.10", ts / plain <= 1.10, note),
        Figure("demo batch: taskstate vs Spark's RocksDB state (median)", ts, own, "ms",
               ts / own, "<= 1.00", ts / own <= 1.0,
               {**note, "spark_job": "groupBy(tag).applyInPandasWithState, RocksDB provider; "
                "emits only the tags of the batch"}),
    ]  # fmt: skip
