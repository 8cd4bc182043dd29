"""The executor plugin and `taskstate spark-package` with a real spark-submit."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import sysconfig
import tarfile
import time
import uuid
from pathlib import Path

import pytest

from taskstate.demo.example import Runner, build_parser
from taskstate.demo.jobs import expected_state, read_output, read_state, state_from_rows
from taskstate.sidecar.storage.redis.keys import data_key
from taskstate.testing import RedisServer

from ...docs_text import block_after

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[3]


def _sidecars() -> dict[int, list[str]]:
    out = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            args = Path(f"/proc/{p}/cmdline").read_bytes().decode().split("\0")
        except OSError:
            continue
        if "taskstate.sidecar" in args and "--parent-pid" in args:
            out[int(p)] = args
    return out


def test_plugin_sidecar_killed_mid_job_is_restarted_and_the_job_is_correct(
    spark_ready: None, redis_server: RedisServer, plugin_jar: str, tmp_path: Path
) -> None:
    """A one-block task (mapInPandas) meets its sidecar's restart without losing its executor.

    With the flush barrier on (the default): both sidecars are killed from outside while a
    batch runs, and partition 0 kills its own sidecar inside its block (the commit waits
    for the new sidecar) and, in a later batch, right after its block (the task's end meets
    a restarting sidecar). Nothing was deferred, so no executor may stop (no fail-stop, no
    exit 70, no executor beyond the first two), and output and state are exact.
    """
    batches, per_batch, keys, parts = 8, 150, 24, 4
    ns = build_parser().parse_args(
        [
            "--batches",
            str(batches),
            "--events-per-batch",
            str(per_batch),
            "--keys",
            str(keys),
            "--partitions",
            str(parts),
            "--namespace-prefix",
            f"plug-{uuid.uuid4().hex[:6]}",
            "--plugin-jar",
            plugin_jar,
        ]
    )
    runner = Runner(tmp_path, redis_server.url, "", ns)
    # what ended executors left (pids above pid_max: never alive): the plugin's executors
    # remove their sockets and journals, and the logs past spark.taskstate.logRetentionHours
    run_dir = Path("/tmp/taskstate-run")
    run_dir.mkdir(exist_ok=True)
    kinds = ("log", "log", "sock", "frames.sock", "barrier.sock", "barrier.journal")
    old_log, new_log, *stale = (run_dir / f"jvm-99999999{i}.{kind}" for i, kind in enumerate(kinds))
    for f in (old_log, new_log, *stale):
        f.write_text("left over\n")
    eight_days = time.time() - 8 * 24 * 3600
    os.utime(old_log, (eight_days, eight_days))
    before = set(_sidecars())
    extra = [
        "--plugin-jar",
        plugin_jar,
        "--redis-url",
        redis_server.url,
        "--master",
        "local-cluster[2,1,1024]",
        "--group-faults",
        "3:block-sidecar,5:task-sidecar",
    ]
    proc = runner.start("job", "taskstate", extra)
    try:
        commits = tmp_path / "job" / "checkpoint" / "commits"
        deadline = time.monotonic() + 300
        while not (commits / "1").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "job ended early"
            time.sleep(0.1)
        victims = {p: args for p, args in _sidecars().items() if p not in before}
        assert len(victims) == 2  # one per executor, started by the plugin
        for p in victims:
            os.kill(p, signal.SIGKILL)
        runner.wait(proc, "job")
    finally:
        runner.kill_all()
    # the executors shut down with the job: their sidecars were stopped with them
    deadline = time.monotonic() + 15
    while set(_sidecars()) - before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert set(_sidecars()) - before == set()
    # each executor's supervisor started a new sidecar: its log shows a second start
    for args in victims.values():
        executor = args[args.index("--parent-pid") + 1]
        log = Path(f"/tmp/taskstate-run/jvm-{executor}.log").read_text()
        assert log.count('"msg":"sidecar ready"') >= 2, log[-2000:]
    faults = tmp_path / "job" / "faults"
    assert (faults / "block-sidecar").exists() and (faults / "task-sidecar").exists()
    # no executor stopped: the application never had more than its first two
    import pyspark

    (app,) = (faults / "app-ids").read_text().split()
    work = Path(pyspark.__file__).parent / "work" / app
    assert sorted(p.name for p in work.iterdir()) == ["0", "1"]
    logs = "\n".join(p.read_text(errors="replace") for p in work.glob("*/stderr"))
    assert "FAIL-STOP" not in logs, logs[-3000:]
    driver_log = (tmp_path / "job" / "query.log").read_text(errors="replace")
    assert re.findall(r"Lost executor .{0,80}", driver_log) == []  # none exited, with 70 or else
    rows = read_output(tmp_path / "job" / "out")
    truth = expected_state(batches, per_batch, keys)
    assert read_state(redis_server.url, f"{ns.namespace_prefix}-job", parts) == truth
    assert state_from_rows(rows) == truth and len(rows) == batches * per_batch
    # the job's tasks found the plugin's sidecars with no TASKSTATE_SIDECAR anywhere
    assert "TASKSTATE_SIDECAR" not in runner.env()
    assert not old_log.exists() and new_log.exists()
    assert [f.name for f in stale if f.exists()] == []
    new_log.unlink()


SUBMIT_JOB = """
import json, sys
from pyspark import TaskContext
from pyspark.sql import SparkSession
import taskstate.client
from taskstate.client import TaskState

