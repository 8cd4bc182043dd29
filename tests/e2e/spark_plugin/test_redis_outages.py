"""Redis outages of 15 to 60 s at each moment of a task cost no executor, with the plugin.

Each streaming query runs on `local-cluster[2,1,1024]` with the executor plugin and its
sidecars at their default settings (`--redis-deadline`, the flush timeout) and Spark's
default `spark.task.maxFailures` (4), against a redis-server with `appendonly yes`
(`appendfsync always`). In partition 0 of chosen batches the task stops at a moment
(before its Open, before its reads, before its commit, at its end: the plugin's flush and
batch mark) and waits while this test breaks Redis: SIGSTOP (a hung server, as in a
failover) or SIGKILL and a restart from the AOF. The test keeps Redis down for the
outage's length, measured here, then lets it go on. Nothing in these jobs defers changes
(one block per task, or a processor that commits at close), so nothing may fail-stop;
applyInPandasWithState holds its later groups for the plugin's flush, and there the
outage strikes as the flush asks the worker for them: it is waited out, within the flush
timeout, so nothing may fail-stop there either.

The queries run at the same time, each against a Redis of its own (concurrent.py): the
outages are waiting, not work. Each test checks one property of every query: exact output, exact
state, the same executors at the end as at the start, no fail-stop, and that the outage
at the task's end met the batch mark (the sidecars' logs).
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from taskstate.demo.example import Runner, build_parser
from taskstate.demo.faults import sidecars_of
from taskstate.demo.jobs import (
    expected_rows,
    expected_state,
    read_output,
    read_state,
    without_partition,
)
from taskstate.testing import RedisServer, find_redis_server

from ..conftest import api_params
from .concurrent import Runs, executor_logs, run_concurrently

pytestmark = pytest.mark.e2e

PER_BATCH, KEYS, PARTS = 100, 200, 4


@dataclass(frozen=True)
class Outage:
    """Redis down at `moment` of partition 0's task in `batch` for `seconds`."""

    batch: int
    moment: str  # faults.OUTAGE_MOMENTS
    seconds: float
    # "stop" (SIGSTOP, then SIGCONT) or "kill" (SIGKILL, then a restart) Redis; "sidecar":
    # SIGKILL the sidecar of the task's executor (its plugin starts a new one at once)
    kind: str


# Every moment at every length, each of both kinds, spread over the APIs (the queries run
# at the same time: the longest plan bounds the module's time); each API meets the outage
# that cost executors (60 s at the task's end) and a failover at its commit and its Open.
PLANS: dict[str, tuple[Outage, ...]] = {
    "mapInPandas": (
        Outage(1, "open", 15, "stop"),
        Outage(2, "mid", 30, "kill"),
        Outage(3, "commit", 60, "stop"),
        Outage(4, "end", 60, "stop"),
        Outage(5, "open", 30, "stop"),
        Outage(6, "end", 15, "kill"),
    ),
    "foreachBatch-mapPartitions": (
        Outage(1, "end", 60, "stop"),
        Outage(2, "commit", 30, "kill"),
        Outage(3, "open", 15, "stop"),
        Outage(4, "mid", 60, "stop"),
    ),
    "foreachBatch-foreachPartition": (
        Outage(1, "end", 60, "kill"),
        Outage(2, "mid", 30, "stop"),
        Outage(3, "commit", 15, "stop"),
        Outage(4, "open", 60, "kill"),
    ),
    "transformWithStateInPandas": (
        Outage(1, "end", 60, "stop"),
        Outage(2, "commit", 30, "kill"),
        Outage(3, "open", 15, "kill"),
        Outage(4, "mid", 15, "kill"),
        Outage(5, "end", 30, "kill"),
    ),
    # held group changes: the outage strikes as the flush asks the worker for them; the
    # sidecar is killed while the worker holds them, and as the flush asks for them
    "applyInPandasWithState": (
        Outage(1, "flush", 60, "stop"),
        Outage(2, "flush", 30, "kill"),
        Outage(3, "commit", 15, "stop"),
        Outage(4, "held", 0, "sidecar"),
        Outage(5, "flush", 0, "sidecar"),
    ),
}


