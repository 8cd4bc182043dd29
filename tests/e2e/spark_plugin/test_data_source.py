"""The taskstate data source with real Spark, a real sidecar and redis-server.

- A running-totals query's state read back as a DataFrame equals the totals its input
  gives; batchId and changesSinceBatch answer exactly, or say clearly why not; filters on
  `partition` and `key` are pushed down (the sidecar's metrics count what was read).
- Reads while the query commits are consistent per task.
- A seed written from a DataFrame starts a streaming query exactly; a seed at a batch
  continues a query whose Redis lost everything, from its checkpoint.
- A write killed with its driver leaves nothing visible and the next command undoes it;
  a write whose executor is killed runs on and lands exactly once.
- Writes are refused while the component's query runs, and without the namespace's token.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from taskstate.client import LocalContext, PartitionCountError, TaskState
from taskstate.demo.jobs import key_of, value_of
from taskstate.sidecar.spark_hash import partition_of
from taskstate.sidecar.storage.redis.keys import namespace_key, namespace_pattern
from taskstate.spark_plugin import compat, configure
from taskstate.testing import RedisServer, SidecarProcess

from ..conftest import event_stream, to_json_files
from .test_state_lost_restart import until

pytestmark = [pytest.mark.e2e, pytest.mark.spark_feature("data source")]

PER_BATCH, KEYS, PARTS = 80, 40, 3
JOB = Path(__file__).parent.parent / "jobs" / "seed_writer.py"


@pytest.fixture(scope="module")
def metered(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SidecarProcess]:
    """The module's sidecar, whose metrics show what a read asked for."""
    sock = tmp_path_factory.mktemp("ds") / "s.sock"
    with SidecarProcess(redis_server.url, sock, extra=["--metrics-port", "0"]) as s:
        yield s


def totals(sidecar: str, seeded: bool = False) -> Any:
    """mapInPandas: a running count and total per key; output rows show them."""

    def step(frames: Iterator[Any]) -> Iterator[Any]:
        import pandas as pd
        from pyspark import TaskContext

        ctx = TaskContext.get()
        assert ctx is not None
        batch = int(ctx.getLocalProperty("streaming.sql.batchId") or -1)
        out = []
        with TaskState(ctx, component="totals", sidecar=sidecar, partitions=PARTS) as s:
            for pdf in frames:
                for eid, key, value in pdf[["event_id", "key", "value"]].itertuples(index=False):
                    st = s.get(key) or {"count": 0, "total": 0}
                    st = {"count": st["count"] + 1, "total": st["total"] + int(value)}
                    s[key] = st
                    out.append((batch, int(eid), key, st["count"], st["total"]))
        yield pd.DataFrame(out, columns=["batch", "event_id", "key", "count", "total"])

    return step


def run(spark: Any, sidecar: str, batches: int, tmp: Path, seeded: bool = False) -> None:
    """The totals query over `batches` batches, run to the end."""
    events = event_stream(spark, PER_BATCH, batches, KEYS).repartition(PARTS, "key")
    df = events.mapInPandas(
        totals(sidecar), "batch long, event_id long, key string, count long, total long"
    )
    assert until(to_json_files(df, tmp), tmp / f"ck/commits/{batches - 1}") is None


def expected(
    first: int, last: int, base: dict[str, dict[str, int]] | None = None
) -> dict[str, Any]:
    state = {k: dict(v) for k, v in (base or {}).items()}
    for i in range(first * PER_BATCH, (last + 1) * PER_BATCH):
        st = state.setdefault(key_of(i, KEYS), {"count": 0, "total": 0})
        st["count"] += 1
        st["total"] += value_of(i)
    return state


def read(spark: Any, ns: str, sidecar: str, **options: Any) -> Any:
    r = spark.read.format("taskstate").option("namespace", ns).option("component", "totals")
    r = r.option("sidecar", sidecar)
    for k, v in options.items():
        r = r.option(k, str(v))
    return r.load()


def as_state(rows: list[Any]) -> dict[str, Any]:
    return {r["key"]: json.loads(r["value"]) for r in rows}


def metric(side: SidecarProcess, name: str) -> float:
    return side.metrics().get(name, 0.0)


