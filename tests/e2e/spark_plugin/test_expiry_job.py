"""An applyInPandasWithState job with event-time TTL, golden and under a worker kill.

Issue 30's acceptance: the job under a Python worker SIGKILL equals the same job computed
without faults, and both equal what the events imply, computed here without Spark.

The job (the e2e SparkSession, `local[2,4]`; a real sidecar and redis-server) counts
events per key with a watermark on their event time, one `with TaskState(ttl=TTL_S,
now=...)` block per group: a key silent for TTL_S of event time expires and counts from
zero again; keys `p*` are written with `s.set(..., ttl=None)` and never expire. Every
event is output with its key's count after it, the batch its count started in and the
batch's now.

The batch's now is Spark's watermark for the batch (`GroupState.getCurrentWatermarkMs()`),
not the largest event time a block sees, nor the sidecar's clock: Spark writes each batch's
watermark to the offset log before running the batch, so every attempt of the batch (a
task retry, or a run after a restart from the checkpoint) gets the same value, in every
task and every group of the batch, whichever worker runs it and in whatever order. The
largest event time of the events a block sees depends on which group a task happens to
run first and differs between tasks, and the clock differs between runs. (The sidecar
also fixes the batch's now at its first claim, so a retry could not move it anyway;
the integration tests cover that.) Spark's watermark is 0 in a query's first batch, so
the job passes the stream's start instead there: with 0, every key written in the first
batch would expire at 0 + TTL, that is in the second batch.

Event time: batch b's events are at T0_MS + b * 1000 + 20 .. 960 ms, the watermark has no
delay, so batch b >= 1 runs at now = T0_MS + (b - 1) * 1000 + 960, and TTL_S = 2: a key
last written in batch b >= 1 expires exactly at batch b + 2's now (at or before now:
expired), one written in batch 0 (now T0_MS) lives through batch 2.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from taskstate.demo.jobs import read_output_files, register_range_source
from taskstate.proto import envelope
from taskstate.sidecar.spark_hash import partition_of
from taskstate.sidecar.storage.redis.keys import data_key, meta_key, task_key
from taskstate.testing import RedisServer, SidecarProcess

pytestmark = pytest.mark.e2e

BATCHES, PER_BATCH, PARTS = 7, 48, 2  # PARTS: the e2e session's shuffle partitions
T0_MS, BATCH_MS = 1_700_000_000_000, 1_000
TTL_S = 2.0
KILL_BATCH = 3  # partition 0's Python worker dies after its last group's commit here
COMPONENT = "ttl-counts"
SOURCE = "taskstate_ttl_events"
COLUMNS = ("batch", "part", "event_id", "key", "n", "since", "now")
OUT_SCHEMA = "batch long, part int, event_id long, key string, n long, since long, now long"

Row = tuple[int, int, int, str, int, int, int]
Stored = dict[str, tuple[int | None, int, Any]]  # key -> (expiry, version, value)


def schedule() -> Callable[[int], tuple[int, str, int]]:
    """Event i -> (event_id, key, event time in ms); nested, so Spark pickles it whole.

    Per batch: keys s* in every batch; g* in batches 0-1 only (they expire and are gone);
    a* every other batch (silent exactly TTL_S: expired when they return, from batch 1 on);
    t* every third batch; p* (never expire) in batches 0, 4 and 6.
    """

    def keys_in(b: int) -> list[str]:
        ks = [f"s{n}" for n in range(4)]
        ks += [f"g{n}" for n in range(6) if b < 2]
        ks += [f"a{n}" for n in range(6) if (b + n) % 2 == 0]
        ks += [f"t{n}" for n in range(4) if (b + n) % 3 == 0]
        ks += ["p0", "p1"] if b in (0, 4, 6) else []
        return sorted(ks)

    def event(i: int) -> tuple[int, str, int]:
        b, j = divmod(i, PER_BATCH)
        keys = keys_in(b)
        return i, keys[j % len(keys)], T0_MS + b * BATCH_MS + (j + 1) * 20

    return event


def now_of(batch: int) -> int:
    """The batch's now: its watermark (the previous batch's largest event time), or T0_MS."""
    if batch == 0:
        return T0_MS
    event = schedule()
    return max(event(i)[2] for i in range((batch - 1) * PER_BATCH, batch * PER_BATCH))


def model(ttl_ms: int | None) -> dict[str, Any]:
    """The job computed without Spark: its rows, the final state, what each claim expired.

    A task (partition) claims in a batch that has a group of it; its claim deletes its keys
    whose expiry is at or before the batch's now; then its groups count, in key order.
    """
    event = schedule()
    state: dict[str, dict[str, Any]] = {}
    expiry: dict[str, int | None] = {}
    rows: list[Row] = []
    expired: dict[tuple[int, int], list[str]] = {}
    restarts: set[tuple[str, int]] = set()
    for b in range(BATCHES):
        now = now_of(b)
        by_key: dict[str, list[int]] = collections.defaultdict(list)
        for i in range(b * PER_BATCH, (b + 1) * PER_BATCH):
            by_key[event(i)[1]].append(i)
        for p in sorted({partition_of(k, PARTS) for k in by_key}):
            due = sorted(
                k for k, e in expiry.items()
                if partition_of(k, PARTS) == p and e is not None and e <= now
            )  # fmt: skip
            for k in due:
                del state[k], expiry[k]
            expired[(b, p)] = due
        for k in sorted(by_key):
            if k not in state and any(r[3] == k for r in rows):
                restarts.add((k, b))  # seen before, expired since
            st = state.setdefault(k, {"n": 0, "since": b})
            for i in by_key[k]:
                st["n"] += 1
                rows.append((b, partition_of(k, PARTS), i, k, st["n"], st["since"], now))
            expiry[k] = None if ttl_ms is None or k.startswith("p") else now + ttl_ms
    final = {k: (expiry[k], 1, v) for k, v in state.items()}
    return {"rows": sorted(rows), "state": final, "expired": expired, "restarts": restarts}


def counting(namespace: str, sidecar: str, fault_dir: str, kill: tuple[int, str] | None) -> Any:
    """The applyInPandasWithState function: one TaskState block per group.

    With `kill` (batch, key): partition 0's Python worker SIGKILLs itself right after that
    group's block committed, once. Each block that opened the task (not one that reused
    its attempt's claim) appends what the Open found to fault_dir/opens.jsonl.
    """

    def per_group(key: tuple[str], frames: Iterator[Any], gs: Any) -> Iterator[Any]:
        import pandas as pd
        from pyspark import TaskContext

        from taskstate.client import TaskState
        from taskstate.demo.faults import once

        ctx = TaskContext.get()
        assert ctx is not None
        batch, part = int(ctx.getLocalProperty("streaming.sql.batchId") or -1), ctx.partitionId()
        (k,) = key
        ids = sorted(int(i) for f in frames for i in f["event_id"])
        # the batch's watermark; 0 until Spark has one (the query's first batch)
        now = max(gs.getCurrentWatermarkMs(), T0_MS)
        rows = []
        with TaskState(ctx, component=COMPONENT, namespace=namespace, sidecar=sidecar,
                       ttl=TTL_S, now=now) as s:  # fmt: skip
            st = s.get(k) or {"n": 0, "since": batch}
            for i in ids:
                st["n"] += 1
                rows.append((batch, part, i, k, st["n"], st["since"], s.info.now_ms))
            if k.startswith("p"):
                s.set(k, st, ttl=None)
            else:
                s[k] = st
            info = s.info
        if not info.reused_claim:
            line = json.dumps({
                "batch": batch, "part": part, "attempt": ctx.attemptNumber(),
                "expired": info.expired, "rolled_back": info.rolled_back,
                "rolled_back_keys": info.rolled_back_keys, "now": info.now_ms,
            })  # fmt: skip
            fd = os.open(Path(fault_dir) / "opens.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            try:
                os.write(fd, (line + "\n").encode())
            finally:
                os.close(fd)
        if kill == (batch, k) and part == 0 and once(fault_dir, "worker-killed"):
            os.kill(os.getpid(), signal.SIGKILL)  # committed; Spark has not got the output
        yield pd.DataFrame(rows, columns=list(COLUMNS))

    return per_group


def run_job(spark: Any, namespace: str, sidecar: str, tmp: Path, kill: Any) -> None:
    """Run the query over every batch (`kill`: the fault, or None), then stop it."""
    from pyspark.sql import functions as F  # noqa: N812
    from pyspark.sql.streaming.state import GroupStateTimeout

    (tmp / "faults").mkdir(parents=True)
    events = (
        spark.readStream.format(SOURCE)
        .option("per_batch", str(PER_BATCH))
        .option("batches", str(BATCHES))
        .load()
        .withColumn("ts", F.timestamp_millis("ms"))
        .withWatermark("ts", "0 seconds")
    )
    q = (
        events.groupBy("key")
        .applyInPandasWithState(
            counting(namespace, sidecar, str(tmp / "faults"), kill),
            OUT_SCHEMA,
            "unused int",
            "append",
            GroupStateTimeout.NoTimeout,
        )
        .writeStream.format("json")
        .option("path", str(tmp / "out"))
        .option("checkpointLocation", str(tmp / "ck"))
        .start()
    )
    done = tmp / "ck" / "commits" / str(BATCHES - 1)
    deadline = time.monotonic() + 300
    try:
        while not done.exists():
            assert q.exception() is None, q.exception()
            assert time.monotonic() < deadline, "the query did not finish"
            time.sleep(0.2)
    finally:
        q.stop()


def stored(redis: RedisServer, namespace: str) -> Stored:
    """Every partition's committed state: key -> (expiry, version, value), from Redis."""
    c = redis.client()
    out: Stored = {}
    for p in range(PARTS):
        for k, v in c.hgetall(data_key(namespace, COMPONENT, p)).items():
            expires, version, body = envelope.parse(v)
            out[k.decode()] = (expires, version, json.loads(body))
    return out


