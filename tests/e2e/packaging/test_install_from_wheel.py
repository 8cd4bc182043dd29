"""From the wheel to a spark-submit, in a clean virtual environment outside the tree.

The wheel the session built (setup.py compiles the plugin jar into it) is installed with
its `[spark,demo]` extras into a new venv in a temporary folder, as a user would
(`pip install 'taskstate[spark,demo]'`, here pinned by requirements/constraints.txt).
Nothing of the checkout is on that venv's path. Then, with its own commands only:
`taskstate --help`, a sidecar, a client round trip, and a small `spark-submit` with the
plugin jar that `taskstate spark-package` copies from the wheel.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from taskstate.testing import RedisServer

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[3]

JOB = """
import json, sys
from pyspark import TaskContext
from pyspark.sql import SparkSession
import taskstate.client
from taskstate.client import TaskState

def work(rows):
    ctx = TaskContext.get()
    with TaskState(ctx, component="installed", namespace=sys.argv[1]) as s:
        for r in rows:
            s["n"] = s.get("n", 0) + 1
        yield (s["n"], s.config.sidecar, taskstate.client.__file__)

spark = SparkSession.builder.getOrCreate()
rows = spark.sparkContext.parallelize(range(40), 2).mapPartitions(work).collect()
assert spark.range(8).mapInPandas(lambda frames: frames, "id long").count() == 8
json.dump(rows, open(sys.argv[2], "w"))
spark.stop()
"""

ROUND_TRIP = """
import sys
from taskstate.client import LocalContext, TaskState
with TaskState(LocalContext(0, batch_id=0), component="c", namespace=sys.argv[2],
               sidecar=sys.argv[1]) as s:
    s["k"] = {"n": 1}
with TaskState(LocalContext(0, batch_id=1), component="c", namespace=sys.argv[2],
               sidecar=sys.argv[1]) as s:
    s["k"]["n"] += 1
    print(s["k"]["n"], s.info.committed_batch)
"""


def run(cmd: list[str], env: dict[str, str], timeout: float = 600) -> str:
    r = subprocess.run(
        cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False,
        cwd="/", start_new_session=True,
    )  # fmt: skip
    assert r.returncode == 0, f"{cmd[:3]} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    # the pinned pandas is one PySpark supports: no warning in the driver or any task
    assert "does not yet fully support pandas" not in r.stderr, r.stderr[-2000:]
    return r.stdout


def test_the_wheel_installs_with_its_extras_and_runs_a_spark_submit(
    wheel: Path, redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    home = tmp_path_factory.mktemp("user")
    venv = home / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    bin_ = venv / "bin"
    env = {
        "PATH": f"{bin_}:{os.environ['PATH']}",
        "HOME": os.environ.get("HOME", str(home)),  # pip's cache: no second download
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": str(bin_ / "python"),
    }
    if "JAVA_HOME" in os.environ:
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    run([str(bin_ / "pip"), "install", "-q", "-c", str(ROOT / "requirements/constraints.txt"),
         f"taskstate[spark,demo] @ {wheel.as_uri()}"], env, timeout=900)  # fmt: skip
    where = run(
        [str(bin_ / "python"), "-c", "import taskstate.client as c; print(c.__file__)"], env
    )
    assert where.startswith(str(venv)), where  # the installed package, not the checkout

    assert "taskstate ls | show | export" in run([str(bin_ / "taskstate"), "--help"], env)
    # the demo and the example job come with the wheel, apart from the library
    for command, says in (("demo", "--faults"), ("example", "--api")):
        assert says in run([str(bin_ / "taskstate"), command, "--help"], env)
    find = "import taskstate.demo.trending as t; print(t.__file__)"
    demo = run([str(bin_ / "python"), "-c", find], env)
    assert demo.startswith(str(venv)), demo

    sock = home / "s.sock"
    side = subprocess.Popen(
        [str(bin_ / "taskstate"), "sidecar", "--redis-url", redis_server.url,
         "--listen", f"unix://{sock}", "--allow-volatile-redis"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        assert side.stdout is not None and "ready" in side.stdout.readline().decode()
        ns = f"wheel-{uuid.uuid4().hex[:6]}"
        out = run([str(bin_ / "python"), "-c", ROUND_TRIP, f"unix://{sock}", ns], env)
        assert out.split() == ["2", "0"]
    finally:
        side.kill()
        side.wait(30)

    pkg = home / "pkg"
    printed = run([str(bin_ / "taskstate"), "spark-package", "--out", str(pkg),
                   "--redis-url", redis_server.url], env)  # fmt: skip
    assert "(the wheel's prebuilt jar)" in printed
    job = home / "job.py"
    job.write_text(JOB)
    result = home / "rows.json"
    ns = f"wheel-submit-{uuid.uuid4().hex[:6]}"
    run([str(bin_ / "spark-submit"), "--master", "local[2]",
         "--jars", str(pkg / "taskstate-plugin.jar"),
         "--conf", "spark.plugins=io.taskstate.spark.TaskStatePlugin",
         "--conf", f"spark.taskstate.redisUrl={redis_server.url}",
         "--conf", f"spark.taskstate.python={bin_ / 'python'}",
         "--conf", "spark.ui.enabled=false",
         str(job), ns, str(result)], env)  # fmt: skip
    rows = json.loads(result.read_text())
    assert sorted(n for n, _, _ in rows) == [20, 20]
    for _, sidecar, client in rows:
        assert sidecar.startswith("unix:///tmp/taskstate-run/jvm-")  # the plugin's sidecar
        assert client.startswith(str(venv))
