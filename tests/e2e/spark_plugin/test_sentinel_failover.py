"""A Sentinel failover under a running job costs no executor, with the plugin.

A Sentinel deployment (one master, one replica, three sentinels, quorum 2), the
executor plugin's sidecars at their defaults on `redis+sentinel://`, the job's commits
at `durability="replicated:1"`. In partition 0 of batch 2 the task stops (before its
commit in mapInPandas, after its first group in applyInPandasWithState, whose later
groups are then held for the plugin's flush) while this test SIGKILLs the master, waits
for the sentinels to promote the replica, and restarts the old master, which the
sentinels make a replica of the new one (replicated:1 needs a replica). The two queries
run at the same time, each against a deployment of its own. Output and state must be
exact, and the application must end with the executors it started with.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from taskstate.demo.example import Runner, build_parser
from taskstate.demo.jobs import (
    expected_rows,
    expected_state,
    read_output,
    read_state,
    without_partition,
)
from taskstate.testing import find_redis_server
from taskstate.testing.topologies import RedisSentinelProcs

from .concurrent import Runs, executor_logs, run_concurrently

pytestmark = pytest.mark.e2e

PER_BATCH, KEYS, PARTS, BATCHES = 100, 200, 4, 5
MOMENT = {"mapInPandas": "commit", "applyInPandasWithState": "end"}


@dataclass
class Result:
    rows: list[tuple[Any, ...]]
    state: dict[str, Any]
    failover_s: float
    executors: list[str]  # every executor the application had, lost ones included
    executor_logs: str
    driver_log: str


def _wait(check: Any, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not happen within {timeout:g} s")
        time.sleep(0.1)


def _run(api: str, workdir: Path, plugin_jar: str) -> Result:
    topo = RedisSentinelProcs(workdir / "redis", sentinels=3).start()
    prefix = f"sentinel-{uuid.uuid4().hex[:6]}"
    ns = build_parser().parse_args([
        "--api", api, "--batches", str(BATCHES), "--events-per-batch", str(PER_BATCH),
        "--keys", str(KEYS), "--partitions", str(PARTS),
        "--master", "local-cluster[2,1,1024]", "--namespace-prefix", prefix,
    ])  # fmt: skip
    extra = [
        "--plugin-jar", plugin_jar, "--redis-url", topo.url,
        "--outages", f"2:{MOMENT[api]}", "--durability", "replicated:1",
    ]  # fmt: skip
    runner = Runner(workdir, topo.url, "", ns)
    faults = workdir / "run" / "faults"
    try:
        proc = runner.start("run", "taskstate", extra, sidecar="")
        marker = faults / f"outage-2-{MOMENT[api]}"
        _wait(lambda: marker.exists() or proc.poll() is not None, "the batch-2 marker", 900)
        if proc.poll() is not None:
            runner.wait(proc, "run")
            raise RuntimeError(f"{api}: the query ended before {marker.name}")
        old = topo.master
        t0 = time.monotonic()
        old.kill()  # SIGKILL the master mid-job
        _wait(lambda: topo.current_master() is topo.replica, "the failover")
        failover_s = time.monotonic() - t0
        old.restart()  # the sentinels make it a replica of the new master
        _wait(
            lambda: old.info("replication").get("master_link_status") == "up",
            "the old master syncing as a replica",
        )
        marker.with_name(marker.name + ".go").write_text("")
        runner.wait(proc, "run", timeout=900)
        url = f"redis://{topo.replica.address}/0"
        return Result(
            rows=read_output(workdir / "run" / "out"),
            state=read_state(url, f"{prefix}-run", PARTS),
            failover_s=failover_s,
            executors=(faults / "executors").read_text().split(),
            executor_logs=executor_logs(faults),
            driver_log=(workdir / "run" / "query.log").read_text(errors="replace"),
        )
    finally:
        runner.kill_all()
        topo.stop()


@pytest.fixture(scope="module")
def results(
    spark_ready: None, plugin_jar: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Runs[Result]]:
    try:
        find_redis_server()
    except FileNotFoundError as exc:
        pytest.fail(f"redis-server is missing: {exc}", pytrace=False)
    yield run_concurrently(MOMENT, lambda api: _run(api, tmp_path_factory.mktemp(api), plugin_jar))


@pytest.mark.parametrize("api", list(MOMENT))
def test_output_and_state_are_exact_across_the_failover(results: Runs[Result], api: str) -> None:
    r = results[api]
    assert without_partition(r.rows) == expected_rows(BATCHES, PER_BATCH, KEYS)
    assert r.state == expected_state(BATCHES, PER_BATCH, KEYS)


@pytest.mark.parametrize("api", list(MOMENT))
def test_the_failover_cost_no_executor(results: Runs[Result], api: str) -> None:
    r = results[api]
    assert r.failover_s > 2.0  # down-after-milliseconds 2000: a real failover happened
    assert r.executors == ["0", "1"], r.driver_log[-3000:]
    assert "Lost executor" not in r.driver_log
    assert "taskstate FAIL-STOP" not in r.executor_logs
