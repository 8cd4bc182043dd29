"""`taskstate demo`: trending hashtags that survive failures.

A deterministic, replayable stream of synthetic tweets (Zipf-distributed hashtags plus
scripted bursts, so trends rise and fall) goes through a Spark streaming query: hashtags
are extracted, the stream is hash-partitioned by hashtag, and per hashtag the task keeps
an exponentially weighted moving average of its rate (tweets/s) per 5-second bucket,
Linux load-average style: buckets in which a tag is absent still decay it. Every batch
emits each tag's EWMA; the top 10 per batch follow from that.

The same stream runs three ways: golden (no faults), with faults using taskstate, and
with the same faults keeping the state in a plain dict. Faults: the Python worker is
SIGKILLed right after its commit, the sidecar is SIGKILLed (and restarted a second later,
as the executor plugin would), and the whole query is SIGKILLed and restarted from its
checkpoint.

With `--expire-after N`, a hashtag not seen for N buckets expires: TaskState(ttl) in event
time (each batch's now is the start of its first bucket, the same in a replay), so its
state is deleted, and it starts afresh if seen again; the plain dict mirrors the rule.
The state then holds at most the hashtags seen in the batch and the N buckets before it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taskstate.sidecar.storage.redis.connect import redact

from .faults import maybe_fault
from .jobs import (
    ROCKSDB,
    JobOptions,
    kill_process_groups,
    range_stream,
    read_output_files,
    run_until_committed,
)

COMPONENT = "hashtag-ewma"
SOURCE_NAME = "taskstate_demo_tweets"
TWEET_SCHEMA = "tweet_id long, ts double, text string"
BUCKET_S = 5
ALPHA = 1 - math.exp(-BUCKET_S / 60)  # a one-minute average, like the 1-min load average
N_TAGS = 120
_WEIGHTS = [1 / (i + 1) ** 1.1 for i in range(N_TAGS)]
_CUM = [sum(_WEIGHTS[: i + 1]) for i in range(N_TAGS)]
TAGS = [f"#topic{i:03d}" for i in range(N_TAGS)]
# (tag, first bucket, last bucket, peak probability): trends that rise and fall
BURSTS = (("#spark", 6, 30, 0.9), ("#redis", 24, 54, 0.8), ("#exactlyonce", 44, 70, 1.0))
OUT_COLUMNS = ["batch", "part", "tag", "ewma", "bucket"]
OUT_SCHEMA = "batch long, part int, tag string, ewma double, bucket long"
FAULTS = ("none", "worker", "sidecar", "restart", "all")
HASHTAG = r"#\w+"  # what the query extracts from a tweet's text


# -- the stream ----------------------------------------------------------------------------


def tweet(i: int, per_batch: int, buckets_per_batch: int) -> tuple[int, float, str]:
    """Tweet i: (id, event time in seconds, text). Deterministic."""
    rng = random.Random(i * 1_000_003 + 17)  # noqa: S311 - synthetic data, not security
    ts = i * buckets_per_batch * BUCKET_S / per_batch
    bucket = int(ts // BUCKET_S)
    tags = rng.choices(TAGS, cum_weights=_CUM, k=rng.randint(1, 2))
    for tag, first, last, peak in BURSTS:
        if first <= bucket <= last:
            middle = (first + last) / 2
            shape = 1 - abs(bucket - middle) / (middle - first + 1)  # rise, then fall
            if rng.random() < peak * shape:
                tags.append(tag)
    return i, ts, f"tweet {i}: " + " ".join(dict.fromkeys(tags))


def tweet_stream(spark: Any, per_batch: int, buckets: int, batches: int, files: Path) -> Any:
    """The replayable tweets (tweet_id, ts, text): `batches` batches of `per_batch`."""

    def make_row(options: Any) -> Any:
        per_batch, buckets = int(options["per_batch"]), int(options["buckets_per_batch"])
        return lambda i: tweet(i, per_batch, buckets)

    options = {"per_batch": per_batch, "buckets_per_batch": buckets, "batches": batches}
    return range_stream(spark, SOURCE_NAME, TWEET_SCHEMA, make_row, options, files)


# -- the EWMA (pure functions: the same in every run) ------------------------------------------


def close_until(st: dict[str, Any], bucket: int) -> None:
    """Close the open bucket, decay through the buckets without this tag, open `bucket`."""
    if bucket <= st["b"]:
        return
    rate = st["n"] / BUCKET_S
    ewma = st["ewma"] + ALPHA * (rate - st["ewma"])
    skipped = bucket - st["b"] - 1
    st["ewma"] = ewma * (1 - ALPHA) ** skipped
    st["b"], st["n"] = bucket, 0


def update_tags(
    s: Any,
    events: list[tuple[float, int, str]],
    end_bucket: int,
    store: Callable[[str, dict[str, Any]], None] | None = None,
) -> None:
    """Apply one batch of (ts, tweet id, tag) events to `s`.

    Then every tag is caught up to the end of the batch, so that absent tags decay too.
    A tag's state: its open bucket `b` with `n` tweets so far, its `ewma`, and the last
    bucket it was `seen` in. `store(tag, st)` writes it (default: `s[tag] = st`).
    """
    write = s.__setitem__ if store is None else store
    for ts, _, tag in sorted(events):
        bucket = int(ts // BUCKET_S)
        st = s.get(tag) or {"b": bucket, "n": 0, "ewma": 0.0}
        close_until(st, bucket)
        st["n"] += 1
        st["seen"] = bucket
        write(tag, st)
    for tag in list(s.keys()):
        st = s[tag]
        if st["b"] <= end_bucket:
            close_until(st, end_bucket + 1)
            write(tag, st)


# -- expiry in event time (--expire-after) -------------------------------------------------


def bucket_ms(bucket: int) -> int:
    """The event time at which `bucket` starts, in epoch ms (the stream starts at 0)."""
    return bucket * BUCKET_S * 1000


def batch_now_ms(batch: int, buckets_per_batch: int) -> int:
    """A batch's now for expiry: the start of its first bucket.

    The event time up to which every earlier tweet has been processed (the watermark):
    the same in a replay.
    """
    return bucket_ms(batch * buckets_per_batch)


def expires_at_ms(st: dict[str, Any], expire_after: int) -> int:
    """When a tag last seen in bucket `st["seen"]` expires: `expire_after` buckets later."""
    return bucket_ms(int(st["seen"]) + 1 + expire_after)


def expire_plain(plain: dict[str, Any], now_ms: int, expire_after: int) -> int:
    """The plain dict's copy of TaskState's rule: delete the tags expired by the batch's now.

    Those whose expiry is at or before it, as TaskState's first claim of a batch does in
    the sidecar. Returns how many went.
    """
    gone = [tag for tag, st in plain.items() if expires_at_ms(st, expire_after) <= now_ms]
    for tag in gone:
        del plain[tag]
    return len(gone)


def ttl_store(s: Any, expire_after: int) -> Callable[[str, dict[str, Any]], None]:
    """How `update_tags` writes a tag to TaskState with --expire-after.

    A write restarts a key's clock, and every batch writes every tag (to decay it), so
    each write gives the key the time it has left: from the batch's now (`s.info.now_ms`,
    fixed by the batch's first claim) to `expire_after` buckets after it was last seen.
    """
    now = s.info.now_ms

    def store(tag: str, st: dict[str, Any]) -> None:
        s.set(tag, st, ttl=(expires_at_ms(st, expire_after) - now) / 1000)

    return store


# -- the query (a child process) ---------------------------------------------------------------


@dataclass(frozen=True)
class DemoOptions:
    """What one run does (pickled to the Python workers)."""

    namespace: str
    sidecar: str
    state: str
    buckets_per_batch: int
    kill_worker_at: int = -1
    pause_at: int = -1
    fault_dir: str = ""
    expire_after: int | None = None  # buckets without a hashtag before it expires
    partitions: int | None = None  # the stateful tasks' count, declared to taskstate


_PLAIN: dict[tuple[str, int], dict[str, Any]] = {}


def make_update(opts: DemoOptions) -> Any:
    """The mapInPandas function: EWMA per hashtag in TaskState (or a plain dict)."""
    faults = JobOptions(
        namespace=opts.namespace,
        sidecar=opts.sidecar,
        state=opts.state,
        kill_worker_at=opts.kill_worker_at,
        pause_at=opts.pause_at,
        fault_dir=opts.fault_dir,
    )

    def update(frames: Iterator[Any]) -> Iterator[Any]:
        import pandas as pd
        from pyspark import TaskContext

        from taskstate.client import TaskState

        ctx = TaskContext.get()
        assert ctx is not None  # noqa: S101 - runs in a task
        batch = int(ctx.getLocalProperty("streaming.sql.batchId") or 0)
        part = ctx.partitionId()
        events = [
            e
            for f in frames
            for e in f[["ts", "tweet_id", "tag"]].itertuples(index=False, name=None)
        ]
        end_bucket = (batch + 1) * opts.buckets_per_batch - 1
        expire_after = opts.expire_after
        now_ms = batch_now_ms(batch, opts.buckets_per_batch)
        if opts.state == "taskstate":
            with TaskState(
                ctx,
                component=COMPONENT,
                namespace=opts.namespace,
                sidecar=opts.sidecar,
                # a run on another count of partitions is refused, not silently wrong
                partitions=opts.partitions,
                # event time: the batch's first claim deletes the tags expired by now_ms
                now=None if expire_after is None else now_ms,
            ) as s:
                store = None
                if expire_after is not None:
                    store = ttl_store(s, expire_after)
                update_tags(s, events, end_bucket, store)
                rows = [(batch, part, tag, st["ewma"], st["b"]) for tag, st in s.items()]
        else:
            plain = _PLAIN.setdefault((opts.namespace, part), {})
            if expire_after is not None:
                expire_plain(plain, now_ms, expire_after)
            update_tags(plain, events, end_bucket)
            rows = [(batch, part, tag, st["ewma"], st["b"]) for tag, st in plain.items()]
        maybe_fault(faults, batch, part)
        yield pd.DataFrame(rows, columns=OUT_COLUMNS)

    return update


def spark_state_update(buckets_per_batch: int) -> Any:
    """The same EWMA in Spark's own state (applyInPandasWithState, one call per tag).

    For the benchmark against Spark's state store. Unlike the taskstate job it emits only
    the tags seen in the batch (absent tags would need timeouts to decay).
    """

    def per_tag(key: tuple[Any, ...], frames: Iterator[Any], state: Any) -> Iterator[Any]:
        import pandas as pd
        from pyspark import TaskContext

        ctx = TaskContext.get()
        assert ctx is not None  # noqa: S101 - runs in a task
        batch = int(ctx.getLocalProperty("streaming.sql.batchId") or 0)
        events = sorted(
            e for f in frames for e in f[["ts", "tweet_id"]].itertuples(index=False, name=None)
        )
        st: dict[str, Any] | None = None
        if state.exists:
            b, n, ewma = state.get
            st = {"b": int(b), "n": int(n), "ewma": float(ewma)}
        for ts, _ in events:
            bucket = int(ts // BUCKET_S)
            if st is None:
                st = {"b": bucket, "n": 0, "ewma": 0.0}
            close_until(st, bucket)
            st["n"] += 1
        assert st is not None  # noqa: S101 - a group has at least one row
        end_bucket = (batch + 1) * buckets_per_batch - 1
        if st["b"] <= end_bucket:
            close_until(st, end_bucket + 1)
        state.update((st["b"], st["n"], st["ewma"]))
        row = (batch, ctx.partitionId(), key[0], st["ewma"], st["b"])
        yield pd.DataFrame([row], columns=OUT_COLUMNS)

    return per_tag


def run_query(a: argparse.Namespace) -> int:
    """Run the query until `batches` micro-batches are committed in its checkpoint."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F  # noqa: N812

    if a.state == "spark" and a.expire_after is not None:
        raise SystemExit("--expire-after: not with --state spark (the benchmark's job)")
    spark = (
        SparkSession.builder.master(a.master)
        .appName("taskstate-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(a.partitions))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    opts = DemoOptions(
        a.namespace,
        a.sidecar,
        a.state,
        a.buckets_per_batch,
        a.kill_worker_at,
        a.pause_at,
        a.fault_dir,
        a.expire_after,
        a.partitions,
    )
    tweets = tweet_stream(
        spark, a.tweets_per_batch, a.buckets_per_batch, a.batches, Path(f"{a.checkpoint}.events")
    )
    tags = tweets.select(
        "tweet_id", "ts", F.explode(F.regexp_extract_all("text", F.lit(r"(#\w+)"), 1)).alias("tag")
    )
    if a.state == "spark":
        from pyspark.sql.streaming.state import GroupStateTimeout

        out = tags.groupBy("tag").applyInPandasWithState(
            spark_state_update(a.buckets_per_batch),
            OUT_SCHEMA,
            "b long, n long, ewma double",
            "append",
            GroupStateTimeout.NoTimeout,
        )
    else:
        out = tags.repartition(a.partitions, "tag").mapInPandas(make_update(opts), OUT_SCHEMA)
    query = (
        out.writeStream.format("json")
        .option("path", a.out_dir)
        .option("checkpointLocation", a.checkpoint)
        .outputMode("append")
        .start()
    )
    return run_until_committed(spark, query, a.checkpoint, a.batches, a.progress_file)


# -- results -----------------------------------------------------------------------------------


def read_ewma(out_dir: Path) -> dict[tuple[int, str], float]:
    """(batch, tag) -> EWMA from the rows the file sink committed."""
    out: dict[tuple[int, str], float] = {}
    for r in read_output_files(out_dir):
        out[(int(r["batch"]), str(r["tag"]))] = float(r["ewma"])
    return out


def top10(ewma: dict[tuple[int, str], float], batch: int) -> list[tuple[str, float]]:
    """The ten hottest tags after `batch`."""
    rows = [(tag, v) for (b, tag), v in ewma.items() if b == batch]
    return sorted(rows, key=lambda r: (-r[1], r[0]))[:10]


def compare(
    golden: dict[tuple[int, str], float], run: dict[tuple[int, str], float]
) -> tuple[bool, float]:
    """(identical, largest absolute EWMA error) of a run against golden."""
    keys = golden.keys() | run.keys()
    err = max((abs(golden.get(k, 0.0) - run.get(k, 0.0)) for k in keys), default=0.0)
    return golden == run, err


def first_difference(
    golden: dict[tuple[int, str], float], run: dict[tuple[int, str], float]
) -> int | None:
    """The first batch in which a run differs from golden, or None."""
    for b in sorted({b for b, _ in golden.keys() | run.keys()}):
        g = {t: v for (bb, t), v in golden.items() if bb == b}
        r = {t: v for (bb, t), v in run.items() if bb == b}
        if g != r:
            return b
    return None


def keys_per_batch(ewma: dict[tuple[int, str], float], batches: int) -> list[int]:
    """How many hashtags a run's state held after each batch (a batch emits all of them)."""
    counts = [0] * batches
    for b, _ in ewma:
        if 0 <= b < batches:
            counts[b] += 1
    return counts


def gone_by_the_end(ewma: dict[tuple[int, str], float], batches: int) -> list[tuple[str, int]]:
    """The hashtags a run no longer held after its last batch, the hottest first.

    Each with the last batch that held it.
    """
    last: dict[str, int] = {}
    peak: dict[str, float] = {}
    for (b, tag), v in ewma.items():
        last[tag] = max(last.get(tag, b), b)
        peak[tag] = max(peak.get(tag, v), v)
    gone = sorted((t for t, b in last.items() if b < batches - 1), key=lambda t: (-peak[t], t))
    return [(t, last[t]) for t in gone]


def tags_by_bucket(batches: int, per_batch: int, buckets_per_batch: int) -> dict[int, set[str]]:
    """The hashtags of each 5-second bucket, from the stream itself (not from a run)."""
    out: dict[int, set[str]] = {}
    for i in range(batches * per_batch):
        _, ts, text = tweet(i, per_batch, buckets_per_batch)
        out.setdefault(int(ts // BUCKET_S), set()).update(re.findall(HASHTAG, text))
    return out


def live_tags(
    by_bucket: dict[int, set[str]], batches: int, buckets_per_batch: int, expire_after: int | None
) -> list[int]:
    """Per batch, how many hashtags the state may hold after it.

    Those seen in the batch or in the `expire_after` buckets before it (without expiry:
    every one seen so far).
    """
    out = []
    for b in range(batches):
        end = (b + 1) * buckets_per_batch
        first = 0 if expire_after is None else max(0, b * buckets_per_batch - expire_after)
        out.append(len(set().union(*(by_bucket.get(k, set()) for k in range(first, end)))))
    return out


def state_lines(
    labels: dict[str, str],
    held: dict[str, list[int]],
    live: list[int],
    stored: dict[str, int],
    expire_after: int | None,
    gone: Sequence[tuple[str, int]] = (),
) -> list[str]:
    """The state section of the demo's output: hashtags held after each batch, per run.

    `gone`: the hashtags golden no longer held at the end (`gone_by_the_end`).
    """
    batches = len(live)
    step = -(-batches // 16)  # at most 17 columns
    shown = sorted(set(range(0, batches, step)) | {batches - 1})
    if expire_after is None:
        rule = "no --expire-after: every hashtag seen stays"
        bound = "seen so far"
    else:
        rule = f"--expire-after {expire_after}: expires when not seen for {expire_after} buckets"
        bound = f"seen in it or {expire_after} buckets before"
    lines = [f"hashtags held in the state after each batch ({rule}):"]
    lines.append(f"{'batch':<32}" + "".join(f"{b:>5}" for b in shown))
    for name, counts in held.items():
        lines.append(f"{labels[name]:<32}" + "".join(f"{counts[b]:>5}" for b in shown))
    lines.append(f"{bound:<32}" + "".join(f"{live[b]:>5}" for b in shown))
    if stored:
        held_there = ", ".join(f"{name} {n}" for name, n in stored.items())
        lines.append(f"keys in Redis after the last batch: {held_there}")
    if gone:
        named = ", ".join(f"{tag} (held through batch {b})" for tag, b in gone[:4])
        more = f" and {len(gone) - 4} more" if len(gone) > 4 else ""
        lines.append(f"expired and not seen again (golden): {named}{more}")
    return lines


def is_bounded(held: dict[str, list[int]], live: list[int], stored: dict[str, int]) -> bool:
    """Whether no run held more hashtags after a batch than were seen in its window.

    Nor Redis after the last batch (`stored`: the keys there per taskstate run).
    """
    per_batch = all(h <= n for counts in held.values() for h, n in zip(counts, live, strict=True))
    return per_batch and all(n <= live[-1] for n in stored.values())


# -- the orchestrator ----------------------------------------------------------------------


class Demo:
    """Runs the three scenarios against a private (or given) Redis and a private sidecar."""

    def __init__(self, a: argparse.Namespace, workdir: Path) -> None:
        self.a = a
        self.workdir = workdir
        self.children: list[subprocess.Popen[bytes]] = []
        self.redis: Any = None
        self.sidecar: Any = None
        self.prefix = f"demo-{uuid.uuid4().hex[:8]}"
        self._last: tuple[str, int] | None = None
        self._announced: set[tuple[str, str]] = set()
        self._without_sidecar: set[str] = set()  # runs whose state is not in taskstate

    def say(self, text: str) -> None:
        """Print one progress line."""
        print(text, flush=True)

    def start_services(self) -> None:
        """Start the private redis-server (unless --redis-url) and the sidecar."""
        from taskstate.testing import RedisServer, SidecarProcess

        if self.a.redis_url:
            url = self.a.redis_url
        else:
            self.say("starting a private redis-server ...")
            self.redis = RedisServer(self.workdir / "redis").start()
            url = self.redis.url
        self.redis_url = url
        (self.workdir / "sidecar").mkdir(parents=True, exist_ok=True)
        # a private Redis is throwaway: no warning that it keeps nothing on disk
        extra = [] if self.a.redis_url else ["--allow-volatile-redis"]
        self.sidecar = SidecarProcess(url, self.workdir / "sidecar" / "sidecar.sock", extra=extra)
        self.sidecar.start()
        self.say(f"sidecar ready on {self.sidecar.target}")

    def stored_keys(self, name: str) -> int:
        """How many keys a taskstate run's state holds in Redis (the sidecar's List)."""
        from taskstate.client.admin import AdminClient

        with AdminClient(self.sidecar.target) as admin:
            return sum(t.size for t in admin.tasks(f"{self.prefix}-{name}", COMPONENT))

    def stop_all(self) -> None:
        """Kill every query process group, the sidecar and the private Redis."""
        kill_process_groups(self.children)
        if self.sidecar is not None:
            self.sidecar.kill()
        if self.redis is not None:
            self.redis.stop()

    def _query(self, name: str, state: str, extra: Sequence[str]) -> subprocess.Popen[bytes]:
        run = self.workdir / name
        (run / "faults").mkdir(parents=True, exist_ok=True)
        a = self.a
        cmd = [
            sys.executable,
            "-m",
            "taskstate.demo.trending",
            "--query",
            "--namespace",
            f"{self.prefix}-{name}",
            "--sidecar",
            self.sidecar.target,
            "--state",
            state,
            "--batches",
            str(a.batches),
            "--tweets-per-batch",
            str(a.tweets_per_batch),
            "--buckets-per-batch",
            str(a.buckets_per_batch),
            "--partitions",
            str(a.partitions),
            "--master",
            a.master,
            "--out-dir",
            str(run / "out"),
            "--checkpoint",
            str(run / "checkpoint"),
            "--fault-dir",
            str(run / "faults"),
            *([] if a.expire_after is None else ["--expire-after", str(a.expire_after)]),
            *extra,
        ]
        env = dict(os.environ)
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        with open(run / "query.log", "ab") as log:
            p = subprocess.Popen(  # noqa: S603 - our own module
                cmd,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.children.append(p)
        return p

    def _wait_ok(self, name: str, proc: subprocess.Popen[bytes], phase: str) -> None:
        """Wait for a query process, printing batches done; fail with its log."""
        while proc.poll() is None:
            self._progress_line(name, phase)
            time.sleep(0.5)
        self._progress_line(name, phase)
        if proc.returncode != 0:
            log = (self.workdir / name / "query.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"run {name!r} failed with exit code {proc.returncode}:\n{log}")

    def _sidecar_killer(self, name: str, at_batch: int) -> threading.Thread:
        """SIGKILL the sidecar once batch `at_batch` is planned; restart it a second later."""
        offsets = self.workdir / name / "checkpoint" / "offsets" / str(at_batch)
        done = threading.Event()

        def watch() -> None:
            while not offsets.exists():
                if done.wait(0.1):
                    return
            self.sidecar.kill(signal.SIGKILL)
            (self.workdir / name / "faults" / "sidecar-killed").write_text("")
            time.sleep(1.0)
            self.sidecar.start()

        t = threading.Thread(target=watch, daemon=True)
        t.done = done  # type: ignore[attr-defined]
        t.start()
        return t

    def run(self, name: str, state: str, faults: str) -> float:
        """One scenario from start to end (with its faults); returns seconds."""
        t0 = time.monotonic()
        if state != "taskstate":
            self._without_sidecar.add(name)
        at = fault_batches(self.a.batches, faults)
        use = {kind: kind in at for kind in ("worker", "sidecar", "restart")}
        sidecar_at, restart_at = at.get("sidecar", -1), at.get("restart", -1)
        extra: list[str] = []
        if use["worker"]:
            extra += ["--kill-worker-at", str(at["worker"])]
        if use["restart"]:
            extra += ["--pause-at", str(at["restart"])]
        killer = self._sidecar_killer(name, sidecar_at) if use["sidecar"] else None
        proc = self._query(name, state, extra)
        if use["restart"]:
            paused = self.workdir / name / "faults" / "paused"
            while not paused.exists():
                if proc.poll() is not None:
                    self._wait_ok(name, proc, "ended before the restart fault")
                    raise RuntimeError(f"run {name!r} ended before batch {restart_at}")
                self._progress_line(name, "running")
                time.sleep(0.5)
            self.say(f"      {name}: stopping the query hard (SIGKILL) in batch {restart_at}")
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            proc = self._query(name, state, [])
            self._wait_ok(name, proc, "restarted from its checkpoint")
        else:
            self._wait_ok(name, proc, "running")
        if killer is not None:
            killer.done.set()  # type: ignore[attr-defined]
        return time.monotonic() - t0

    def _progress_line(self, name: str, phase: str) -> None:
        commits = self.workdir / name / "checkpoint" / "commits"
        done = len(list(commits.glob("[0-9]*"))) if commits.exists() else 0
        if self._last != (name, done):
            self._last = (name, done)
            self.say(f"      {name}: {done}/{self.a.batches} batches  ({phase})")
        faults = self.workdir / name / "faults"
        for marker, text in (
            ("worker-killed", "the Python worker was SIGKILLed after its commit"),
            ("sidecar-killed", "the sidecar was SIGKILLed (restarting it)"),
        ):
            if (name, marker) not in self._announced and (faults / marker).exists():
                self._announced.add((name, marker))
                if marker == "sidecar-killed" and name in self._without_sidecar:
                    text += "; this run's state is a dict, so it meets no sidecar"
                self.say(f"      {name}: fault: {text}")


_FAULT_MARKS = {
    "worker": "worker killed",
    "sidecar": "sidecar killed",
    "restart": "query killed, restarted",
}


def fault_batches(batches: int, faults: str) -> dict[str, int]:
    """Where each fault of `--faults` strikes: at 1/4, 1/2 and 3/4 of the run."""
    at = {"worker": max(1, batches // 4), "sidecar": max(1, batches // 2)}
    at["restart"] = max(1, 3 * batches // 4)
    return {kind: b for kind, b in at.items() if faults in (kind, "all")}


def chart(
    path: Path,
    runs: dict[str, dict[tuple[int, str], float]],
    labels: dict[str, str],
    tags: list[str],
    batches: int,
    marks: dict[str, dict[str, int]],
) -> None:
    """A PNG: one panel per run, the EWMA of the top tags over the batches.

    `marks[run]` maps a fault to the batch it struck in that run: a dashed line there.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(runs), 1, figsize=(9, 3 * len(runs)), sharex=True, sharey=True)
    for ax, (name, ewma) in zip(axes, runs.items(), strict=True):
        for tag in tags:
            ax.plot(
                range(batches),
                [ewma.get((b, tag), float("nan")) for b in range(batches)],
                label=tag,
                marker=".",
            )
        for kind, b in marks.get(name, {}).items():
            ax.axvline(b, color="grey", linestyle="--", linewidth=1)
            ax.annotate(
                _FAULT_MARKS[kind], (b, 1), xycoords=("data", "axes fraction"), rotation=90,
                fontsize=7, va="top", ha="right", color="grey",
            )  # fmt: skip
        ax.set_title(labels[name])
        ax.set_ylabel("EWMA (tweets/s)")
        ax.grid(alpha=0.3)
    axes[0].legend(loc="upper left", fontsize=8, ncol=3)
    axes[-1].set_xlabel("batch (30 s of tweets each)")
    fig.tight_layout()
    fig.savefig(
        path,
        format="png",
        dpi=80,
        metadata={
            "Title": "taskstate demo: trending hashtags",
            "Description": json.dumps({"runs": list(runs), "faults": marks}),
        },
    )
    plt.close(fig)


def orchestrate(a: argparse.Namespace) -> int:
    """Run golden, taskstate with faults and plain dict with faults; print and save."""
    workdir = Path(a.out or tempfile.mkdtemp(prefix="taskstate-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    demo = Demo(a, workdir)

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    scenarios = [
        ("golden", "taskstate", "none"),
        ("taskstate", "taskstate", a.faults),
        ("plain-dict", "dict", a.faults),
    ]
    labels = {
        "golden": "golden (no faults)",
        "taskstate": f"taskstate, faults: {a.faults}",
        "plain-dict": f"plain dict, faults: {a.faults}",
    }
    try:
        demo.start_services()
        results: dict[str, dict[tuple[int, str], float]] = {}
        seconds: dict[str, float] = {}
        for i, (name, state, faults) in enumerate(scenarios, 1):
            demo.say(f"[{i}/{len(scenarios)}] {labels[name]}")
            seconds[name] = demo.run(name, state, faults)
            results[name] = read_ewma(workdir / name / "out")
        golden = results["golden"]
        last = a.batches - 1
        # the state each run held: hashtags per batch, keys left in Redis
        by_bucket = tags_by_bucket(a.batches, a.tweets_per_batch, a.buckets_per_batch)
        live = live_tags(by_bucket, a.batches, a.buckets_per_batch, a.expire_after)
        held = {name: keys_per_batch(results[name], a.batches) for name in results}
        stored = {name: demo.stored_keys(name) for name, st, _ in scenarios if st == "taskstate"}
        bounded = None if a.expire_after is None else is_bounded(held, live, stored)
        gone = gone_by_the_end(golden, a.batches)
        table = top10(golden, last)
        demo.say(f"\ntop 10 hashtags after batch {last}, the last of {a.batches} (golden):")
        demo.say(f"  {'#':>2}  {'hashtag':<16}{'EWMA tweets/s':>14}")
        for rank, (tag, v) in enumerate(table, 1):
            demo.say(f"  {rank:>2}  {tag:<16}{v:>14.4f}")
        demo.say(
            f"\n{'run':<32}{'identical to golden':>20}{'largest EWMA error':>20}"
            f"{'first differing batch':>23}"
        )
        summary_runs = []
        for name in results:
            same, err = compare(golden, results[name])
            first = first_difference(golden, results[name])
            demo.say(
                f"{labels[name]:<32}{'yes' if same else 'NO':>20}{err:>20.6f}"
                f"{'-' if first is None else str(first):>23}"
            )
            summary_runs.append(
                {
                    "name": name,
                    "label": labels[name],
                    "identical": same,
                    "largest_ewma_error": err,
                    "first_differing_batch": first,
                    "seconds": round(seconds[name], 1),
                    "rows": len(results[name]),
                    "top10_last_batch": top10(results[name], last),
                    "keys_per_batch": held[name],
                    "keys_in_redis": stored.get(name),  # after the last batch (None: a dict)
                }
            )
        demo.say(
            "\nA plain dict in the Python worker loses the state at every fault, and drifts\n"
            "even before the first one: Spark does not pin a partition to one Python worker."
        )
        demo.say("")
        for line in state_lines(labels, held, live, stored, a.expire_after, gone):
            demo.say(line)
        if bounded is not None:
            demo.say(
                f"state bounded: {'yes' if bounded else 'NO'} (every run held at most the "
                f"hashtags seen in the batch or the {a.expire_after} buckets before it)"
            )
        peak = sorted(
            {t for (_, t) in golden},
            key=lambda t: -max(v for (b, tt), v in golden.items() if tt == t),
        )[:6]
        png = workdir / "trending.png"
        summary = {
            "batches": a.batches,
            "faults": a.faults,
            "fault_batches": fault_batches(a.batches, a.faults),
            "buckets_per_batch": a.buckets_per_batch,
            "expire_after": a.expire_after,
            "runs": summary_runs,
            "state": {
                "live_tags_per_batch": live,  # the most each run may hold after each batch
                "tags_seen": len(set().union(*by_bucket.values())),
                "bounded": bounded,  # None without --expire-after
                "gone_by_the_end": gone,  # golden's [tag, the last batch that held it]
            },
            "top10_golden": table,
            "chart": str(png),
            "workdir": str(workdir),
        }
        (workdir / "summary.json").write_text(json.dumps(summary, indent=2))
        demo.say(f"\nsummary: {workdir / 'summary.json'}")
        marks = {name: fault_batches(a.batches, f) for name, _, f in scenarios}
        chart(png, results, labels, peak, a.batches, marks)  # after the summary
        demo.say(f"chart: {png}")
        if a.redis_url:  # the user's Redis: say what stays there, and how to remove it
            kept = [f"{demo.prefix}-{n}" for n, state, _ in scenarios if state == "taskstate"]
            demo.say(
                f"\nthe state stays in {redact(a.redis_url)} for `taskstate ls|show "
                f"--redis-url URL`: namespaces {', '.join(kept)}. Remove it with "
                "`taskstate drop NS --yes --redis-url URL`."
            )
        ok = summary_runs[1]["identical"] and bounded is not False
        return 0 if ok else 1
    except KeyboardInterrupt:
        print("\ntaskstate demo: interrupted; stopping every process it started ...",
              file=sys.stderr)  # fmt: skip
        return 130
    finally:
        demo.stop_all()


def build_parser() -> argparse.ArgumentParser:
    """The demo's options."""
    about = __doc__.split("\n\n")[0].replace("`", "")
    p = argparse.ArgumentParser(prog="taskstate demo", description=about)
    p.add_argument("--batches", type=int, default=12,
                   help="micro-batches, 30 s of tweets each (default %(default)s)")  # fmt: skip
    p.add_argument(
        "--faults",
        default="all",
        choices=FAULTS,
        help="which faults strike the taskstate and plain-dict runs (default %(default)s: in "
        "turn, Python worker SIGKILL, sidecar SIGKILL, whole query SIGKILL and restart)",
    )
    p.add_argument("--out", help="work directory for runs, chart and summary (default: a new "
                   "temporary directory)")  # fmt: skip
    p.add_argument("--redis-url", help="use this Redis instead of a private redis-server "
                   "(default: a private one, gone at the end)")  # fmt: skip
    p.add_argument("--tweets-per-batch", type=int, default=1200,
                   help="tweets per micro-batch (default %(default)s)")  # fmt: skip
    p.add_argument("--buckets-per-batch", type=int, default=6,
                   help="5-second EWMA buckets per micro-batch (default %(default)s)")  # fmt: skip
    p.add_argument("--partitions", type=int, default=4,
                   help="stateful tasks, hash partitions (default %(default)s)")  # fmt: skip
    p.add_argument(
        "--expire-after",
        type=positive_int,
        metavar="BUCKETS",
        help="a hashtag not seen for this many 5-second buckets expires: its state is deleted "
        "(TaskState ttl in event time) and starts afresh if it is seen again; the summary "
        "then shows the state stays bounded (default: never)",
    )
    p.add_argument(
        "--master",
        default="local[2,4]",
        help="Spark master; it must retry failed tasks: local[N,F], not local[N] "
        "(default %(default)s)",
    )
    p.add_argument("--query", action="store_true", help=argparse.SUPPRESS)
    for hidden in ("--namespace", "--sidecar", "--out-dir", "--checkpoint"):
        p.add_argument(hidden, help=argparse.SUPPRESS)
    p.add_argument("--state", default="taskstate", help=argparse.SUPPRESS)
    p.add_argument("--fault-dir", default="", help=argparse.SUPPRESS)
    p.add_argument("--kill-worker-at", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--pause-at", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--progress-file", default=None, help=argparse.SUPPRESS)
    return p


def positive_int(text: str) -> int:
    """An argparse type: an integer of 1 or more."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of 1 or more")
    return n


def main(argv: Sequence[str] | None = None) -> int:
    """`taskstate demo` (or, with --query, one run of the query)."""
    p = build_parser()
    a = p.parse_args(argv)
    if a.query:
        return run_query(a)
    if a.batches < 4:
        p.error("--batches must be at least 4 (faults strike at 1/4, 1/2 and 3/4 of the run)")
    missing = missing_extras()
    if missing:  # before anything starts: not after minutes of Spark
        print(
            f"taskstate demo: {', '.join(missing)} missing: pip install 'taskstate[spark,demo]'",
            file=sys.stderr,
        )
        return 2
    return orchestrate(a)


DEMO_MODULES = ("pyspark", "pandas", "pyarrow", "matplotlib")


def missing_extras() -> list[str]:
    """The demo's modules that this Python cannot import (the `spark` and `demo` extras)."""
    import importlib.util

    return [m for m in DEMO_MODULES if importlib.util.find_spec(m) is None]


if __name__ == "__main__":
    sys.exit(main())
