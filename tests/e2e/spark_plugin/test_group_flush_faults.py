"""applyInPandasWithState under the executor plugin, with faults around the group flush.

One streaming query on `local-cluster[2,1,1024]` with the plugin (its sidecars, its flush
barrier): the later groups of each task attempt are held in the Python worker and made
durable by the plugin's flush, just before Spark learns that the task succeeded. In
partition 0 of batches 1 to 5 a fault strikes around that flush:

1. the Python worker is SIGKILLed when the flush asks for its changes (after its last
   group, before its task is reported done);
2. the executor's sidecar is SIGKILLed after it accepted that the worker holds changes
   of the attempt, before they were applied;
3. Redis stalls past the sidecar's deadline as the flush begins;
4. the executor JVM is SIGKILLed during the flush;
5. the whole query is SIGKILLed during the flush and restarted from its checkpoint.

Every batch's output and the final state must equal what the events give counted once,
computed without Spark. Where the changes could not become durable (the worker died
with them), the executor must have stopped (the plugin's fail-stop) before the task
could be reported done; a restarted sidecar and a Redis stall shorter than the flush
timeout are waited out, and stop nothing.
"""

from __future__ import annotations

import os
import re
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from taskstate.demo.example import Runner, build_parser
from taskstate.demo.jobs import (
    COMPONENT,
    expected_rows,
    expected_state,
    keys_in_several_partitions,
    read_output,
    read_state,
    without_partition,
)
from taskstate.sidecar.storage.redis.keys import meta_key
from taskstate.testing import RedisServer, find_redis_server

pytestmark = pytest.mark.e2e

