"""applyInPandasWithState with event-time timeouts: one task attempt, two Python workers.

Spark's sessionization pattern (jobs/sessions.py) with the session in TaskState must give
exactly the output of the same job with the session in Spark's GroupState: clean, with a
Python worker SIGKILLed mid-batch, with the driver SIGKILLed and restarted, and with the
sidecar SIGKILLed and restarted. With `spark.python.worker.reuse=false` Spark starts a
fresh worker for each runner, so every attempt with timed-out groups runs in two
processes: the test checks that this really happened, and that the sidecar counted
shared claims, not rollbacks.
"""

from __future__ import annotations

import collections
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

from taskstate.demo.jobs import kill_process_groups, read_output_files
from taskstate.testing import RedisServer, SidecarProcess

from ..conftest import stored_state

pytestmark = pytest.mark.e2e

JOB = Path(__file__).parent.parent / "jobs" / "sessions.py"
BATCHES, FAULT_BATCH = 6, 2
COLUMNS = ("batch", "word", "start", "last", "count", "closed")


class Runs:
    """Starts runs of the sessions job against one restartable sidecar."""

    def __init__(self, workdir: Path, redis: RedisServer) -> None:
        self.workdir = workdir
        self.redis = redis
        self.sidecar = SidecarProcess(
            redis.url, workdir / "sidecar.sock", extra=["--metrics-port", "0"]
        ).start()
        self.prefix = f"sess-{uuid.uuid4().hex[:6]}"
        self.children: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, state: str, *extra: str) -> subprocess.Popen[bytes]:
        d = self.workdir / name
        for sub in ("pids", "faults"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable, str(JOB), "--state", state, "--namespace", f"{self.prefix}-{name}",
            "--sidecar", self.sidecar.target, "--out", str(d / "out"),
            "--checkpoint", str(d / "checkpoint"), "--pids-dir", str(d / "pids"),
            "--fault-dir", str(d / "faults"), "--batches", str(BATCHES),
            "--fault-batch", str(FAULT_BATCH), *extra,
        ]  # fmt: skip
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
        log = open(d / "job.log", "ab")
        proc = subprocess.Popen(
            cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        self.children.append(proc)
        return proc

    def wait(self, proc: subprocess.Popen[bytes], name: str) -> None:
        code = proc.wait(timeout=600)
        log = (self.workdir / name / "job.log").read_text(errors="replace")
        assert code == 0, f"run {name!r} exited with {code}:\n{log[-4000:]}"

    def wait_for_fault(self, proc: subprocess.Popen[bytes], name: str) -> None:
        marker = self.workdir / name / "faults" / "struck"
        deadline = time.monotonic() + 300
        while not marker.exists():
            assert proc.poll() is None, f"run {name!r} ended before its fault"
            assert time.monotonic() < deadline, f"run {name!r} never reached its fault"
            time.sleep(0.1)
        time.sleep(0.5)  # the struck group's commit is done; let the fault settle in

    def run(self, name: str, state: str, fault: str = "none", reuse: str = "false") -> None:
        """One scenario, to the end."""
        extra = ["--reuse", reuse, "--fault", fault]
        proc = self.start(name, state, *extra)
        if fault == "pause":  # the whole query dies mid-batch, then restarts
            self.wait_for_fault(proc, name)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            proc = self.start(name, state, "--reuse", reuse)
        elif fault == "hold":  # the sidecar dies mid-batch and comes back on its socket
            self.wait_for_fault(proc, name)
            assert self.sidecar.kill(signal.SIGKILL) == -signal.SIGKILL
            (self.workdir / name / "faults" / "release").write_text("")
            time.sleep(1.0)  # the job's next calls meet no sidecar, and retry
            self.sidecar.start()
        self.wait(proc, name)

    def rows(self, name: str) -> list[tuple[Any, ...]]:
        out = read_output_files(self.workdir / name / "out")
        return sorted(tuple(r[c] for c in COLUMNS) for r in out)

    def attempts_in_two_processes(self, name: str) -> int:
        served: dict[str, set[str]] = collections.defaultdict(set)
        for log in (self.workdir / name / "pids").iterdir():
            for line in log.read_text().splitlines():
                served[line.split()[0]].add(log.name)
        return sum(1 for pids in served.values() if len(pids) > 1)


@pytest.fixture(scope="module")
def runs(
    spark_ready: None, redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Runs]:
    r = Runs(tmp_path_factory.mktemp("sessions"), redis_server)
    try:
        r.run("reference", "groupstate", reuse="true")
        yield r
    finally:
        kill_process_groups(r.children)
        r.sidecar.kill()


def check_equals_reference(runs: Runs, name: str) -> None:
    reference = runs.rows("reference")
    assert sum(1 for row in reference if row[5]) >= 20, "sessions must really time out"
    got = runs.rows(name)
    assert got == reference, f"{name}: {len(set(got) ^ set(reference))} rows differ"
    # every session closed and its state removed; only the sentinel word's is still open
    (end,) = [row for row in reference if row[1] == "~end"]
    assert stored_state(runs.redis, f"{runs.prefix}-{name}", "sessions") == {
        "~end": [end[2], end[3], end[4]]
    }


def test_clean_run_with_pooled_workers_equals_group_state(runs: Runs) -> None:
    runs.run("clean", "taskstate", reuse="true")
    check_equals_reference(runs, "clean")


def test_every_attempt_split_over_two_workers_keeps_its_commits(runs: Runs) -> None:
    before = runs.sidecar.metrics()
    runs.run("two-workers", "taskstate", reuse="false")
    after = runs.sidecar.metrics()
    check_equals_reference(runs, "two-workers")
    split = runs.attempts_in_two_processes("two-workers")
    assert split >= 5, f"only {split} task attempts ran in two Python workers"

    def moved(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    assert moved("taskstate_claims_reused_total") >= split
    assert moved("taskstate_replay_rollbacks_total") == 0  # no fault: nothing replayed


@pytest.mark.compat  # applyInPandasWithState with event-time timeouts
def test_python_worker_killed_mid_batch(runs: Runs) -> None:
    runs.run("worker-killed", "taskstate", fault="worker")
    assert (runs.workdir / "worker-killed" / "faults" / "struck").exists()
    check_equals_reference(runs, "worker-killed")
    assert runs.attempts_in_two_processes("worker-killed") >= 5


@pytest.mark.compat  # applyInPandasWithState with event-time timeouts
def test_driver_killed_and_restarted_mid_batch(runs: Runs) -> None:
    runs.run("driver-restarted", "taskstate", fault="pause")
    check_equals_reference(runs, "driver-restarted")


def test_sidecar_killed_and_restarted_mid_batch(runs: Runs) -> None:
    runs.run("sidecar-restarted", "taskstate", fault="hold")
    check_equals_reference(runs, "sidecar-restarted")
    assert runs.attempts_in_two_processes("sidecar-restarted") >= 5
