"""The core streaming job (mapInPandas) against a Redis Cluster with every master failed
over in the middle of a batch: output and state equal golden."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from taskstate.demo.example import Runner, build_parser
from taskstate.demo.jobs import COMPONENT, expected_state, read_output
from taskstate.sidecar.storage.redis.keys import data_key
from taskstate.testing import SidecarProcess, find_redis_server
from taskstate.testing.topologies import RedisClusterProcs

pytestmark = pytest.mark.e2e

BATCHES, PER_BATCH, KEYS, PARTS, HOLD_BATCH = 5, 120, 24, 4, 2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterProcs]:
    try:
        find_redis_server()
    except FileNotFoundError as exc:
        pytest.fail(str(exc), pytrace=False)
    with RedisClusterProcs(tmp_path_factory.mktemp("cluster")) as c:
        yield c


def cluster_state(topo: RedisClusterProcs, namespace: str) -> dict[str, Any]:
    rc = topo.client()
    out: dict[str, Any] = {}
    for p in range(PARTS):
        raw = rc.hgetall(data_key(namespace, COMPONENT, p))
        out.update({k.decode(): orjson.loads(v) for k, v in raw.items()})
    return out


def test_streaming_job_through_master_failovers_equals_golden(
    spark_ready: None, cluster: RedisClusterProcs, tmp_path: Path
) -> None:
    side = SidecarProcess(
        cluster.url, tmp_path / "s.sock", extra=["--redis-deadline", "20"]
    ).start()
    ns = build_parser().parse_args(
        ["--api", "mapInPandas", "--batches", str(BATCHES), "--events-per-batch",
         str(PER_BATCH), "--keys", str(KEYS), "--partitions", str(PARTS),
         "--namespace-prefix", f"cl-{uuid.uuid4().hex[:6]}"]
    )  # fmt: skip
    runner = Runner(tmp_path, cluster.url, side.target, ns)
    try:
        runner.run("golden", "taskstate", "none")
        proc = runner.start("failover", "taskstate", ["--hold-at", str(HOLD_BATCH)])
        faults = tmp_path / "failover" / "faults"
        deadline = time.monotonic() + 300
        while not (faults / "held").exists():
            assert proc.poll() is None, "the query ended before the hold"
            assert time.monotonic() < deadline, "the query never reached the hold"
            time.sleep(0.1)
        # batch HOLD_BATCH is in flight: fail over every master (CLUSTER FAILOVER on its
        # replica: the replica takes over once it has every write; the old master demotes)
        old_masters = list(cluster.nodes[:3])
        for master in old_masters:
            replica = cluster.replica_of(master)
            replica.client().execute_command("CLUSTER", "FAILOVER")
            t0 = time.monotonic()
            while replica.info("replication").get("role") != "master":
                assert time.monotonic() - t0 < 60, f"{replica.address} never took over"
                time.sleep(0.1)
        t0 = time.monotonic()
        while not all(m.info("replication")["role"] == "slave" for m in old_masters):
            assert time.monotonic() - t0 < 60, "an old master did not step down"
            time.sleep(0.1)
        cluster.wait_healthy()
        (faults / "release").write_text("")
        runner.wait(proc, "failover")
    finally:
        runner.kill_all()
        side.kill()
    # the sidecar met the new masters through redirections, and followed them
    assert "slot moved: following it" in side.log_path.read_text()
    golden_rows = read_output(tmp_path / "golden" / "out")
    assert golden_rows, "golden produced nothing"
    assert read_output(tmp_path / "failover" / "out") == golden_rows
    want = expected_state(BATCHES, PER_BATCH, KEYS)
    assert cluster_state(cluster, f"{ns.namespace_prefix}-golden") == want
    assert cluster_state(cluster, f"{ns.namespace_prefix}-failover") == want
