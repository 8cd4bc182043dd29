"""The taskstate data source from a Spark Connect client (the shared Connect server).

configure() registers it on a Connect session as on a classic one; a seed written from
the client lands where Spark's hash partitioning sends each key, and reads with their
filters pushed down give it back exactly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from taskstate.sidecar.spark_hash import partition_of
from taskstate.testing import SidecarProcess

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.compat,
    pytest.mark.spark_feature("Spark Connect"),
    pytest.mark.spark_feature("data source"),
]

JOB = Path(__file__).resolve().parents[1] / "jobs" / "connect_data_source.py"


def test_the_data_source_writes_and_reads_from_a_connect_client(
    connect_server: str, sidecar: SidecarProcess, tmp_path: Path
) -> None:
    ns = f"cds-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("TASKSTATE_NAMESPACE", None)
    cmd = [sys.executable, str(JOB), "--remote", connect_server, "--namespace", ns,
           "--sidecar", sidecar.target, "--report", str(tmp_path / "r.json")]  # fmt: skip
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    report = json.loads((tmp_path / "r.json").read_text())
    want = {f"k{i}": {"n": i} for i in range(500)}
    whole = report["whole"]
    assert {row["key"]: json.loads(row["value"]) for row in whole} == want
    assert all(row["partition"] == partition_of(row["key"], 3) for row in whole)
    assert {row["batch"] for row in whole} == {-1}
    assert sorted(row["key"] for row in report["key"]) == ["k300", "k7"]
    assert {row["key"] for row in report["partition"]} == {
        k for k in want if partition_of(k, 3) == 2
    }