@pytest.mark.compat
def test_the_state_as_a_dataframe_equals_what_the_input_gives(
    spark: Any, metered: SidecarProcess, tmp_path: Path
) -> None:
    ns = f"ds-{uuid.uuid4().hex[:6]}"
    configure(spark, namespace=ns)
    run(spark, metered.target, 4, tmp_path)
    rows = read(spark, ns, metered.target).collect()
    assert as_state(rows) == expected(0, 3)
    assert {r["batch"] for r in rows} == {3}
    assert all(r["partition"] == partition_of(r["key"], PARTS) for r in rows)
    # Spark's own tools on it: the largest totals, joined with the input's own count
    top = (
        read(spark, ns, metered.target)
        .selectExpr("key", "from_json(value, 'count long, total long') AS v")
        .orderBy("v.total", ascending=False)
        .limit(3)
        .collect()
    )
    want = sorted(expected(0, 3).items(), key=lambda kv: -kv[1]["total"])[:3]
    assert [r["v"]["total"] for r in top] == [v["total"] for _, v in want]

    # batchId: exactly that batch, or a clear refusal naming the tasks
    assert as_state(read(spark, ns, metered.target, batchId=3).collect()) == expected(0, 3)
    with pytest.raises(Exception, match=r"batchId=2, but .*/totals/0 at batch 3"):
        read(spark, ns, metered.target, batchId=2).collect()

    # changesSinceBatch: the keys batch 3 changed, their values now
    changed = read(spark, ns, metered.target, changesSinceBatch=2).collect()
    batch3 = {key_of(i, KEYS) for i in range(3 * PER_BATCH, 4 * PER_BATCH)}
    assert {r["key"] for r in changed} == batch3
    assert as_state(changed) == {k: v for k, v in expected(0, 3).items() if k in batch3}
    assert not any(r["deleted"] for r in changed)
    assert as_state(read(spark, ns, metered.target, changesSinceBatch=-1).collect()) == expected(
        0, 3
    )

    # pushdown: a partition filter reads one task, a key filter only those keys (on Spark
    # 4.0, which pushes no filter down to a Python source: every task, in full)
    reads = 'taskstate_requests_total{code="ok",method="Read"}'
    whole = 'taskstate_read_keys_total{kind="whole"}'
    keyed = 'taskstate_read_keys_total{kind="keys"}'
    before = {m: metric(metered, m) for m in (reads, whole, keyed)}
    one = read(spark, ns, metered.target).where("partition = 1").collect()
    assert as_state(one) == {k: v for k, v in expected(0, 3).items() if partition_of(k, PARTS) == 1}
    pushdown = compat.has("filter pushdown", spark)
    assert metric(metered, reads) - before[reads] == (1 if pushdown else PARTS)
    assert metric(metered, whole) - before[whole] == (len(one) if pushdown else len(expected(0, 3)))
    some = read(spark, ns, metered.target).where("key IN ('k001', 'k007', 'nope')").collect()
    assert as_state(some) == {k: expected(0, 3)[k] for k in ("k001", "k007")}
    if pushdown:
        assert metric(metered, keyed) - before[keyed] == 2  # found keys only, one read per task
        assert metric(metered, whole) - before[whole] == len(one)  # no whole task was read
    else:  # both reads took every task whole
        assert metric(metered, keyed) - before[keyed] == 0
        assert metric(metered, whole) - before[whole] == 2 * len(expected(0, 3))

    # registered by hand, without configure(): read without pushdown (Spark refuses a
    # reader that pushes filters while its conf is off), the same rows
    from taskstate.spark_plugin import TaskStateDataSource

    conf = "spark.sql.python.filterPushdown.enabled"
    spark.conf.set(conf, "false")
    spark.dataSource.register(TaskStateDataSource)
    try:
        by_hand = read(spark, ns, metered.target).where("partition = 1").collect()
        assert as_state(by_hand) == as_state(one)
        assert as_state(read(spark, ns, metered.target).collect()) == expected(0, 3)
    finally:
        configure(spark, namespace=ns)  # the conf and the source as the other tests use them
    assert spark.conf.get(conf) == ("true" if pushdown else "false")

    # a component that has no state
    with pytest.raises(Exception, match=f"{ns}/nope has no stored state"):
        spark.read.format("taskstate").option("namespace", ns).option("component", "nope").option(
            "sidecar", metered.target).load().collect()  # fmt: skip


