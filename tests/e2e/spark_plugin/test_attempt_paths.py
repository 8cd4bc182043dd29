"""Other ways one task attempt uses several Python processes, with real Spark.

The e2e SparkSession (conftest `spark`: `local[2,4]`, `spark.python.worker.reuse=false`,
a fresh worker for every Python runner) runs:
- a chain of two mapInPandas steps in one stage, both keeping state in one component:
  Spark runs each step in its own worker, concurrently, for the same task attempt;
- foreachBatch running two jobs over the same stateful step: two attempts of one batch
  (the second is a replay of the first: rolled back, then applied once);
- transformWithStateInPandas with event-time timers through TaskStateProcessor.
Each result is checked exactly against what the events imply.
"""

from __future__ import annotations

import collections
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from taskstate.demo.jobs import key_of
from taskstate.sidecar.storage.redis.keys import meta_key
from taskstate.spark_plugin import configure, with_batch_id
from taskstate.testing import RedisServer, SidecarProcess

from ..conftest import event_stream, stored_state

pytestmark = pytest.mark.e2e

BATCHES, PER_BATCH, KEYS = 4, 60, 12
T0_MS = 1_700_000_000_000
TWS_COLUMNS = ("key", "n", "closed", "batch", "pid")


def configured(spark: Any, prefix: str) -> str:
    """A new namespace, set with configure() for the queries started next."""
    ns = f"{prefix}-{uuid.uuid4().hex[:6]}"
    configure(spark, namespace=ns)
    return ns


def events(spark: Any) -> Any:
    return event_stream(spark, PER_BATCH, BATCHES, KEYS)


def run(query: Any, checkpoint: Path, last_batch: int = BATCHES - 1) -> None:
    """Run the query through its last batch of events and any batch Spark runs after it
    without new data (timers that the last watermark expires), then stop it.

    Stopped at the last batch of events instead, a query may be in such a batch: its
    tasks have committed their TaskState, its output has not (a restart would replay it,
    rolling the state back), and the output would miss what the state no longer holds.
    """
    done = checkpoint / "commits" / str(last_batch)
    deadline = time.monotonic() + 300
    try:
        while not done.exists():
            assert query.exception() is None, query.exception()
            assert time.monotonic() < deadline, "the query did not finish"
            time.sleep(0.2)
        query.processAllAvailable()  # the source is dry: returns once Spark has nothing to run
        planned = max(int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())
        assert (checkpoint / "commits" / str(planned)).exists(), f"batch {planned} in flight"
    finally:
        query.stop()


def counts() -> dict[str, int]:
    return dict(collections.Counter(key_of(i, KEYS) for i in range(BATCHES * PER_BATCH)))