@dataclass
class Result:
    api: str
    rows: list[tuple[Any, ...]]
    state: dict[str, Any]
    batches: int
    held: list[tuple[Outage, float]]  # each outage and how long Redis was down, measured
    executors: list[str]  # every executor the application had, lost ones included
    executor_logs: str
    driver_log: str
    sidecar_logs: str


def _broken(redis: RedisServer, outage: Outage, marker: Path) -> None:
    assert redis.proc is not None
    if outage.kind == "sidecar":
        for pid in sidecars_of(int(marker.read_text())):
            os.kill(pid, signal.SIGKILL)
    elif outage.kind == "stop":
        os.kill(redis.proc.pid, signal.SIGSTOP)
    else:
        redis.kill(signal.SIGKILL)


def _mended(redis: RedisServer, outage: Outage) -> None:
    if outage.kind == "sidecar":
        return  # the plugin's supervisor starts a new one
    if outage.kind == "stop":
        assert redis.proc is not None
        os.kill(redis.proc.pid, signal.SIGCONT)
    else:
        redis.start(timeout=60)


def _run(api: str, workdir: Path, plugin_jar: str) -> Result:
    """One query through its outages, against a Redis of its own."""
    plan = PLANS[api]
    batches = max(o.batch for o in plan) + 2
    redis = RedisServer(workdir / "redis", appendonly=True, fsync_always=True).start()
    prefix = f"outage-{uuid.uuid4().hex[:6]}"
    ns = build_parser().parse_args([
        "--api", api, "--batches", str(batches), "--events-per-batch", str(PER_BATCH),
        "--keys", str(KEYS), "--partitions", str(PARTS),
        "--master", "local-cluster[2,1,1024]", "--namespace-prefix", prefix,
    ])  # fmt: skip
    run_dir = workdir / "sidecars"
    extra = [
        "--plugin-jar", plugin_jar, "--redis-url", redis.url,
        "--outages", ",".join(f"{o.batch}:{o.moment}" for o in plan),
        # the sidecars' logs where this test reads them (the workers look there too)
        "--conf", f"spark.taskstate.runDir={run_dir}",
        "--conf", f"spark.executorEnv.TASKSTATE_RUN_DIR={run_dir}",
    ]  # fmt: skip
    runner = Runner(workdir, redis.url, "", ns)
    faults = workdir / "run" / "faults"
    held: list[tuple[Outage, float]] = []
    try:
        proc = runner.start("run", "taskstate", extra, sidecar="")
        for outage in plan:
            marker = faults / f"outage-{outage.batch}-{outage.moment}"
            deadline = time.monotonic() + 900
            while not marker.exists():  # written whole, with the executor's pid
                if proc.poll() is not None or time.monotonic() > deadline:
                    runner.wait(proc, "run")
                    raise RuntimeError(f"{api}: the query ended before {marker.name}")
                time.sleep(0.05)
            t0 = time.monotonic()
            _broken(redis, outage, marker)
            marker.with_name(marker.name + ".go").write_text("")
            while time.monotonic() - t0 < outage.seconds:
                time.sleep(0.05)
            _mended(redis, outage)
            held.append((outage, time.monotonic() - t0))
        runner.wait(proc, "run", timeout=1200)
        namespace = f"{prefix}-run"
        return Result(
            api=api,
            rows=read_output(workdir / "run" / "out"),
            state=read_state(redis.url, namespace, PARTS),
            batches=batches,
            held=held,
            executors=(faults / "executors").read_text().split(),
            executor_logs=executor_logs(faults),
            driver_log=(workdir / "run" / "query.log").read_text(errors="replace"),
            sidecar_logs="\n".join(
                p.read_text(errors="replace") for p in sorted(run_dir.glob("jvm-*.log"))
            ),
        )
    finally:
        runner.kill_all()
        if redis.proc is not None:
            os.kill(redis.proc.pid, signal.SIGCONT)  # a stopped server cannot be killed
        redis.stop()


