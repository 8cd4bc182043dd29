"""TaskState in streaming queries run from a Spark Connect client, golden and under faults.

One Connect server for the whole test session (conftest `connect_server`), a real
redis-server and sidecar per module; each run is a client process (jobs/connect_job.py)
that calls `configure(spark, namespace=..., sidecar=...)` and starts the query.

For each API the faulted run (a) SIGKILLs the Python worker right after partition 0
committed batch 1, and (b) holds partition 0 after its commit of batch 2 while the test
SIGKILLs the client; the old run, which lives on in the server, is then made to fail at
that batch (as a run that is stopped mid-batch), and a new client starts the query again
from its checkpoint, which replays batch 2. Output and state must equal the fault-free
run's. A streaming TaskState block that gets no batch id (a foreachBatch function not
wrapped with `with_batch_id`) must refuse and write nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from taskstate.demo.jobs import expected_state, read_output, read_state, state_from_rows
from taskstate.sidecar.storage.redis.keys import meta_key, namespace_pattern
from taskstate.testing import RedisServer, SidecarProcess

from ..conftest import api_params

pytestmark = [pytest.mark.e2e, pytest.mark.spark_feature("Spark Connect")]

JOB = Path(__file__).resolve().parents[1] / "jobs" / "connect_job.py"
APIS = (
    "mapInPandas-foreachBatch",
    "applyInPandasWithState-foreachBatch",
    "transformWithStateInPandas",
    "foreachBatch-mapInPandas",
)
BATCHES, PER_BATCH, KEYS, PARTS = 4, 60, 30, 2
KILL_WORKER_AT, HOLD_AT = 1, 2
COMPONENT = "running-totals"


class Client:
    """Client processes of one run (one namespace, one checkpoint)."""

    def __init__(self, url: str, sidecar: str, run_dir: Path, api: str, *extra: str) -> None:
        self.run_dir = run_dir
        self.namespace = f"cx-{uuid.uuid4().hex[:10]}"
        (run_dir / "faults").mkdir(parents=True, exist_ok=True)
        self.args = [
            "--remote", url, "--api", api, "--namespace", self.namespace, "--sidecar", sidecar,
            "--out", str(run_dir / "out"), "--checkpoint", str(run_dir / "ck"),
            "--fault-dir", str(run_dir / "faults"), "--batches", str(BATCHES),
            "--per-batch", str(PER_BATCH), "--keys", str(KEYS), "--partitions", str(PARTS),
            *extra,
        ]  # fmt: skip
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, generation: int = 1) -> subprocess.Popen[bytes]:
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
        log = open(self.run_dir / f"client-{generation}.log", "ab")
        proc = subprocess.Popen(
            [sys.executable, str(JOB), *self.args, "--generation", str(generation)],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        log.close()
        self.procs.append(proc)
        return proc

    def log(self, generation: int = 1) -> str:
        return (self.run_dir / f"client-{generation}.log").read_text(errors="replace")

    def wait(self, proc: subprocess.Popen[bytes], generation: int = 1) -> int:
        try:
            return proc.wait(timeout=600)
        except subprocess.TimeoutExpired:
            pytest.fail(f"client {generation} did not finish; its log:\n{self.log(generation)}")

    def marker(self, name: str) -> Path:
        return self.run_dir / "faults" / name

    def kill_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def _run(url: str, sidecar: str, run_dir: Path, api: str, faults: bool) -> Client:
    if not faults:
        c = Client(url, sidecar, run_dir, api)
        try:
            code = c.wait(c.start())
        finally:
            c.kill_all()
        assert code == 0, c.log()
        return c
    c = Client(url, sidecar, run_dir, api, "--kill-worker-at", str(KILL_WORKER_AT),
               "--hold-at", str(HOLD_AT))  # fmt: skip
    try:
        first = c.start(1)
        deadline = time.monotonic() + 600
        while not c.marker("held").exists():
            assert first.poll() is None, f"the client ended before the hold:\n{c.log(1)}"
            assert time.monotonic() < deadline, c.log(1)
            time.sleep(0.1)
        os.killpg(first.pid, signal.SIGKILL)  # the client, mid-batch, after a commit
        first.wait()
        c.marker("release").write_text("")  # the old run on the server fails at HOLD_AT
        code = c.wait(c.start(2), 2)  # a new client: the query again, from its checkpoint
    finally:
        c.kill_all()
    assert code == 0, c.log(2)
    return c


@pytest.fixture(scope="module", params=api_params(APIS))
def runs(
    request: pytest.FixtureRequest,
    connect_server: str,
    redis_server: RedisServer,
    sidecar: SidecarProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    """The golden and the faulted run of one API."""
    api = request.param
    work = tmp_path_factory.mktemp(api)
    out: dict[str, Any] = {"api": api}
    for name, faults in (("golden", False), ("faults", True)):
        c = _run(connect_server, sidecar.target, work / name, api, faults)
        out[name] = {
            "client": c,
            "rows": read_output(work / name / "out"),
            "state": read_state(redis_server.url, c.namespace, PARTS),
        }
    return out


def _rollbacks(r: RedisServer, namespace: str) -> int:
    c = r.client()
    return sum(
        int(c.hget(meta_key(namespace, COMPONENT, p), "rollbacks") or 0) for p in range(PARTS)
    )


def test_golden_counts_every_event_once(runs: dict[str, Any]) -> None:
    golden = runs["golden"]
    truth = expected_state(BATCHES, PER_BATCH, KEYS)
    events = [r for r in golden["rows"] if r[2] >= 0]
    assert sorted(r[2] for r in events) == list(range(BATCHES * PER_BATCH))
    if runs["api"].startswith("applyInPandasWithState"):
        # a key silent for GAP_MS was closed by its event-time timeout: its totals left the
        # state in a close row (event_id -1) and it started again from 0 if heard again;
        # what the close rows carried out plus what the state still holds is every event,
        # counted once
        final: dict[str, dict[str, int]] = {k: dict(v) for k, v in golden["state"].items()}
        closes = []
        for batch, _, event_id, key, count, total in golden["rows"]:
            if event_id < 0:
                closes.append(batch)
                st = final.setdefault(key, {"count": 0, "total": 0})
                st["count"] += count
                st["total"] += total
        assert final == truth
        assert len(closes) >= 5 and min(closes) < BATCHES - 1, f"keys must time out: {closes}"
    else:
        assert golden["state"] == truth == state_from_rows(golden["rows"])


def test_every_block_ran_with_its_micro_batch_id(runs: dict[str, Any]) -> None:
    """The foreachBatch jobs get the batch id from with_batch_id (Spark gives them none)."""
    for name in ("golden", "faults"):
        lines = runs[name]["client"].marker("opens.jsonl").read_text().splitlines()
        batches = {json.loads(line)["batch"] for line in lines}
        assert batches and all(b is not None and b >= 0 for b in batches), (name, batches)


def test_worker_killed_and_client_killed_and_restarted_equals_golden(
    runs: dict[str, Any], redis_server: RedisServer
) -> None:
    faulted, golden = runs["faults"], runs["golden"]
    c: Client = faulted["client"]
    for marker in ("worker-killed", "held", "release"):
        assert c.marker(marker).exists(), f"the fault {marker} did not strike"
    assert len(c.marker("sessions").read_text().split()) == 2, "two clients ran the query"
    # each fault came after a commit: the retry and the replay rolled the batch back
    assert _rollbacks(redis_server, c.namespace) >= 2
    assert faulted["rows"] == golden["rows"]
    assert faulted["state"] == golden["state"]


def test_a_streaming_block_without_batch_id_refuses_and_writes_nothing(
    connect_server: str,
    redis_server: RedisServer,
    sidecar: SidecarProcess,
    tmp_path: Path,
) -> None:
    """The trap of issue 31: a foreachBatch function without with_batch_id runs the
    query's mapInPandas with no batch id; the blocks must refuse, not checkpoint."""
    c = Client(connect_server, sidecar.target, tmp_path, "mapInPandas-foreachBatch", "--no-wrap")
    try:
        code = c.wait(c.start())
    finally:
        c.kill_all()
    log = c.log()
    assert code == 1, log
    assert "has no micro-batch id" in log and "with_batch_id" in log, log
    assert "spark.sql.streaming.internal.stateStore.partitions" in log, log
    assert list(redis_server.client().scan_iter(match=namespace_pattern(c.namespace))) == []
    assert read_output(tmp_path / "out") == []