def counting_step(prefix: str, sidecar: str) -> Any:
    """A mapInPandas step counting events per key in component 'chain', keys `prefix:k`."""

    def step(frames: Iterator[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        from taskstate.client import TaskState

        with TaskState(TaskContext.get(), component="chain", sidecar=sidecar) as s:
            for pdf in frames:
                for key in pdf["key"]:
                    s[f"{prefix}:{key}"] = s.get(f"{prefix}:{key}", 0) + 1
                yield pdf.assign(**{f"pid_{prefix}": os.getpid()})

    return step


def test_a_chain_of_two_steps_shares_the_attempt_claim(
    spark: Any, redis_server: RedisServer, sidecar: SidecarProcess, tmp_path: Path
) -> None:
    ns = configured(spark, "chain")
    schema1 = "event_id long, key string, value long, pid_a long"
    chained = (
        events(spark)
        .repartition(2, "key")
        .mapInPandas(counting_step("a", sidecar.target), schema1)
        .mapInPandas(counting_step("b", sidecar.target), schema1 + ", pid_b long")
    )
    q = (
        chained.writeStream.format("json")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    run(q, tmp_path / "ck")
    out = spark.read.json(str(tmp_path / "out")).collect()
    assert len(out) == BATCHES * PER_BATCH
    assert all(r.pid_a != r.pid_b for r in out), "both steps ran in one process"
    want = counts()
    state = stored_state(redis_server, ns, "chain")
    assert state == {f"{p}:{k}": n for p in ("a", "b") for k, n in want.items()}


def test_foreach_batch_with_two_jobs_over_the_state_counts_once(
    spark: Any, redis_server: RedisServer, sidecar: SidecarProcess, tmp_path: Path
) -> None:
    ns = configured(spark, "fb")
    target = sidecar.target

    def update(rows: Iterator[Any]) -> Iterator[tuple[str, int]]:
        from pyspark import TaskContext

        from taskstate.client import TaskState

        with TaskState(TaskContext.get(), component="totals", sidecar=target) as s:
            for r in rows:
                s[r.key] = s.get(r.key, 0) + 1
                yield r.key, s[r.key]

    seen: list[int] = []

    @with_batch_id
    def each(df: Any, batch_id: int) -> None:
        rdd = df.repartition(2, "key").rdd.mapPartitions(update)
        n = rdd.count()  # a first job: one attempt per partition commits the batch
        seen.append(len(rdd.collect()) - n)  # a second job: new attempts replay it

    q = (
        events(spark)
        .writeStream.foreachBatch(each)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    run(q, tmp_path / "ck")
    assert seen == [0] * BATCHES
    assert stored_state(redis_server, ns, "totals") == counts()


@pytest.mark.spark_feature("transformWithStateInPandas")
def test_transform_with_state_timers_through_task_state_processor(
    spark: Any, redis_server: RedisServer, sidecar: SidecarProcess, tmp_path: Path
) -> None:
    from pyspark.sql import functions as F  # noqa: N812

    from taskstate.spark_plugin.processor import TaskStateProcessor

    ns = configured(spark, "tws")
    target = sidecar.target

    def emitted(key: str, n: int, closed: int) -> Any:
        import pandas as pd
        from pyspark import TaskContext

        ctx = TaskContext.get()
        assert ctx is not None
        batch = int(ctx.getLocalProperty("streaming.sql.batchId") or -1)
        return pd.DataFrame([(key, n, closed, batch, os.getpid())], columns=list(TWS_COLUMNS))

    class Sessions(TaskStateProcessor):
        """Counts per key; an event-time timer closes a key silent for 2 s of event time."""

        component = "tws"
        sidecar = target

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:  # noqa: N802, N803
            (k,) = key
            n = sum(len(pdf) for pdf in rows)
            self.state[k] = self.state.get(k, 0) + n
            for t in self.handle.listTimers():
                self.handle.deleteTimer(t)
            self.handle.registerTimer(timerValues.getCurrentWatermarkInMs() + 2000)
            yield emitted(k, n, 0)

        def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Any:  # noqa: N802, N803
            (k,) = key
            yield emitted(k, 0, self.state.pop(k))

    # event time starts well after 0: the first watermark is 0, and rows at or before the
    # watermark are dropped as late
    millis = F.lit(T0_MS) + F.col("event_id") * F.lit(10_000 // PER_BATCH)
    stream = events(spark).withColumn("ts", F.timestamp_millis(millis))
    q = (
        stream.withWatermark("ts", "0 seconds")
        .groupBy("key")
        .transformWithStateInPandas(
            statefulProcessor=Sessions(),
            outputStructType="key string, n long, closed long, batch long, pid long",
            outputMode="Append",
            timeMode="EventTime",
        )
        .writeStream.format("json")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    run(q, tmp_path / "ck")
    out = spark.read.json(str(tmp_path / "out")).collect()
    closed: collections.Counter[str] = collections.Counter()
    for r in out:
        closed[r.key] += r.closed
    still_open = stored_state(redis_server, ns, "tws")
    # every event counted exactly once: in a closed session or in one still open (the
    # batch Spark runs after the last events, for the timers their watermark expires,
    # closes every session)
    assert sum(closed.values()) > 0, "no timer fired"
    assert max(r.batch for r in out) >= BATCHES, "no batch ran for the last timers"
    total = {k: closed.get(k, 0) + still_open.get(k, 0) for k in counts()}
    bad = sorted(k for k, n in counts().items() if total[k] != n)
    seen = sorted((r.key, r.batch, r.n, r.closed, r.pid) for r in out if r.key in bad)
    if total != counts():  # what Redis holds of the component: its tasks' metadata
        c = redis_server.client()
        metas = {k.decode(): c.hgetall(k) for k in c.scan_iter(match=meta_key(ns, "tws", "*"))}
        held = sorted(k.decode() for k in c.scan_iter())
        pytest.fail(
            f"keys {bad}: output rows {seen}, still open {still_open}, meta {metas}, "
            f"Redis holds {held}"
        )