NAMESPACE = sys.argv[1]  # read on the driver; the function below is pickled with it

def work(rows):
    ctx = TaskContext.get()
    with TaskState(ctx, component="submitted", namespace=NAMESPACE) as s:
        for r in rows:
            s["n"] = s.get("n", 0) + 1
        yield (ctx.partitionId(), s["n"], s.config.sidecar, taskstate.client.__file__)

spark = SparkSession.builder.getOrCreate()
out = spark.sparkContext.parallelize(range(100), 2).mapPartitions(work).collect()
json.dump({"rows": out, "driver_client": taskstate.client.__file__}, open(sys.argv[2], "w"))
spark.stop()
"""


def test_spark_package_copies_the_jar_the_wheel_carries(wheel: Path, tmp_path: Path) -> None:
    """Installed from the wheel, `taskstate spark-package` compiles nothing: it copies."""
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site),
         str(wheel)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    env = {**os.environ, "PYTHONPATH": f"{site}:{sysconfig.get_paths()['purelib']}"}
    code = (
        "import sys, taskstate.spark_plugin.package as p; "
        "assert p.__file__.startswith(sys.argv[1]), p.__file__; "
        "sys.exit(p.main(['--out', sys.argv[2]]))"
    )
    out = tmp_path / "pkg"
    r = subprocess.run(
        [sys.executable, "-c", code, str(site), str(out)],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "(the wheel's prebuilt jar)" in r.stdout
    shipped = site / "taskstate/spark_plugin/taskstate-plugin.jar"
    assert (out / "taskstate-plugin.jar").read_bytes() == shipped.read_bytes()


def test_spark_package_outputs_run_a_job_with_spark_submit(
    spark_ready: None, redis_server: RedisServer, tmp_path: Path
) -> None:
    pkg = tmp_path / "pkg"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "taskstate.cli.main",
            "spark-package",
            "--out",
            str(pkg),
            "--redis-url",
            redis_server.url,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert "--conf spark.plugins=io.taskstate.spark.TaskStatePlugin" in r.stdout
    job = tmp_path / "job.py"
    job.write_text(SUBMIT_JOB)
    # A Python that has the dependencies but NOT this checkout's taskstate: the job, its
    # workers and the plugin's sidecar must all get taskstate from taskstate-pyfiles.zip.
    base_python = getattr(sys, "_base_executable", sys.executable)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/tmp"),
        "PYTHONPATH": sysconfig.get_paths()["purelib"],
        "PYSPARK_PYTHON": base_python,
        "PYSPARK_DRIVER_PYTHON": base_python,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    if "JAVA_HOME" in os.environ:
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    check = subprocess.run(
        [base_python, "-c", "import taskstate.client"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode != 0, "the test Python must not see the checkout's taskstate"
    ns = f"submit-{uuid.uuid4().hex[:6]}"
    result = tmp_path / "result.json"
    submit = Path(sys.executable).parent / "spark-submit"
    flags = [
        "--master",
        "local[2]",
        "--jars",
        str(pkg / "taskstate-plugin.jar"),
        "--py-files",
        str(pkg / "taskstate-pyfiles.zip"),
        "--conf",
        "spark.plugins=io.taskstate.spark.TaskStatePlugin",
        "--conf",
        f"spark.taskstate.redisUrl={redis_server.url}",
        "--conf",
        f"spark.taskstate.python={base_python}",
        "--conf",
        "spark.ui.enabled=false",
    ]

    def spark_submit(*args: str) -> None:
        r = subprocess.run(
            [str(submit), *flags, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
            start_new_session=True,
        )
        assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]

    # the README's first job, as a user copies it
    first = tmp_path / "first_job.py"
    first.write_text(block_after("first-job", code=True))
    spark_submit(str(first))
    totals = [
        json.loads(v)
        for p in range(8)
        for v in redis_server.client()
        .hgetall(data_key("shop-totals", "running-totals", p))
        .values()
    ]
    assert len(totals) == 10 and sum(t["count"] for t in totals) == 100
    assert sum(t["total"] for t in totals) == sum(range(100))
    spark_submit(str(job), ns, str(result))
    out = json.loads(result.read_text())
    assert "taskstate-pyfiles.zip" in out["driver_client"]
    assert sorted(row[1] for row in out["rows"]) == [50, 50]
    for _, _, sidecar, client_file in out["rows"]:
        assert "taskstate-pyfiles.zip" in client_file
        assert sidecar.startswith("unix:///tmp/taskstate-run/jvm-")  # the plugin's sidecar
    c = redis_server.client()
    assert {c.hget(data_key(ns, "submitted", p), "n") for p in (0, 1)} == {b"50"}


PACKED_JOB = """
import json, sys
from pyspark import TaskContext
from pyspark.sql import SparkSession
import taskstate.client
from taskstate.client import TaskState