@pytest.fixture(scope="module")
def results(
    spark_ready: None, plugin_jar: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Runs[Result]]:
    """Every query through its outages, at the same time."""
    try:
        find_redis_server()
    except FileNotFoundError as exc:
        pytest.fail(f"redis-server is missing: {exc}", pytrace=False)
    from taskstate.spark_plugin import compat

    apis = [a for a in PLANS if a not in compat.FEATURES or compat.refusal(a) is None]
    yield run_concurrently(
        apis, lambda api: _run(api, tmp_path_factory.mktemp(api.replace("-", "_")), plugin_jar)
    )


APIS = api_params(tuple(PLANS))
AT_THE_END = api_params(
    tuple(a for a, plan in PLANS.items() if any(o.moment == "end" for o in plan))
)


@pytest.mark.parametrize("api", APIS)
def test_every_outage_lasted_as_long_as_planned(results: Runs[Result], api: str) -> None:
    r = results[api]
    assert [o for o, _ in r.held] == list(PLANS[api])
    assert all(secs >= o.seconds for o, secs in r.held), r.held


@pytest.mark.parametrize("api", APIS)
def test_the_output_counts_every_event_once(results: Runs[Result], api: str) -> None:
    r = results[api]
    want = expected_rows(r.batches, PER_BATCH, KEYS)
    assert without_partition(r.rows) == want


@pytest.mark.parametrize("api", APIS)
def test_the_state_counts_every_event_once(results: Runs[Result], api: str) -> None:
    r = results[api]
    assert r.state == expected_state(r.batches, PER_BATCH, KEYS)


@pytest.mark.parametrize("api", APIS)
def test_no_executor_was_lost(results: Runs[Result], api: str) -> None:
    """The application ends with the two executors it started with, none stopped."""
    r = results[api]
    assert r.executors == ["0", "1"], r.driver_log[-3000:]
    assert "Lost executor" not in r.driver_log
    assert "taskstate FAIL-STOP" not in r.executor_logs


@pytest.mark.parametrize("api", AT_THE_END)
def test_the_outage_at_the_tasks_end_was_waited_out_at_the_batch_mark(
    results: Runs[Result], api: str
) -> None:
    """The mark met Redis away and waited (the sidecar's log), and no mark was dropped.

    A killed Redis refuses connections (redis-py's retries are logged); a stopped one
    never answers the first try, which ends at the Redis deadline (the mark's own wait).
    """
    r = results[api]
    records = [json.loads(line) for line in r.sidecar_logs.splitlines() if line.startswith("{")]
    waits = [
        x
        for x in records
        if x.get("op") == "done" or x.get("msg", "").startswith("the batch mark waits for Redis")
    ]
    assert waits, sorted({x.get("msg") for x in records})
    assert not [x for x in records if "not marked finished" in x.get("msg", "")]


def test_held_group_changes_waited_for_redis_at_the_flush(
    results: Runs[Result],
) -> None:
    """The worker handed its held commit to the sidecar (its stderr, the executor's), which
    waited until Redis was back (the sidecars' log)."""
    r = results["applyInPandasWithState"]
    assert "Redis did not take a flush; handed" in r.executor_logs
    assert "a commit handed over by a worker waits for Redis" in r.sidecar_logs


def test_a_sidecar_killed_while_the_worker_held_changes_was_waited_for(
    results: Runs[Result],
) -> None:
    """The worker attached to the restarted sidecar with what it held (the sidecars' log)."""
    r = results["applyInPandasWithState"]
    assert "a worker attached again with held group changes" in r.sidecar_logs


def test_the_plans_cover_every_moment_at_every_length() -> None:
    """What the docs claim of this module: each moment meets 15, 30 and 60 s outages."""
    met = {(o.moment, o.seconds) for plan in PLANS.values() for o in plan if o.kind != "sidecar"}
    for moment in ("open", "mid", "commit", "end"):
        assert {s for m, s in met if m == moment} == {15, 30, 60}, moment
