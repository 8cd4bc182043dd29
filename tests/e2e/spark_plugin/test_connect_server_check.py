"""A Spark Connect server without what taskstate needs: the client is told what is missing.

A Connect server of this module's own (~13 s), whose executors' Python has taskstate's
dependencies but not taskstate itself (a venv whose site-packages path points at this
one's, without the .pth that installs taskstate), and no executor plugin. A client
process (jobs/connect_check.py) calls configure() step by step as a new user would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from taskstate.spark_plugin.package import PLUGIN_CLASS, build_pyfiles
from taskstate.testing import RedisServer, SidecarProcess

from ..connect_server import ConnectServer

pytestmark = [pytest.mark.e2e, pytest.mark.spark_feature("Spark Connect")]

JOB = Path(__file__).resolve().parents[1] / "jobs" / "connect_check.py"


@pytest.fixture(scope="module")
def bare_server(spark_ready: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (site,) = venv.glob("lib/python3*/site-packages")
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    python = str(venv / "bin" / "python")
    r = subprocess.run([python, "-c", "import taskstate.client"], capture_output=True, check=False)
    assert r.returncode != 0, "the bare venv must not import taskstate"
    server = ConnectServer(tmp_path_factory.mktemp("bare-connect"), python=python).start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="module")
def report(
    bare_server: str,
    redis_server: RedisServer,
    sidecar: SidecarProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("check")
    pyfiles = build_pyfiles(work)
    namespace = f"cc-{uuid.uuid4().hex[:10]}"
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("TASKSTATE_NAMESPACE", None)
    cmd = [
        sys.executable, str(JOB), "--remote", bare_server, "--namespace", namespace,
        "--sidecar", sidecar.target, "--pyfiles", str(pyfiles), "--report", str(work / "r.json"),
    ]  # fmt: skip
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out: dict[str, Any] = json.loads((work / "r.json").read_text())
    out["namespace"] = namespace
    return out


def test_a_server_without_the_package_is_named(report: dict[str, Any]) -> None:
    text = report["bare"]
    assert text.startswith("ConfigError: the Spark Connect server cannot run taskstate"), text
    assert "cannot import taskstate" in text and "No module named 'taskstate'" in text
    assert "spark.addArtifacts" in text and "foreachBatch" in text


def test_a_server_without_plugin_or_sidecar_is_named(report: dict[str, Any]) -> None:
    """After addArtifacts the tasks import taskstate; what they lack is a sidecar."""
    text = report["artifacts"]
    assert text.startswith("ConfigError:") and "executor plugin is not loaded" in text, text
    assert PLUGIN_CLASS in text and "sidecar=" in text


def test_with_a_sidecar_configure_passes_and_tasks_use_the_artifact(
    report: dict[str, Any], redis_server: RedisServer
) -> None:
    assert report["sidecar"] == "ok"
    assert sum(report["batch_job"]) == 10, report["batch_job"]
    # a batch job: plain checkpoints under the namespace configure() set
    keys = list(redis_server.client().scan_iter(match=f"ts:{{{report['namespace']}/check/*"))
    assert keys, "the batch job's state is not in Redis"


def test_a_session_without_configure_is_told_to_name_its_namespace(
    report: dict[str, Any],
) -> None:
    text = report["no_namespace"]
    assert "no namespace for component 'check'" in text, text
    assert "configure(spark, namespace=...)" in text