def expiry_index(redis: RedisServer, namespace: str) -> dict[str, int]:
    c = redis.client()
    out = {}
    for p in range(PARTS):
        zset = c.zrange(task_key(namespace, COMPONENT, p, "ttl"), 0, -1, withscores=True)
        out.update({k.decode(): int(score) for k, score in zset})
    return out


def index_is_a_bound(index: dict[str, int], state: Stored) -> bool:
    """The expiry index after the last batch: every key with an expiry and no other, each
    entry at or before its value's expiry (a rewrite keeps an earlier entry, prelude.lua
    ttl_sync) and after the last batch's now (its first claim moved every entry due by
    then to its value's expiry, or expired the key)."""
    want = {k: e for k, (e, _, _) in state.items() if e is not None}
    last = now_of(BATCHES - 1)
    return index.keys() == want.keys() and all(last < index[k] <= e for k, e in want.items())


def opens(tmp: Path) -> list[dict[str, Any]]:
    lines = (tmp / "faults" / "opens.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


@pytest.fixture(scope="module")
def runs(
    spark: Any, redis_server: RedisServer, sidecar: SidecarProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:  # fmt: skip
    """The golden run and the run whose worker is killed: rows, state, Opens, rollbacks."""
    event = schedule()

    def make_row(options: Any) -> Callable[[int], tuple[Any, ...]]:
        return event

    register_range_source(spark, SOURCE, "event_id long, key string, ms long", make_row)
    want = model(round(TTL_S * 1000))
    last = max(k for b, p, _, k, *_ in want["rows"] if (b, p) == (KILL_BATCH, 0))
    prefix = f"ttl-{uuid.uuid4().hex[:6]}"
    out: dict[str, Any] = {"want": want, "last": last}
    for name, kill in (("golden", None), ("worker", (KILL_BATCH, last))):
        tmp = tmp_path_factory.mktemp(name)
        ns = f"{prefix}-{name}"
        run_job(spark, ns, sidecar.target, tmp, kill)
        c = redis_server.client()
        rollbacks = sum(int(c.hget(meta_key(ns, COMPONENT, p), "rollbacks") or 0)
                        for p in range(PARTS))  # fmt: skip
        out[name] = {
            "rows": sorted(
                tuple(r[col] for col in COLUMNS) for r in read_output_files(tmp / "out")
            ),
            "state": stored(redis_server, ns),
            "index": expiry_index(redis_server, ns),
            "opens": opens(tmp),
            "killed": (tmp / "faults" / "worker-killed").exists(),
            "rollbacks": rollbacks,
        }
    return out


def test_the_model_expires_keys_in_the_killed_task(runs: dict[str, Any]) -> None:
    """The fault strikes where expiry matters: the claim of partition 0 in KILL_BATCH
    expires keys, some of which its groups then write again from zero."""
    want = runs["want"]
    gone = want["expired"][(KILL_BATCH, 0)]
    again = {k for k, b in want["restarts"] if b == KILL_BATCH and partition_of(k, PARTS) == 0}
    assert again and set(gone) - again, (gone, again)
    assert runs["last"] in again  # the last group's key: the kill follows its restart's commit


def test_golden_equals_the_job_computed_without_spark(runs: dict[str, Any]) -> None:
    golden, want = runs["golden"], runs["want"]
    assert len(golden["rows"]) == BATCHES * PER_BATCH
    assert golden["rows"] == want["rows"]
    assert golden["state"] == want["state"]
    assert index_is_a_bound(golden["index"], want["state"]), golden["index"]
    assert not golden["killed"] and golden["rollbacks"] == 0
    # one Open per task and batch, at the batch's watermark, expiring what the model does
    seen = {(o["batch"], o["part"]): (o["now"], o["expired"]) for o in golden["opens"]}
    assert len(seen) == len(golden["opens"])
    assert seen == {bp: (now_of(bp[0]), len(ks)) for bp, ks in want["expired"].items()}


def test_worker_killed_after_a_commit_equals_golden(runs: dict[str, Any]) -> None:
    golden, worker = runs["golden"], runs["worker"]
    assert worker["killed"], "the fault did not strike"
    assert worker["rollbacks"] >= 1  # the retry rolled the committed batch back first
    assert worker["rows"] == golden["rows"]
    assert worker["state"] == golden["state"]
    assert index_is_a_bound(worker["index"], golden["state"]), worker["index"]
    # the killed task's batch: its first attempt expired keys, committed its groups and
    # died; the retry rolled all of it back (the expired keys too), expired the same keys
    # again at the same now and counted the batch once
    n = len(runs["want"]["expired"][(KILL_BATCH, 0)])
    killed = [o for o in worker["opens"] if (o["batch"], o["part"]) == (KILL_BATCH, 0)]
    tries = sorted((o["attempt"], o["rolled_back"], o["expired"], o["now"]) for o in killed)
    assert tries == [(0, False, n, now_of(KILL_BATCH)), (1, True, n, now_of(KILL_BATCH))]
    assert max(o["rolled_back_keys"] for o in killed) > n  # and the groups' writes
    # every other task opened once, as in the golden run
    others = sorted(
        (o["batch"], o["part"], o["now"], o["expired"])
        for o in worker["opens"] if o not in killed
    )  # fmt: skip
    assert others == sorted(
        (o["batch"], o["part"], o["now"], o["expired"])
        for o in golden["opens"] if (o["batch"], o["part"]) != (KILL_BATCH, 0)
    )  # fmt: skip


def test_keys_expired_the_state_is_bounded_and_they_counted_from_zero(
    runs: dict[str, Any],
) -> None:
    golden, want = runs["golden"], runs["want"]
    forever = model(None)  # the same job without a time to live
    assert set(golden["state"]) < set(forever["state"])
    assert not any(k.startswith("g") for k in golden["state"])  # gone for good
    assert sum(o["expired"] for o in golden["opens"]) >= len(forever["state"]) - len(
        golden["state"]
    )
    # the pinned keys (ttl=None) were silent longer than TTL_S and kept counting
    for k in ("p0", "p1"):
        assert golden["state"][k] == forever["state"][k]
        assert golden["state"][k][2]["since"] == 0
    # a key that returned after TTL_S of silence counts from zero again, from its batch
    restarted = set()
    previous: dict[str, tuple[int, int]] = {}
    for b, _, _, k, n, since, _ in golden["rows"]:
        if k in previous and since == b and n == 1 and previous[k][0] < b:
            restarted.add((k, b))
        previous[k] = (b, n)
    assert restarted == want["restarts"] and restarted
    assert golden["rows"] != forever["rows"]
