"""The executor plugin's sidecar start, as a spark-submit user sees it on the console.

- A sidecar that cannot start (its Python lacks taskstate's dependencies) fails the
  executor within seconds, with the cause from the sidecar's log in the error, instead
  of the start timeout (60 s by default; 120 s here, so that waiting for it cannot pass).
- The sidecar's start-up warnings (a Redis without persistence) reach the executor's
  console, with the plugin's way to silence them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from taskstate.testing import RedisServer

pytestmark = pytest.mark.e2e

PLUGIN = "io.taskstate.spark.TaskStatePlugin"
BOUND_S = 30  # the start timeout is 120 s below; the old plugin waited for it

JOB = """
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
print("rows", spark.range(4).count())
spark.stop()
"""


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin jar and the py-files zip, as `taskstate spark-package` writes them."""
    pkg = tmp_path_factory.mktemp("pkg")
    r = subprocess.run(
        [sys.executable, "-m", "taskstate.cli.main", "spark-package", "--out", str(pkg)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return pkg


def submit(
    package: Path, redis_url: str, python: str, job: Path, *conf: str
) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/tmp"),
        "PYSPARK_PYTHON": sys.executable,  # the driver and the workers: this venv
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    if "JAVA_HOME" in os.environ:
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    confs = [
        f"spark.plugins={PLUGIN}",
        f"spark.taskstate.redisUrl={redis_url}",
        f"spark.taskstate.python={python}",  # the sidecar's Python
        "spark.ui.enabled=false",
        *conf,
    ]
    started = time.monotonic()
    r = subprocess.run(
        [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]",
         "--jars", str(package / "taskstate-plugin.jar"),
         "--py-files", str(package / "taskstate-pyfiles.zip"),
         *(a for c in confs for a in ("--conf", c)), str(job)],
        env=env, capture_output=True, text=True, timeout=600, check=False, cwd="/",
        start_new_session=True,
    )  # fmt: skip
    return r, time.monotonic() - started


def test_a_sidecar_that_cannot_start_fails_the_executor_within_seconds_with_its_cause(
    spark_ready: None, redis_server: RedisServer, package: Path, tmp_path: Path
) -> None:
    # a Python without taskstate's dependencies: taskstate itself comes from the zip
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    job = tmp_path / "job.py"
    job.write_text(JOB)
    r, took = submit(package, redis_server.url, str(bare / "bin/python"), job,
                     "spark.taskstate.startTimeoutSeconds=120")  # fmt: skip
    print(f"spark-submit failed after {took:.1f} s")
    assert r.returncode != 0 and "rows 4" not in r.stdout, r.stdout[-2000:]
    err = r.stderr
    assert "taskstate plugin: could not start the sidecar" in err, err[-4000:]
    m = re.search(r"the sidecar exited with code 1 after ([0-9.]+) s, before it reported ready",
                  err)  # fmt: skip
    assert m is not None, err[-4000:]
    print(f"the plugin noticed the sidecar's exit after {m.group(1)} s")
    # the cause, from the sidecar's log (its first third-party import)
    assert "ModuleNotFoundError: No module named 'orjson'" in err, err[-4000:]
    assert f"spark.taskstate.python ({bare / 'bin/python'})" in err  # and what to fix
    # the plugin's own time, not spark-submit's (a JVM and a SparkContext start in it too)
    assert float(m.group(1)) < BOUND_S, f"{m.group(1)} s: the plugin did not notice the exit"
    assert took < 110, f"{took:.1f} s: spark-submit waited out the 120 s start timeout"


def test_the_sidecars_start_up_warnings_reach_the_executors_console(
    spark_ready: None, redis_server: RedisServer, package: Path, tmp_path: Path
) -> None:
    # the fixture's redis-server keeps nothing on disk: the sidecar warns at start
    assert redis_server.client().config_get("appendonly")["appendonly"] == "no"
    job = tmp_path / "job.py"
    job.write_text(JOB)
    r, _ = submit(package, redis_server.url, sys.executable, job)
    assert r.returncode == 0, r.stderr[-4000:]
    assert "rows 4" in r.stdout
    warned = [line for line in r.stderr.splitlines() if "redis can lose task state" in line]
    assert warned, r.stderr[-4000:]
    assert '"check":"persistence"' in warned[0]
    assert "spark.taskstate.sidecar.extraArgs=--allow-volatile-redis" in warned[0]