NAMESPACE = sys.argv[1]

def work(rows):
    import pyspark
    ctx = TaskContext.get()
    with TaskState(ctx, component="packed", namespace=NAMESPACE) as s:
        for r in rows:
            s["n"] = s.get("n", 0) + 1
        yield (ctx.partitionId(), s["n"], sys.executable, pyspark.__file__,
               taskstate.client.__file__, s.config.sidecar)

spark = SparkSession.builder.getOrCreate()
out = spark.sparkContext.parallelize(range(100), 2).mapPartitions(work).collect()
json.dump({"rows": out, "driver": sys.executable}, open(sys.argv[2], "w"))
spark.stop()
"""


def _printed_flags(stdout: str) -> list[str]:
    """The spark-submit arguments `taskstate spark-package` printed, both blocks."""
    args: list[str] = []
    for line in stdout.splitlines():
        line = line.strip().removesuffix("\\").strip()
        if line.startswith("--"):
            args += line.split(" ", 1)
    return args


def test_the_packed_environment_runs_a_client_mode_job_as_printed(
    spark_ready: None, redis_server: RedisServer, tmp_path: Path
) -> None:
    """`--pack-env` without pyspark, and its flags exactly as printed, in client mode on
    local-cluster: the driver runs here, the executors' workers and the plugin's sidecars
    in ./taskstate-env."""
    pkg = tmp_path / "pkg"
    r = subprocess.run(
        [sys.executable, "-m", "taskstate.cli.main", "spark-package", "--out", str(pkg),
         "--pack-env", "--redis-url", redis_server.url],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    env_tar = pkg / "taskstate-env.tar.gz"
    assert env_tar.stat().st_mode & 0o777 == 0o644
    with tarfile.open(env_tar) as tar:
        top = {n.split("/")[3] for n in tar.getnames() if n.count("/") >= 3}
    assert "grpc" in top and "pandas" in top and "hiredis" in top
    assert not {"pyspark", "py4j"} & top, "the cluster's Spark brings pyspark"
    assert env_tar.stat().st_size < 200 * 2**20
    flags = _printed_flags(r.stdout)
    assert "spark.speculation=false" in flags
    assert f"spark.pyspark.driver.python={sys.executable}" in flags
    job = tmp_path / "job.py"
    job.write_text(PACKED_JOB)
    ns = f"packed-{uuid.uuid4().hex[:6]}"
    result = tmp_path / "result.json"
    # this venv activated (its python3 finds SPARK_HOME), and no PYSPARK_* variables:
    # the printed flags alone choose the driver's and the executors' Pythons
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    env = {"PATH": path, "HOME": os.environ.get("HOME", "/tmp"), "SPARK_LOCAL_IP": "127.0.0.1"}
    if "JAVA_HOME" in os.environ:
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    submit = Path(sys.executable).parent / "spark-submit"
    r = subprocess.run(
        [str(submit), "--master", "local-cluster[2,1,1024]", "--deploy-mode", "client",
         "--conf", "spark.ui.enabled=false", "--conf", "spark.executor.memory=768m",
         *flags, str(job), ns, str(result)],
        env=env, capture_output=True, text=True, timeout=600, check=False,
        start_new_session=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-4000:]
    out = json.loads(result.read_text())
    assert out["driver"] == sys.executable
    assert sorted(row[1] for row in out["rows"]) == [50, 50]
    for _, _, python, pyspark_file, client_file, sidecar in out["rows"]:
        assert python.endswith("taskstate-env/bin/python"), python
        assert "pyspark.zip" in pyspark_file, pyspark_file  # Spark's own, not the env's
        assert "taskstate-pyfiles.zip" in client_file
        assert sidecar.startswith("unix:///tmp/taskstate-run/jvm-")  # the plugin's sidecar
    c = redis_server.client()
    assert {c.hget(data_key(ns, "packed", p), "n") for p in (0, 1)} == {b"50"}
