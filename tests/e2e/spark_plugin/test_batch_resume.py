"""Batch job: a long mapPartitions task killed at ~70% resumes from its last checkpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from taskstate.testing import SidecarProcess

pytestmark = pytest.mark.e2e

ROWS, KILL_AT, EVERY = 1000, 730, 100
JOB = Path(__file__).parent.parent / "jobs" / "batch_resume.py"


def test_killed_batch_task_resumes_after_its_checkpoint(
    spark_ready: None, sidecar: SidecarProcess, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    out = tmp_path / "result.json"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    env.pop("TASKSTATE_NAMESPACE", None)  # the namespace comes from configure()
    r = subprocess.run(
        [
            sys.executable,
            str(JOB),
            f"batch-{uuid.uuid4().hex[:6]}",
            sidecar.target,
            str(logs),
            str(ROWS),
            str(KILL_AT),
            str(EVERY),
            str(out),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        start_new_session=True,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    result = {row[0]: row for row in json.loads(out.read_text())}
    # both partitions: every record counted once in the state
    for part, first in ((0, 0), (1, ROWS)):
        _, _, _, count, total = result[part]
        assert count == ROWS and total == sum(range(first, first + ROWS))
    # partition 0 died at record KILL_AT; the retry resumed at the last checkpoint
    part0, attempt, start, _, _ = result[0]
    assert attempt >= 1 and start == (KILL_AT // EVERY) * EVERY
    first_try = [int(x) for x in (logs / "p0-a0.log").read_text().split()]
    retry = [int(x) for x in (logs / f"p0-a{attempt}.log").read_text().split()]
    assert first_try == list(range(KILL_AT + 1))
    assert retry == list(range(start, ROWS))
    seen = first_try + retry
    before_checkpoint = range(start)
    assert all(seen.count(i) == 1 for i in before_checkpoint)  # processed once
    assert sorted(set(seen)) == list(range(ROWS))
