"""`taskstate set` and `erase` during a running query: seen in the job's later output,
not undone by a replay of the batch in flight, and the erased key left in no task.

Real Spark (the e2e SparkSession, `local[2,4]`: a failed task is retried), a real
redis-server and sidecar, the real CLI. A mapInPandas query over `repartition(2, "key")`
counts events per key in TaskState and outputs each event with its key's count after it.
In batch 2 the first attempt of each task commits and then waits; the test edits the
state then (`set` one key to 1000, `erase` another), and the attempts fail, so Spark
retries them: the retries replay batch 2 (rolled back first). From batch 3 on, the set
key counts up from 1000 and the erased key from 0.
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

import orjson
import pytest

from taskstate.demo.jobs import key_of
from taskstate.sidecar.spark_hash import partition_of
from taskstate.sidecar.storage.redis.keys import data_key
from taskstate.spark_plugin import configure
from taskstate.testing import RedisServer, SidecarProcess

from ..conftest import event_stream, stored_state, to_json_files
from .test_state_lost_restart import until

pytestmark = pytest.mark.e2e

PER_BATCH, KEYS, BATCHES, PARTS, EDIT_BATCH = 40, 6, 5, 2, 2


def counting(sidecar: str, marks: str) -> Any:
    def step(frames: Iterator[Any]) -> Iterator[Any]:
        import pandas as pd
        from pyspark import TaskContext

        from taskstate.client import TaskState

        ctx = TaskContext.get()
        assert ctx is not None
        rows = []
        with TaskState(ctx, component="counts", sidecar=sidecar, partitions=PARTS) as s:
            for pdf in frames:
                for eid, key in zip(pdf["event_id"], pdf["key"], strict=True):
                    s[key] = s.get(key, 0) + 1
                    rows.append((int(eid), key, s[key]))
            batch = s.batch_id
        if batch == EDIT_BATCH and ctx.attemptNumber() == 0:
            marks_dir = Path(marks)
            (marks_dir / f"committed-{ctx.partitionId()}").touch()
            deadline = time.monotonic() + 120
            while not (marks_dir / "edited").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            raise RuntimeError("injected: fail after the commit, so that Spark replays the batch")
        yield pd.DataFrame(rows, columns=["event_id", "key", "count"])

    return step


def start(spark: Any, sidecar: str, tmp: Path) -> Any:
    events = event_stream(spark, PER_BATCH, BATCHES, KEYS)
    df = events.repartition(PARTS, "key").mapInPandas(
        counting(sidecar, str(tmp / "marks")), "event_id long, key string, count long"
    )
    return to_json_files(df, tmp)


def cli(sidecar: SidecarProcess, *args: str) -> str:
    cmd = [sys.executable, "-m", "taskstate.cli.main", *args, "--sidecar", sidecar.target]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def events_of(key: str, batches: range) -> int:
    ids = range(batches.start * PER_BATCH, batches.stop * PER_BATCH)
    return sum(1 for i in ids if key_of(i, KEYS) == key)


def test_edits_during_a_running_query_hold_from_the_next_batch_through_a_replay(
    spark: Any, redis_server: RedisServer, sidecar: SidecarProcess, tmp_path: Path
) -> None:
    ns = f"edits-{uuid.uuid4().hex[:6]}"
    configure(spark, namespace=ns)
    (tmp_path / "marks").mkdir()
    keys = sorted({key_of(i, KEYS) for i in range(BATCHES * PER_BATCH)})
    later = range(EDIT_BATCH + 1, BATCHES)
    # a key to set and one to erase that both have events after the edit
    busy = [
        k for k in keys if events_of(k, later) and events_of(k, range(EDIT_BATCH, EDIT_BATCH + 1))
    ]
    target, erased = busy[0], busy[1]
    query = start(spark, sidecar.target, tmp_path)
    try:
        deadline = time.monotonic() + 180
        while len(list((tmp_path / "marks").glob("committed-*"))) < PARTS:
            assert query.exception() is None, query.exception()
            assert time.monotonic() < deadline, "batch 2 never committed"
            time.sleep(0.1)
        # batch 2 is committed by its tasks and in flight for Spark: edit now
        p = partition_of(target, PARTS)
        assert "set (it existed)" in cli(sidecar, "set", f"{ns}/counts/{p}", target, "1000")
        assert "erased from 2 task(s); 1 had it" in cli(sidecar, "erase", f"{ns}/counts", erased)
        c = redis_server.client()
        assert all(c.hget(data_key(ns, "counts", q), erased) is None for q in range(PARTS))
        (tmp_path / "marks" / "edited").touch()
    except BaseException:
        query.stop()
        raise
    assert until(query, tmp_path / f"ck/commits/{BATCHES - 1}") is None

    final = stored_state(redis_server, ns, "counts")
    everything = range(BATCHES)
    for k in keys:
        if k == target:
            assert final[k] == 1000 + events_of(k, later), k
        elif k == erased:
            assert final[k] == events_of(k, later), k
        else:
            assert final[k] == events_of(k, everything), k
    # the job's own output: from batch 3 on, the set key counts on from 1000
    rows = [
        orjson.loads(line)
        for f in (tmp_path / "out").glob("*.json")
        for line in f.read_text().splitlines()
    ]
    first_later = EDIT_BATCH * PER_BATCH + PER_BATCH
    counts_after = [r["count"] for r in rows if r["key"] == target and r["event_id"] >= first_later]
    assert counts_after and min(counts_after) == 1001 and max(counts_after) == final[target]
    assert len(rows) == BATCHES * PER_BATCH  # each event once: the failed attempts wrote nothing
    assert collections.Counter(r["key"] for r in rows) == collections.Counter(
        key_of(i, KEYS) for i in range(BATCHES * PER_BATCH)
    )
