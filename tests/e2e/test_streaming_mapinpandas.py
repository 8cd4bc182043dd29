"""The core Spark path: a streaming query whose mapInPandas step keeps its state in
TaskState, run golden and then under real faults; results must equal golden exactly."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from taskstate.spark_plugin.example import (
    COMPONENT,
    Runner,
    _state_from_rows,
    build_parser,
    expected_state,
    read_output,
    read_state,
)
from taskstate.testing import RedisServer, SidecarProcess

pytestmark = pytest.mark.e2e

BATCHES, PER_BATCH, KEYS, PARTS, FAULT_BATCH = 5, 200, 30, 4, 2


@pytest.fixture(scope="module")
def runs(
    spark_ready: None,
    redis_server: RedisServer,
    sidecar: SidecarProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    """Run every scenario once; tests below check one property each."""
    workdir = tmp_path_factory.mktemp("runs")
    ns = build_parser().parse_args(
        [
            "--batches",
            str(BATCHES),
            "--events-per-batch",
            str(PER_BATCH),
            "--keys",
            str(KEYS),
            "--partitions",
            str(PARTS),
            "--fault-batch",
            str(FAULT_BATCH),
            "--namespace-prefix",
            f"e2e-{uuid.uuid4().hex[:6]}",
        ]
    )
    runner = Runner(workdir, redis_server.url, sidecar.target, ns)
    out: dict[str, Any] = {"workdir": workdir, "prefix": ns.namespace_prefix}
    try:
        for name, state, faults in (
            ("golden", "taskstate", "none"),
            ("worker", "taskstate", "worker"),
            ("restart", "taskstate", "restart"),
            ("dict-worker", "dict", "worker"),
        ):
            runner.run(name, state, faults)
            rows = read_output(workdir / name / "out")
            final = (
                read_state(redis_server.url, f"{ns.namespace_prefix}-{name}", PARTS)
                if state == "taskstate"
                else _state_from_rows(rows)
            )
            out[name] = {"rows": rows, "state": final}
    finally:
        runner.kill_all()
    return out


def _rollbacks(r: RedisServer, namespace: str) -> int:
    c: redis.Redis = r.client()
    return sum(
        int(c.hget(f"ts:{{{namespace}/{COMPONENT}/{p}}}:meta", "rollbacks") or 0)
        for p in range(PARTS)
    )


def test_golden_equals_the_totals_computed_without_spark(runs: dict[str, Any]) -> None:
    assert runs["golden"]["state"] == expected_state(BATCHES, PER_BATCH, KEYS)
    assert len(runs["golden"]["rows"]) == BATCHES * PER_BATCH
    assert {r[0] for r in runs["golden"]["rows"]} == set(range(BATCHES))


def test_python_worker_sigkilled_mid_batch_equals_golden(
    runs: dict[str, Any], redis_server: RedisServer
) -> None:
    workdir: Path = runs["workdir"]
    assert (workdir / "worker" / "faults" / "worker-killed").exists()  # the fault struck
    # the kill came after the batch's commit, so the retried task had to roll it back
    assert _rollbacks(redis_server, f"{runs['prefix']}-worker") >= 1
    assert runs["worker"]["rows"] == runs["golden"]["rows"]
    assert runs["worker"]["state"] == runs["golden"]["state"]


def test_query_stopped_hard_and_restarted_from_checkpoint_equals_golden(
    runs: dict[str, Any], redis_server: RedisServer
) -> None:
    workdir: Path = runs["workdir"]
    assert (workdir / "restart" / "faults" / "paused").exists()
    assert _rollbacks(redis_server, f"{runs['prefix']}-restart") >= 1
    assert runs["restart"]["rows"] == runs["golden"]["rows"]
    assert runs["restart"]["state"] == runs["golden"]["state"]


def test_the_same_job_with_a_plain_dict_diverges(runs: dict[str, Any]) -> None:
    """Proof that the comparisons above can fail."""
    assert (runs["workdir"] / "dict-worker" / "faults" / "worker-killed").exists()
    assert runs["dict-worker"]["rows"] != runs["golden"]["rows"]
    assert runs["dict-worker"]["state"] != runs["golden"]["state"]