BATCHES, PER_BATCH, KEYS, PARTS = 7, 150, 400, 4
PLAN = {1: "worker", 2: "sidecar", 3: "redis", 4: "executor", 5: "restart"}
RUN = "faults"


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A redis-server whose DEBUG SLEEP the `redis` fault may use."""
    try:
        find_redis_server()
    except FileNotFoundError as exc:
        pytest.fail(f"redis-server is missing: {exc}", pytrace=False)
    extra = ["--enable-debug-command", "local"]
    with RedisServer(tmp_path_factory.mktemp("redis"), extra=extra) as r:
        yield r


def _wait_for(path: Path, proc: Any, runner: Runner) -> str:
    deadline = time.monotonic() + 600
    while not path.exists() or not path.read_text().strip():
        if proc.poll() is not None or time.monotonic() > deadline:
            runner.wait(proc, RUN)
            raise RuntimeError(f"the query ended before {path.name} was written")
        time.sleep(0.1)
    return path.read_text().strip()


@pytest.fixture(scope="module")
def run(
    spark_ready: None,
    redis_server: RedisServer,
    plugin_jar: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, Any]]:
    """Run the query through all five faults; the tests check one property each."""
    workdir = tmp_path_factory.mktemp("group-faults")
    ns = build_parser().parse_args([
        "--api", "applyInPandasWithState", "--batches", str(BATCHES),
        "--events-per-batch", str(PER_BATCH), "--keys", str(KEYS),
        "--partitions", str(PARTS), "--master", "local-cluster[2,1,1024]",
        "--namespace-prefix", f"flush-{uuid.uuid4().hex[:6]}",
    ])  # fmt: skip
    extra = [
        "--plugin-jar", plugin_jar, "--redis-url", redis_server.url,
        "--group-faults", ",".join(f"{b}:{kind}" for b, kind in PLAN.items()),
        # a Redis stall of faults.REDIS_STALL_S outlasts the sidecars' deadline
        "--conf", "spark.taskstate.sidecar.extraArgs=--redis-deadline 2",
        # the sidecars' logs where this test reads them (the workers look there too)
        "--conf", f"spark.taskstate.runDir={workdir / 'sidecars'}",
        "--conf", f"spark.executorEnv.TASKSTATE_RUN_DIR={workdir / 'sidecars'}",
    ]  # fmt: skip
    runner = Runner(workdir, redis_server.url, "", ns)
    faults = workdir / RUN / "faults"
    killed: list[int] = []
    t0 = time.monotonic()
    try:
        proc = runner.start(RUN, "taskstate", extra, sidecar="")
        pid = int(_wait_for(faults / "flush-executor.pid", proc, runner))
        os.kill(pid, signal.SIGKILL)  # the executor JVM, its worker inside the flush
        killed.append(pid)
        _wait_for(faults / "flush-restart.pid", proc, runner)
        os.killpg(proc.pid, signal.SIGKILL)  # driver, executors, sidecars: all at once
        proc.wait()
        runner.wait(runner.start(RUN, "taskstate", extra, sidecar=""), RUN)
    finally:
        runner.kill_all()
    yield {
        "faults": faults,
        "killed": killed,
        "seconds": time.monotonic() - t0,
        "rows": read_output(workdir / RUN / "out"),
        "state": read_state(redis_server.url, f"{ns.namespace_prefix}-{RUN}", PARTS),
        "namespace": f"{ns.namespace_prefix}-{RUN}",
        "executor_logs": _executor_logs(faults),
        "driver_log": (workdir / RUN / "query.log").read_text(errors="replace"),
        "sidecar_logs": "\n".join(
            p.read_text(errors="replace") for p in sorted((workdir / "sidecars").glob("jvm-*.log"))
        ),
    }


def _executor_logs(faults: Path) -> str:
    """The stderr of every executor the query's runs started (local-cluster's work dir)."""
    import pyspark

    work = Path(pyspark.__file__).parent / "work"
    text = []
    for app in (faults / "app-ids").read_text().split():
        text += [p.read_text(errors="replace") for p in sorted((work / app).glob("*/stderr"))]
    return "\n".join(text)


def _batch(rows: list[tuple[Any, ...]], batch: int) -> list[tuple[Any, ...]]:
    return sorted(r for r in rows if r[0] == batch)


def _fail_stops(run: dict[str, Any]) -> list[str]:
    return [line for line in run["executor_logs"].splitlines() if "taskstate FAIL-STOP:" in line]


@pytest.mark.parametrize("batch", range(BATCHES))
def test_each_batch_counts_every_event_once(run: dict[str, Any], batch: int) -> None:
    want = [r for r in expected_rows(BATCHES, PER_BATCH, KEYS) if r[0] == batch]
    assert without_partition(_batch(run["rows"], batch)) == want


def test_each_key_kept_its_partition(run: dict[str, Any]) -> None:
    assert keys_in_several_partitions(run["rows"]) == {}


def test_the_final_state_counts_every_event_once(run: dict[str, Any]) -> None:
    assert run["state"] == expected_state(BATCHES, PER_BATCH, KEYS)


def test_every_fault_struck(run: dict[str, Any]) -> None:
    markers = {"sidecar": "group-sidecar"}
    for kind in PLAN.values():
        assert (run["faults"] / markers.get(kind, f"flush-{kind}")).exists(), kind
    assert run["killed"], "no executor was killed"


def test_groups_were_held_for_the_flush(run: dict[str, Any]) -> None:
    held = (run["faults"] / "deferred.jsonl").read_text().splitlines()
    assert len(held) >= BATCHES, held  # partition 0 held its later groups in every batch


def test_a_worker_killed_before_its_flush_stopped_the_executor(run: dict[str, Any]) -> None:
    lines = [s for s in _fail_stops(run) if "partition 0" in s and "worker ended" in s]
    assert lines, _fail_stops(run) or run["executor_logs"][-3000:]


def test_a_sidecar_restarted_during_the_task_cost_no_executor(run: dict[str, Any]) -> None:
    """The worker, alive and holding its changes, attached to the restarted sidecar.

    The new sidecar knew from the killed one's journal that the worker held the attempt's
    group changes, waited for it to attach again, and flushed them as before. (Once a FLUSH
    answered by a new sidecar that knew nothing passed, and the held groups were lost;
    later such a task stopped its executor.)
    """
    assert "a worker attached again with held group changes" in run["sidecar_logs"]
    assert not [s for s in _fail_stops(run) if "attach again" in s or "restarted" in s]


def test_only_the_worker_killed_with_its_changes_stopped_an_executor(run: dict[str, Any]) -> None:
    """The driver saw the worker fault's executor exit with 70, and no other fail-stop."""
    codes = re.findall(r"Lost executor \d+ on [^:]+: Command exited with code (\d+)",
                       run["driver_log"])  # fmt: skip
    assert codes.count("70") >= 1, codes
    assert all("worker ended" in s for s in _fail_stops(run)), _fail_stops(run)


def test_a_redis_stall_during_the_flush_was_waited_out(run: dict[str, Any]) -> None:
    """The worker handed its held commit to the sidecar, which waited for Redis; nothing
    stopped."""
    assert "Redis did not take a flush; handed" in run["executor_logs"]
    assert not [s for s in _fail_stops(run) if "STORAGE_UNAVAILABLE" in s], _fail_stops(run)


def test_each_fault_made_the_retry_roll_the_batch_back(
    run: dict[str, Any], redis_server: RedisServer
) -> None:
    """Partition 0's first group committed before each fault that cost the task; each
    retry undid it (the worker, executor and restart faults: the others cost nothing)."""
    c: redis.Redis = redis_server.client()
    rollbacks = int(c.hget(meta_key(run["namespace"], COMPONENT, 0), "rollbacks") or 0)
    assert rollbacks >= 3, rollbacks