def test_reads_while_the_query_commits_are_one_version_per_task(
    spark: Any, metered: SidecarProcess, tmp_path: Path
) -> None:
    """Each batch rewrites every key of a task with the batch id: a read that mixed two
    versions would show two ids in one task, or ids other than the task's batch."""
    ns = f"dsc-{uuid.uuid4().hex[:6]}"
    target = metered.target
    configure(spark, namespace=ns)

    def stamp(frames: Iterator[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        assert ctx is not None
        batch = int(ctx.getLocalProperty("streaming.sql.batchId") or -1)
        with TaskState(ctx, component="totals", namespace=ns, sidecar=target) as s:
            s.update({f"{ctx.partitionId()}-{i}": {"b": batch} for i in range(2500 + 50 * batch)})
            yield from frames

    events = event_stream(spark, 20, 1000, KEYS).repartition(PARTS, "key")
    query = to_json_files(
        events.mapInPandas(stamp, "event_id long, key string, value long"), tmp_path
    )
    changed = 'taskstate_requests_total{code="CHANGED",method="Read"}'
    try:
        while not (tmp_path / "ck/commits/1").exists():
            assert query.exception() is None, query.exception()
            time.sleep(0.2)
        checked = 0
        for _ in range(12):
            rows = read(spark, ns, target).collect()
            by_task = collections.defaultdict(list)
            for r in rows:
                by_task[r["partition"]].append(r)
            for part, task_rows in by_task.items():
                batch = task_rows[0]["batch"]
                assert {json.loads(r["value"])["b"] for r in task_rows} == {batch}, part
                assert {r["batch"] for r in task_rows} == {batch}
                assert len(task_rows) == 2500 + 50 * batch  # the keys of exactly that batch
                checked += 1
        assert checked >= 12 * PARTS - PARTS
        print(f"reads that met a commit and read again: {metric(metered, changed):.0f}")
    finally:
        query.stop()


@pytest.mark.compat
def test_a_seed_starts_a_query_and_a_seed_at_a_batch_continues_one(
    spark: Any, redis_server: RedisServer, metered: SidecarProcess, tmp_path: Path
) -> None:
    ns = f"dss-{uuid.uuid4().hex[:6]}"
    configure(spark, namespace=ns, sidecar=metered.target)
    base = {key_of(i, KEYS): {"count": 10, "total": 100 + i} for i in range(0, 400, 3)}
    seed = spark.createDataFrame(
        [(k, json.dumps(v)) for k, v in base.items()], "key string, value string"
    ).repartition(5)  # not the job's partitioning: the data source places each key
    seed.write.format("taskstate").option("component", "totals").option(
        "partitions", PARTS).mode("append").save()  # fmt: skip
    assert as_state(read(spark, ns, metered.target).collect()) == base
    run(spark, metered.target, 3, tmp_path / "q")
    out = [
        json.loads(line)
        for f in (tmp_path / "q/out").glob("*.json")
        for line in f.read_text().splitlines()
    ]
    want: dict[str, list[int]] = {k: [v["count"], v["total"]] for k, v in base.items()}
    rows = {}
    for i in range(3 * PER_BATCH):
        st = want.setdefault(key_of(i, KEYS), [0, 0])
        st[0] += 1
        st[1] += value_of(i)
        rows[i] = (i // PER_BATCH, key_of(i, KEYS), st[0], st[1])
    assert {r["event_id"]: (r["batch"], r["key"], r["count"], r["total"]) for r in out} == rows
    assert len(out) == 3 * PER_BATCH  # every row exactly once

    # Redis loses everything; the state is seeded back at the batch the checkpoint holds,
    # and the query goes on from its checkpoint without `taskstate adopt`
    final = as_state(read(spark, ns, metered.target).collect())
    redis_server.client().flushall()
    backup = [(k, json.dumps(v)) for k, v in final.items()]
    w = spark.createDataFrame(backup, "key string, value string").write.format("taskstate")
    w.option("component", "totals").option("partitions", PARTS).option("batchId", 2).mode(
        "overwrite").save()  # fmt: skip
    run(spark, metered.target, 5, tmp_path / "q")
    assert as_state(read(spark, ns, metered.target).collect()) == expected(3, 4, final)
    # the seed started each task's change log afresh: it holds the changes after batch 2
    batch4 = {key_of(i, KEYS) for i in range(4 * PER_BATCH, 5 * PER_BATCH)}
    assert {
        r["key"] for r in read(spark, ns, metered.target, changesSinceBatch=3).collect()
    } == batch4
    with pytest.raises(
        Exception, match="holds the changes after batch 2 and later, not those after batch 1"
    ):
        read(spark, ns, metered.target, changesSinceBatch=1).collect()


def test_a_write_whose_driver_dies_leaves_nothing_and_the_next_command_undoes_it(
    spark: Any, redis_server: RedisServer, metered: SidecarProcess, tmp_path: Path
) -> None:
    ns = f"dsk-{uuid.uuid4().hex[:6]}"
    proc = writer(redis_server, metered, ns, "local[2]", "slow", tmp_path, rows=20000, parts=2)
    c = redis_server.client()
    deadline = time.monotonic() + 120
    while not staged(redis_server, ns):
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert time.monotonic() < deadline, "the write never staged a page"
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert c.hget(namespace_key(ns), "seed/totals") is not None
    # nothing is visible: a read and an Open are refused, no task holds a key
    with pytest.raises(Exception, match="a write of the taskstate data source"):
        read(spark, ns, metered.target).collect()
    with pytest.raises(PartitionCountError, match="a write of the taskstate data source"):
        with TaskState(LocalContext(0, batch_id=0), component="totals", namespace=ns,
                       sidecar=metered.target):  # fmt: skip
            pass
    assert not [k for k in c.keys(namespace_pattern(ns)) if k.endswith(b":data")]
    time.sleep(4.5)  # its lease runs out
    ls = cli(metered, "ls", ns)
    assert ls.returncode == 0, ls.stderr
    assert "undid the write" in ls.stderr and "nothing of it was ever visible" in ls.stderr
    assert c.keys(namespace_pattern(ns)) == []  # not a staging hash or placeholder left
    with pytest.raises(Exception, match="has no stored state"):
        read(spark, ns, metered.target).collect()


def test_a_write_whose_executor_dies_lands_exactly_once(
    spark_ready: None, redis_server: RedisServer, metered: SidecarProcess, tmp_path: Path
) -> None:
    ns = f"dse-{uuid.uuid4().hex[:6]}"
    proc = writer(redis_server, metered, ns, "local-cluster[2,1,1024]", "executor", tmp_path,
                  rows=3000, parts=4)  # fmt: skip
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0 and "done" in out, err[-4000:]
    assert int((tmp_path / "staged").read_text()) > 0  # the executor died mid-write
    c = redis_server.client()
    got: dict[str, Any] = {}
    for p in range(3):
        data = c.hgetall(f"ts:{{{ns}/totals/{p}}}:data")
        assert all(partition_of(k.decode(), 3) == p for k in data)
        got.update({k.decode(): json.loads(v)["v"] for k, v in data.items()})
    assert got == {f"k{i}": i for i in range(3000)}
    assert not staged(redis_server, ns) and c.hget(namespace_key(ns), "seed/totals") is None


def test_writes_are_refused_while_the_query_runs_and_without_the_namespaces_token(
    spark: Any, redis_server: RedisServer, metered: SidecarProcess, tmp_path: Path
) -> None:
    ns = f"dsr-{uuid.uuid4().hex[:6]}"
    events = event_stream(spark, 20, 1000, KEYS).repartition(PARTS, "key")
    df = events.mapInPandas(
        totals(metered.target), "batch long, event_id long, key string, count long, total long"
    )
    configure(spark, namespace=ns)
    query = to_json_files(df, tmp_path)
    seed = spark.createDataFrame([("k001", "{}")], "key string, value string")
    try:
        while not (tmp_path / "ck/commits/1").exists():
            assert query.exception() is None, query.exception()
            time.sleep(0.2)
        with pytest.raises(Exception, match=r"was written \d+ s ago: the query still runs"):
            w = seed.write.format("taskstate").option("namespace", ns)
            w = w.option("component", "totals").option("sidecar", metered.target)
            w.option("partitions", PARTS).mode("overwrite").save()
    finally:
        query.stop()

    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"tokens": [
        {"name": "ours", "token": "t-ours-0123456789abcdef", "namespaces": [ns]},
        {"name": "other", "token": "t-other-0123456789abcdef", "namespaces": ["someone-else"]},
    ]}))  # fmt: skip
    (tmp_path / "other").write_text("t-other-0123456789abcdef")
    with SidecarProcess(
        redis_server.url, tmp_path / "tok.sock", extra=["--tokens-file", str(tokens)]
    ) as guarded:
        for op in ("read", "write"):
            with pytest.raises(Exception, match="token 'other' may not [a-z ]+ it"):
                if op == "read":
                    read(spark, ns, guarded.target, tokenFile=tmp_path / "other").collect()
                else:
                    seed.write.format("taskstate").option("namespace", ns).option(
                        "component", "fresh").option("sidecar", guarded.target).option(
                        "tokenFile", str(tmp_path / "other")).option("partitions", 2).mode(
                        "append").save()  # fmt: skip
    assert redis_server.client().keys(f"ts:*{ns}/fresh*") == []


# -- helpers ------------------------------------------------------------------------------


def writer(
    redis_server: RedisServer, side: SidecarProcess, ns: str, master: str, fault: str,
    marker: Path, *, rows: int, parts: int,
) -> subprocess.Popen[str]:  # fmt: skip
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    return subprocess.Popen(
        [sys.executable, str(JOB), master, ns, "totals", side.target, str(rows), str(parts),
         fault, str(marker), redis_server.url],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip


def staged(redis_server: RedisServer, ns: str) -> list[bytes]:
    c = redis_server.client()
    return [k for k in c.keys(f"ts:*{ns}/totals*:seed:*") if not k.endswith((b":att", b":stage"))]


def cli(side: SidecarProcess, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "taskstate.cli.main", *args, "--sidecar", side.target]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
