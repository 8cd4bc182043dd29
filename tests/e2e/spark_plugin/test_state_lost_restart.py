"""A query whose Redis lost everything is refused when restarted, never run on empty.

Real Spark (the e2e SparkSession, `local[2,4]`), a real redis-server without persistence
and the real sidecar: a mapInPandas query set up with `configure(spark, namespace=...)`
counts events per key in TaskState and commits batches 0-1; Redis restarts (no AOF, no
RDB: everything is gone); the query restarted from its checkpoint fails at batch 2 with
StateLostError in every attempt of its tasks, writing nothing (no state, no output).
After `taskstate adopt NAMESPACE` the same restart runs batches 2-3 from an empty state,
on purpose, and every count is exactly that of batches 2-3.
"""

from __future__ import annotations

import collections
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from taskstate.demo.jobs import key_of
from taskstate.sidecar.storage.redis.keys import namespace_pattern
from taskstate.spark_plugin import configure
from taskstate.testing import RedisServer, SidecarProcess

from ..conftest import event_stream, stored_state, to_json_files

pytestmark = pytest.mark.e2e

PER_BATCH, KEYS = 40, 8


def counting(sidecar: str) -> Any:
    def step(frames: Iterator[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        from taskstate.client import TaskState

        with TaskState(TaskContext.get(), component="counts", sidecar=sidecar) as s:
            for pdf in frames:
                for key in pdf["key"]:
                    s[key] = s.get(key, 0) + 1
                yield pdf

    return step


def start(spark: Any, sidecar: str, batches: int, tmp: Path) -> Any:
    events = event_stream(spark, PER_BATCH, batches, KEYS)
    df = events.repartition(2, "key").mapInPandas(
        counting(sidecar), "event_id long, key string, value long"
    )
    return to_json_files(df, tmp)


def until(query: Any, done: Path) -> BaseException | None:
    """Wait for `done` (a commit log entry) or the query's failure; stop it."""
    deadline = time.monotonic() + 300
    try:
        while not done.exists():
            if query.exception() is not None:
                return query.exception()  # type: ignore[no-any-return]
            assert time.monotonic() < deadline, "the query neither finished nor failed"
            time.sleep(0.2)
        return None
    finally:
        query.stop()


def counts(first: int, last: int) -> dict[str, int]:
    ids = range(first * PER_BATCH, (last + 1) * PER_BATCH)
    return dict(collections.Counter(key_of(i, KEYS) for i in ids))


def test_a_restarted_query_whose_redis_lost_everything_fails_until_adopted(
    spark: Any, redis_server: RedisServer, sidecar: SidecarProcess, tmp_path: Path
) -> None:
    ns = f"lost-{uuid.uuid4().hex[:6]}"
    configure(spark, namespace=ns)
    assert until(start(spark, sidecar.target, 2, tmp_path), tmp_path / "ck/commits/1") is None
    assert stored_state(redis_server, ns, "counts") == counts(0, 1)

    redis_server.stop()  # a Redis without persistence restarts empty
    redis_server.start()
    failure = until(start(spark, sidecar.target, 4, tmp_path), tmp_path / "ck/commits/3")
    assert failure is not None, "the query ran on from an empty state"
    text = str(failure)
    assert "StateLostError" in text and "Spark runs batch 2" in text
    assert f"no record of namespace '{ns}'" in text and f"taskstate adopt {ns}" in text
    assert not (tmp_path / "ck/commits/2").exists()
    assert redis_server.client().keys(namespace_pattern(ns)) == [], "a refused Open wrote"
    sink_log = (tmp_path / "out/_spark_metadata").iterdir()
    out_batches = {p.name for p in sink_log if not p.name.startswith(".")}  # not .N.crc
    assert out_batches == {"0", "1"}, "batch 2's output was written"

    adopt = [sys.executable, "-m", "taskstate.cli.main", "adopt", ns, "--sidecar", sidecar.target]
    done = subprocess.run(adopt, capture_output=True, text=True, timeout=60, check=True)
    assert "adopted" in done.stdout
    assert until(start(spark, sidecar.target, 4, tmp_path), tmp_path / "ck/commits/3") is None
    assert stored_state(redis_server, ns, "counts") == counts(2, 3)  # empty at 2, on purpose
